package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The operations' keys. An operation is operations/<id>, its tasks
// tasks/<id>/<unit>, their checkpoints checkpoints/<id>/<unit>; a
// machine's last heartbeat is heartbeats/<machine>. Ids are 20 digits, so
// that keys sort by number.
//
// The references a rule relies on each have a key, as the model's do.
// Those of open tasks live under refs/ and go when the task closes (or,
// for a removed unit, when the cleaner closes it): the model's empty, they
// are too. Those that last as long as the operation live under
// operation-refs/ and go when it is pruned.
const (
	operationsPrefix  = "operations/"
	tasksPrefix       = "tasks/"
	checkpointsPrefix = "checkpoints/"
	heartbeatsPrefix  = "heartbeats/"
	seqOperation      = seqPrefix + "operation"

	refOpOpen         = "refs/op-open/"         // <op>/<unit> = the open task's state (taskRefValue)
	refUnitTasks      = "refs/unit-tasks/"      // <unit>/<op> = the open task's state
	refOpSlots        = "refs/op-slots/"        // <op>/<unit>: holds one of max_parallel slots
	refOpQueue        = "refs/op-queue/"        // <op>/<unit>: pending, waiting for a slot
	refMachineRunning = "refs/machine-running/" // <machine>/<op>/<unit>: running, pausing or stopping there
	refLostTasks      = "refs/lost-tasks/"      // <op>/<unit>

	operationRefsPrefix = "operation-refs/"
	opRefOpen           = operationRefsPrefix + "open/"    // <op> = the open operation's state
	opRefFailed         = operationRefsPrefix + "failed/"  // <op>/<unit>
	opRefStopped        = operationRefsPrefix + "stopped/" // <op>/<unit>
	// opRefFreed is put by a change that frees a slot with no task queued:
	// a change that queues a task compares it (tasks.go).
	opRefFreed = operationRefsPrefix + "freed/" // <op>
	// opRefMade holds, while a running operation's tasks are being made,
	// how many targets of each part of its targets (in order) have theirs,
	// and how many parts are done: each batch rewrites its part's count,
	// the last of a part counts it done, and the last of all deletes them
	// (materializeBatch).
	opRefMade = operationRefsPrefix + "made/" // <op>/<part> = a count; <op>/done = parts done
)

// operationPrefixes are the prefixes of the operations' records, read by
// Snapshot besides the model's.
var operationPrefixes = []string{operationsPrefix, tasksPrefix, checkpointsPrefix, heartbeatsPrefix, operationRefsPrefix, taskLogsPrefix}

// operationRefPrefixes are the prefixes of refs/ that the operations'
// invariants check (checkOperations), not the model's.
var operationRefPrefixes = []string{refOpOpen, refUnitTasks, refOpSlots, refOpQueue, refMachineRunning, refLostTasks}

func isOperationRef(key string) bool {
	for _, p := range operationRefPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// opID is an operation's id as its keys hold it.
func opID(id int64) string { return fmt.Sprintf("%020d", id) }

// parseOpID parses an id of 20 digits.
func parseOpID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || len(s) != 20 || n < 1 {
		return 0, fmt.Errorf("operation id %q: want a positive number of 20 digits", s)
	}
	return n, nil
}

// OperationKey is the key of operation id.
func OperationKey(id int64) string { return operationsPrefix + opID(id) }

// OperationsPrefix is where the operations are, for watching them.
const OperationsPrefix = operationsPrefix

// TasksPrefix is the prefix of operation id's tasks.
func TasksPrefix(id int64) string { return tasksPrefix + opID(id) + "/" }

// TaskKey is the key of the named unit's task of operation id.
func TaskKey(id int64, unit string) string { return TasksPrefix(id) + unit }

// CheckpointKey is the key of the named unit's checkpoint in operation id.
func CheckpointKey(id int64, unit string) string {
	return checkpointsPrefix + opID(id) + "/" + unit
}

// HeartbeatKey is the key of the machine's last heartbeat.
func HeartbeatKey(machine string) string { return heartbeatsPrefix + machine }

// UnitTasksPrefix is the prefix of the unit's open tasks, one key an
// operation, its value what the unit's agent is to do (taskRefValue): the
// unit agent's watch.
func UnitTasksPrefix(unit string) string { return refUnitTasks + unit + "/" }

