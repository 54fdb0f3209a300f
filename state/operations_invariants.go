package state

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// checkOperations checks the operations, their tasks and every reference
// they keep: each record at its key, ids within seq/operation, digests
// that recompute; states on the diagrams; an operation's tasks only once
// it runs, and an ended one with none open (DONE: all done); a running
// one whose tasks are all made with one open; a task's unit there, or
// the task closed, or the unit's unit-tasks cleanup item there; the
// references exactly those the tasks' states call for, both ways; at
// most max_parallel slots, and none free while a task is queued; a
// heartbeat for every machine a task runs on; the limits.
func checkOperations(snap *Snapshot, m *model, bad func(string, ...any)) {
	var last int64
	if v, ok := snap.Values[seqOperation]; ok {
		last, _ = strconv.ParseInt(string(v), 10, 64)
	}
	ops := map[int64]*pb.Operation{}
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, operationsPrefix) {
			continue
		}
		id, err := parseOpID(strings.TrimPrefix(k, operationsPrefix))
		if err != nil {
			bad("%v", err)
			continue
		}
		op := &pb.Operation{}
		if err := proto.Unmarshal(v, op); err != nil {
			bad("%s: undecodable value: %v", k, err)
			continue
		}
		ops[id] = op
		checkOperation(snap, k, id, last, op, bad)
	}
	// want are the references the tasks call for, with their values.
	want := map[string]string{}
	tasksOf := map[int64]map[string]*pb.Task{}
	openOf := map[string]int{}
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, tasksPrefix) {
			continue
		}
		opStr, unit, _ := strings.Cut(strings.TrimPrefix(k, tasksPrefix), "/")
		id, err := parseOpID(opStr)
		if err != nil || !names.ValidUnit(unit) {
			bad("task key %s: want tasks/<operation>/<unit>", k)
			continue
		}
		t := &pb.Task{}
		if err := proto.Unmarshal(v, t); err != nil {
			bad("%s: undecodable value: %v", k, err)
			continue
		}
		if t.Operation != id || t.Unit != unit {
			bad("task key %s holds task %s of operation %d", k, t.Unit, t.Operation)
		}
		if tasksOf[id] == nil {
			tasksOf[id] = map[string]*pb.Task{}
		}
		tasksOf[id][unit] = t
		op := ops[id]
		if op == nil {
			bad("%s of operation %d, which does not exist", taskName(id, unit), id)
			continue
		}
		if open := taskOpen(t.State); open {
			openOf[unit]++
		}
		checkTask(snap, m, op, t, want, bad)
	}
	for unit, n := range openOf {
		if n > MaxOpenTasksPerUnit {
			bad("unit %s has %d open tasks, over the limit of %d", unit, n, MaxOpenTasksPerUnit)
		}
	}
	openOps := 0
	for id, op := range ops {
		if operationOpen(op.State) {
			openOps++
			want[opOpenOpRef(id)] = OperationStateName(op.State)
		}
		if !op.TasksCreated && len(tasksOf[id]) > 0 {
			checkMade(op, tasksOf[id], want, bad)
		}
		checkOperationTasks(snap, id, op, tasksOf[id], bad)
	}
	if openOps > MaxOpenOperations {
		bad("%d open operations, over the limit of %d", openOps, MaxOpenOperations)
	}
	for k, v := range snap.Values {
		if !isOperationRef(k) && !strings.HasPrefix(k, operationRefsPrefix) {
			continue
		}
		if strings.HasPrefix(k, opRefFreed) {
			if id, err := parseOpID(strings.TrimPrefix(k, opRefFreed)); err != nil || ops[id] == nil {
				bad("%s of an operation that does not exist", k)
			}
			continue
		}
		w, ok := want[k]
		switch {
		case !ok:
			bad("refs: %s is not a reference any task or operation calls for", k)
		case w != string(v):
			bad("refs: %s holds %q, want %q", k, v, w)
		}
	}
	for k, w := range want {
		if _, ok := snap.Values[k]; !ok {
			bad("refs: %s (%q) is missing", k, w)
		}
	}
	for k, v := range snap.Values {
		switch {
		case strings.HasPrefix(k, checkpointsPrefix):
			opStr, unit, _ := strings.Cut(strings.TrimPrefix(k, checkpointsPrefix), "/")
			id, err := parseOpID(opStr)
			if err != nil || tasksOf[id][unit] == nil {
				bad("checkpoint %s of a task that does not exist", k)
			}
			cp := &pb.Checkpoint{}
			if err := proto.Unmarshal(v, cp); err != nil {
				bad("%s: undecodable value: %v", k, err)
			} else if n := mapBytes(cp.Values); n > MaxCheckpointBytes {
				bad("checkpoint %s holds %d bytes, over %d", k, n, MaxCheckpointBytes)
			}
		case strings.HasPrefix(k, heartbeatsPrefix):
			hb := &pb.TaskHeartbeat{}
			if !names.ValidMachine(strings.TrimPrefix(k, heartbeatsPrefix)) {
				bad("heartbeat key %s names no machine", k)
			}
			if err := proto.Unmarshal(v, hb); err != nil || hb.UnixNano <= 0 {
				bad("%s: not a heartbeat with its time (%v)", k, err)
			}
		}
	}
	checkTaskLogs(snap, func(id int64, unit string) bool { return tasksOf[id][unit] != nil }, bad)
	for k, item := range m.cleanups {
		if item.Kind == pb.CleanupKind_CLEANUP_KIND_UNIT_TASKS && m.units[item.Target] != nil {
			bad("cleanup %s for unit %s, which exists", k, item.Target)
		}
	}
}