func unitTaskRef(unit string, id int64) string { return UnitTasksPrefix(unit) + opID(id) }
func opOpenPrefix(id int64) string             { return refOpOpen + opID(id) + "/" }
func opOpenRef(id int64, unit string) string   { return opOpenPrefix(id) + unit }
func opSlotsPrefix(id int64) string            { return refOpSlots + opID(id) + "/" }
func opSlotRef(id int64, unit string) string   { return opSlotsPrefix(id) + unit }
func opQueuePrefix(id int64) string            { return refOpQueue + opID(id) + "/" }
func opQueueRef(id int64, unit string) string  { return opQueuePrefix(id) + unit }
func lostPrefix(id int64) string               { return refLostTasks + opID(id) + "/" }
func lostRef(id int64, unit string) string     { return lostPrefix(id) + unit }
func machineRunningPrefix(m string) string     { return refMachineRunning + m + "/" }
func machineRunningRef(m string, id int64, unit string) string {
	return machineRunningPrefix(m) + opID(id) + "/" + unit
}
func opFailedPrefix(id int64) string            { return opRefFailed + opID(id) + "/" }
func opFailedRef(id int64, unit string) string  { return opFailedPrefix(id) + unit }
func opStoppedPrefix(id int64) string           { return opRefStopped + opID(id) + "/" }
func opStoppedRef(id int64, unit string) string { return opStoppedPrefix(id) + unit }
func opOpenOpRef(id int64) string               { return opRefOpen + opID(id) }
func opFreedRef(id int64) string                { return opRefFreed + opID(id) }
func opMadePrefix(id int64) string              { return opRefMade + opID(id) + "/" }
func opMadeRef(id int64, part int) string       { return opMadePrefix(id) + strconv.Itoa(part) }
func opMadeDoneRef(id int64) string             { return opMadePrefix(id) + "done" }

// The values of an open task's references (refs/unit-tasks, refs/op-open):
// what its unit's agent is to do about it.
const (
	taskQueued   = "queued"  // pending, waiting for a slot
	taskAdmitted = "pending" // pending with a slot: start it
	taskRunning  = "running"
	taskPausing  = "pausing"
	taskPaused   = "paused"
	taskStopping = "stopping"
	taskLost     = "lost"
)

// taskRefValue is the value of an open task's references.
func taskRefValue(st pb.TaskState, admitted bool) string {
	switch st {
	case pb.TaskState_TASK_STATE_PENDING:
		if admitted {
			return taskAdmitted
		}
		return taskQueued
	case pb.TaskState_TASK_STATE_RUNNING:
		return taskRunning
	case pb.TaskState_TASK_STATE_PAUSING:
		return taskPausing
	case pb.TaskState_TASK_STATE_PAUSED:
		return taskPaused
	case pb.TaskState_TASK_STATE_STOPPING:
		return taskStopping
	case pb.TaskState_TASK_STATE_LOST:
		return taskLost
	}
	return ""
}

// OperationStateName is the state as ctl shows it: "awaiting-approval".
func OperationStateName(st pb.OperationState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(st.String(), "OPERATION_STATE_")), "_", "-")
}

// TaskStateName is the state as ctl shows it: "running".
func TaskStateName(st pb.TaskState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "TASK_STATE_"))
}

// operationOpen says whether an operation in state st may still change
// by itself: it is awaiting approval, approved or running.
func operationOpen(st pb.OperationState) bool {
	switch st {
	case pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL, pb.OperationState_OPERATION_STATE_APPROVED,
		pb.OperationState_OPERATION_STATE_RUNNING:
		return true
	}
	return false
}

// taskOpen says whether a task in state st is open: not done, failed or
// stopped.
func taskOpen(st pb.TaskState) bool {
	switch st {
	case pb.TaskState_TASK_STATE_DONE, pb.TaskState_TASK_STATE_FAILED, pb.TaskState_TASK_STATE_STOPPED:
		return false
	}
	return true
}

// taskOnMachine says whether a task in state st runs on its machine (its
// process is there, or is being ended).
func taskOnMachine(st pb.TaskState) bool {
	switch st {
	case pb.TaskState_TASK_STATE_RUNNING, pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_STOPPING:
		return true
	}
	return false
}

// OperationDigest is the hex SHA-256 of what op will run: the canonical
// JSON of its service, action, targets, parameters, the charm's sha256
// and revision, and its requester. An approval names it: the approver
// approves exactly that.
func OperationDigest(op *pb.Operation) string {
	type charm struct {
		Revision int64  `json:"revision"`
		Sha256   string `json:"sha256"`
	}
	params := json.RawMessage(op.ParamsJson)
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	units := op.Units
	if units == nil {
		units = []string{}
	}
	v := struct {
		Service   string          `json:"service"`
		Action    string          `json:"action"`
		Units     []string        `json:"units"`
		Params    json.RawMessage `json:"params"`
		Charm     charm           `json:"charm"`
		Requester string          `json:"requester"`
	}{op.Service, op.Action, units, params, charm{op.Charm.GetRevision(), op.Charm.GetSha256()}, op.Requester}
	b, err := canonicalJSON(v)
	if err != nil {
		// params_json is canonical JSON, checked when the operation was made.
		panic(fmt.Sprintf("state: digest of operation %d: %v", op.Id, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON encodes v with sorted keys, no spaces and no HTML
// escaping.
func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// CanonicalParams returns params, a JSON object, in canonical form: keys
// sorted, no spaces, numbers as written.
func CanonicalParams(params []byte) ([]byte, error) {
	if len(bytes.TrimSpace(params)) == 0 {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalidf("parameters are not JSON: %v", err)
	}
	if dec.More() {
		return nil, invalidf("parameters are not one JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, invalidf("parameters are not a JSON object")
	}
	b, err := canonicalJSON(v)
	if err != nil {
		return nil, invalidf("parameters: %v", err)
	}
	return b, nil
}