// checkOperation checks an operation's record on its own.
func checkOperation(snap *Snapshot, k string, id, last int64, op *pb.Operation, bad func(string, ...any)) {
	what := opName(id)
	switch {
	case op.Id != id:
		bad("operation key %s holds operation %d", k, op.Id)
	case id > last:
		bad("I7: %s is past its sequence %d", what, last)
	case op.State <= pb.OperationState_OPERATION_STATE_UNSPECIFIED || op.State > pb.OperationState_OPERATION_STATE_STOPPED:
		bad("%s has no valid state (%v)", what, op.State)
	case op.Digest != OperationDigest(op):
		bad("%s: digest %s does not recompute", what, op.Digest)
	case (op.State == pb.OperationState_OPERATION_STATE_INVALID) != (len(op.Errors) > 0):
		bad("%s is %s with %d validation errors", what, OperationStateName(op.State), len(op.Errors))
	case !slices.IsSorted(op.Units) || len(slices.Compact(slices.Clone(op.Units))) != len(op.Units) || len(op.Units) == 0:
		bad("%s: its targets are not sorted, distinct and some", what)
	case len(op.Units) > MaxOperationTargets:
		bad("%s has %d targets, over %d", what, len(op.Units), MaxOperationTargets)
	case len(op.ParamsJson) > MaxParamsBytes:
		bad("%s: parameters of %d bytes, over %d", what, len(op.ParamsJson), MaxParamsBytes)
	case operationOpen(op.State) != (op.FinishedUnixNano == 0):
		bad("%s is %s with finished time %d", what, OperationStateName(op.State), op.FinishedUnixNano)
	case (op.State == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL || op.State == pb.OperationState_OPERATION_STATE_APPROVED) && op.ExpiresUnixNano == 0:
		bad("%s is %s without an expiry", what, OperationStateName(op.State))
	case op.State == pb.OperationState_OPERATION_STATE_APPROVED && (op.Approver == "" || op.Approver == op.Requester):
		bad("%s is approved by %q, its requester %s", what, op.Approver, op.Requester)
	}
}

// checkTask checks a task against its operation and its unit, and adds
// the references it calls for to want.
func checkTask(snap *Snapshot, m *model, op *pb.Operation, t *pb.Task, want map[string]string, bad func(string, ...any)) {
	id, unit := op.Id, t.Unit
	what := taskName(id, unit)
	if _, ok := slices.BinarySearch(op.Units, unit); !ok {
		bad("%s: %s is not one of its targets", what, unit)
	}
	switch op.State {
	case pb.OperationState_OPERATION_STATE_RUNNING, pb.OperationState_OPERATION_STATE_DONE,
		pb.OperationState_OPERATION_STATE_FAILED, pb.OperationState_OPERATION_STATE_STOPPED:
	default:
		bad("%s exists, but the operation is %s", what, OperationStateName(op.State))
	}
	if t.State <= pb.TaskState_TASK_STATE_UNSPECIFIED || t.State > pb.TaskState_TASK_STATE_LOST {
		bad("%s has no valid state (%v)", what, t.State)
		return
	}
	started := t.State != pb.TaskState_TASK_STATE_PENDING && t.State != pb.TaskState_TASK_STATE_PAUSED && t.State != pb.TaskState_TASK_STATE_STOPPED
	if started && t.Attempt < 1 {
		bad("%s is %s at attempt %d", what, TaskStateName(t.State), t.Attempt)
	}
	open := taskOpen(t.State)
	if open && op.State != pb.OperationState_OPERATION_STATE_RUNNING {
		bad("%s is %s, but the operation is %s", what, TaskStateName(t.State), OperationStateName(op.State))
	}
	if _, ok := m.units[unit]; !ok && open {
		if _, ok := snap.Values[cleanupKey(cleanupUnitTasks, unit)]; !ok {
			bad("%s is %s, its unit gone without a unit-tasks cleanup item", what, TaskStateName(t.State))
		}
	}
	if len(t.Message) > MaxTaskMessageBytes || mapBytes(t.Results) > MaxResultsBytes {
		bad("%s: message or results over their limits", what)
	}
	slots := op.MaxParallel > 0
	switch {
	case !open:
		switch t.State {
		case pb.TaskState_TASK_STATE_FAILED:
			want[opFailedRef(id, unit)] = ""
		case pb.TaskState_TASK_STATE_STOPPED:
			want[opStoppedRef(id, unit)] = ""
		}
		return
	case t.State == pb.TaskState_TASK_STATE_PENDING:
		// Admitted or queued, as its references say.
		v := string(snap.Values[opOpenRef(id, unit)])
		if v != taskAdmitted && (v != taskQueued || !slots) {
			bad("%s is pending, its reference says %q", what, v)
		}
		want[opOpenRef(id, unit)], want[unitTaskRef(unit, id)] = v, v
		if slots && v == taskAdmitted {
			want[opSlotRef(id, unit)] = ""
		} else if slots {
			want[opQueueRef(id, unit)] = ""
		}
		return
	}
	v := taskRefValue(t.State, false)
	want[opOpenRef(id, unit)], want[unitTaskRef(unit, id)] = v, v
	switch {
	case taskOnMachine(t.State):
		want[machineRunningRef(t.Machine, id, unit)] = ""
		if slots {
			want[opSlotRef(id, unit)] = ""
		}
		if _, ok := snap.Values[HeartbeatKey(t.Machine)]; !ok {
			bad("%s is %s on machine %s, which has no heartbeat record", what, TaskStateName(t.State), t.Machine)
		}
	case t.State == pb.TaskState_TASK_STATE_LOST:
		want[lostRef(id, unit)] = ""
	}
}

// checkOperationTasks checks an operation against its tasks.
func checkOperationTasks(snap *Snapshot, id int64, op *pb.Operation, tasks map[string]*pb.Task, bad func(string, ...any)) {
	what := opName(id)
	var open, failed, stopped, slots, queued int
	for unit, t := range tasks {
		if taskOpen(t.State) {
			open++
		}
		switch t.State {
		case pb.TaskState_TASK_STATE_FAILED:
			failed++
		case pb.TaskState_TASK_STATE_STOPPED:
			stopped++
		}
		if _, ok := snap.Values[opSlotRef(id, unit)]; ok {
			slots++
		}
		if _, ok := snap.Values[opQueueRef(id, unit)]; ok {
			queued++
		}
	}
	ended := op.State == pb.OperationState_OPERATION_STATE_DONE || op.State == pb.OperationState_OPERATION_STATE_FAILED ||
		op.State == pb.OperationState_OPERATION_STATE_STOPPED
	switch {
	case op.TasksCreated && len(tasks) != len(op.Units):
		bad("%s has %d tasks of its %d targets, all made", what, len(tasks), len(op.Units))
	case (op.TasksCreated || ended) && op.State != pb.OperationState_OPERATION_STATE_RUNNING && !ended:
		bad("%s is %s with its tasks made", what, OperationStateName(op.State))
	case ended && (!op.TasksCreated || open > 0):
		bad("%s is %s with %d open tasks (all made: %v)", what, OperationStateName(op.State), open, op.TasksCreated)
	case op.State == pb.OperationState_OPERATION_STATE_RUNNING && op.TasksCreated && open == 0:
		bad("%s is running with all its tasks closed: nobody will end it", what)
	case op.State == pb.OperationState_OPERATION_STATE_DONE && failed+stopped > 0,
		op.State == pb.OperationState_OPERATION_STATE_FAILED && failed == 0,
		op.State == pb.OperationState_OPERATION_STATE_STOPPED && (failed > 0 || stopped == 0):
		bad("%s is %s with %d failed and %d stopped tasks", what, OperationStateName(op.State), failed, stopped)
	}
	if op.MaxParallel > 0 {
		if slots > int(op.MaxParallel) {
			bad("%s: %d tasks hold a slot, over its max-parallel %d", what, slots, op.MaxParallel)
		}
		if slots < int(op.MaxParallel) && queued > 0 {
			bad("%s: %d tasks queued while %d of its %d slots are free", what, queued, int(op.MaxParallel)-slots, op.MaxParallel)
		}
	}
}

// checkMade checks the tasks of an operation still being made: each
// part of its targets (makeParts) has the tasks of its first targets,
// counted by its opMadeRef when it has any, and the parts with all
// theirs are counted done.
func checkMade(op *pb.Operation, tasks map[string]*pb.Task, want map[string]string, bad func(string, ...any)) {
	id, parts, done := op.Id, makeParts(op), 0
	for p := range parts {
		lo, hi := makePart(len(op.Units), parts, p)
		n := 0
		for n < hi-lo && tasks[op.Units[lo+n]] != nil {
			n++
		}
		for _, u := range op.Units[lo+n : hi] {
			if tasks[u] != nil {
				bad("%s has a task of %s, not of the first %d targets of its part %d alone", opName(id), u, n, p)
				break
			}
		}
		if n > 0 {
			want[opMadeRef(id, p)] = strconv.Itoa(n)
		}
		if n == hi-lo {
			done++
		}
	}
	if done > 0 {
		want[opMadeDoneRef(id)] = strconv.Itoa(done)
	}
}
