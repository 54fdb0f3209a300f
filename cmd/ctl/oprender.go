package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// How ctl shows operations, their tasks and the charms' actions.

// stateName is an operation's or a task's state as ctl shows it:
// OPERATION_STATE_AWAITING_APPROVAL is awaiting-approval.
func stateName(enum fmt.Stringer, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(enum.String(), prefix)), "_", "-")
}

func opState(s pb.OperationState) string { return stateName(s, "OPERATION_STATE_") }
func taskState(s pb.TaskState) string    { return stateName(s, "TASK_STATE_") }

// parseOpState is a state named on the command line.
func parseOpState(name string) (pb.OperationState, bool) {
	for v := range pb.OperationState_name {
		if s := pb.OperationState(v); s != 0 && opState(s) == name {
			return s, true
		}
	}
	return 0, false
}

// unitList names units, the first few of many.
func unitList(units []string) string {
	const show = 10
	if len(units) <= show {
		return strings.Join(units, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(units[:show], " "), len(units)-show)
}

// runLine is what ctl run and ctl execute say of an operation:
// "operation 7: backup on kv/0 kv/1: awaiting approval by alice or an admin".
func runLine(op *pb.Operation, who string) string {
	line := fmt.Sprintf("operation %d: %s on %s: ", op.GetId(), op.GetAction(), unitList(op.GetUnits()))
	if op.GetState() == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL {
		if who == "" {
			who = "an admin"
		}
		return line + "awaiting approval by " + who
	}
	return line + strings.ReplaceAll(opState(op.GetState()), "-", " ")
}

// progressLine says how an operation's tasks go: "operation 7: 3/10
// done, 2 running, 1 failed".
func progressLine(id int64, counts map[string]int64) string {
	var total int64
	for _, n := range counts {
		total += n
	}
	parts := []string{fmt.Sprintf("%d/%d done", counts["done"], total)}
	for _, st := range []string{"running", "pending", "pausing", "paused", "stopping", "lost", "stopped", "failed"} {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return fmt.Sprintf("operation %d: %s", id, strings.Join(parts, ", "))
}

// writeDoc writes v as a JSON or YAML document.
func writeDoc(w io.Writer, v any, format string) error {
	if format == formatJSON {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(data, '\n'))
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

type actionDoc struct {
	Name        string          `json:"name" yaml:"name"`
	Description string          `json:"description" yaml:"description"`
	Safe        bool            `json:"safe" yaml:"safe"`
	Approvers   []string        `json:"approvers" yaml:"approvers"`
	Parallel    bool            `json:"parallel" yaml:"parallel"`
	MaxParallel int32           `json:"max_parallel" yaml:"max_parallel"`
	Timeout     string          `json:"timeout" yaml:"timeout"`
	PauseGrace  string          `json:"pause_grace" yaml:"pause_grace"`
	Params      json.RawMessage `json:"params" yaml:"-"`
	ParamsYAML  any             `json:"-" yaml:"params"`
}

// paramNames lists an action's parameters from its schema: "name*"
// for a required one, "compress=false" for one with a default.
func paramNames(schema []byte) string {
	var s struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return "-"
	}
	var out []string
	for name, p := range s.Properties {
		switch {
		case slices.Contains(s.Required, name):
			name += "*"
		case p.Default != nil:
			d, _ := json.Marshal(p.Default)
			name += "=" + string(d)
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func renderActions(w io.Writer, resp *pb.ListActionsResponse, format string) error {
	if format != formatTabular {
		docs := []actionDoc{}
		for _, a := range resp.Actions {
			var params any
			_ = json.Unmarshal(a.ParamsSchemaJson, &params)
			docs = append(docs, actionDoc{
				Name: a.Name, Description: a.Description, Safe: a.Safe, Approvers: nonNil(a.Approvers), Parallel: a.Parallel,
				MaxParallel: a.MaxParallel, Timeout: time.Duration(a.TimeoutMs * 1e6).String(),
				PauseGrace: time.Duration(a.PauseGraceMs * 1e6).String(), Params: a.ParamsSchemaJson, ParamsYAML: params,
			})
		}
		return writeDoc(w, map[string]any{"service": resp.Service, "charm": resp.Charm.GetName(),
			"revision": resp.Charm.GetRevision(), "actions": docs}, format)
	}
	if len(resp.Actions) == 0 {
		_, err := fmt.Fprintf(w, "Service %s's charm (%s revision %d) has no actions.\n", resp.Service, resp.Charm.GetName(), resp.Charm.GetRevision())
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "Action\tSafe\tApprovers\tParameters\tDescription")
	for _, a := range resp.Actions {
		approvers := "-"
		if !a.Safe {
			approvers = strings.Join(a.Approvers, ",")
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", a.Name, yesNo(a.Safe), approvers, paramNames(a.ParamsSchemaJson), a.Description)
	}
	return t.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func when(unixNano int64) string {
	if unixNano == 0 {
		return ""
	}
	return time.Unix(0, unixNano).Local().Format(time.RFC3339)
}

type operationBriefDoc struct {
	ID        int64  `json:"id" yaml:"id"`
	Service   string `json:"service" yaml:"service"`
	Action    string `json:"action" yaml:"action"`
	State     string `json:"state" yaml:"state"`
	Requester string `json:"requester" yaml:"requester"`
	Units     int32  `json:"units" yaml:"units"`
	Created   string `json:"created" yaml:"created"`
	Finished  string `json:"finished,omitempty" yaml:"finished,omitempty"`
	Approver  string `json:"approver,omitempty" yaml:"approver,omitempty"`
}

func renderOperations(w io.Writer, ops []*pb.OperationBrief, format string) error {
	if format != formatTabular {
		docs := []operationBriefDoc{}
		for _, o := range ops {
			docs = append(docs, operationBriefDoc{ID: o.Id, Service: o.Service, Action: o.Action, State: opState(o.State),
				Requester: o.Requester, Units: o.Units, Created: when(o.CreatedUnixNano), Finished: when(o.FinishedUnixNano), Approver: o.Approver})
		}
		return writeDoc(w, map[string]any{"operations": docs}, format)
	}
	if len(ops) == 0 {
		_, err := fmt.Fprintln(w, "No operations: run an action with ctl run.")
		return err
	}
	t := newTable(w)
	fmt.Fprintln(t, "Id\tService\tAction\tState\tUnits\tRequester\tApprover\tCreated")
	for _, o := range ops {
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", o.Id, o.Service, o.Action, opState(o.State), o.Units, o.Requester, o.Approver, when(o.CreatedUnixNano))
	}
	return t.Flush()
}

type taskDoc struct {
	Unit      string            `json:"unit" yaml:"unit"`
	State     string            `json:"state" yaml:"state"`
	Machine   string            `json:"machine,omitempty" yaml:"machine,omitempty"`
	Attempt   int64             `json:"attempt" yaml:"attempt"`
	Resumed   int64             `json:"resumed,omitempty" yaml:"resumed,omitempty"`
	Started   string            `json:"started,omitempty" yaml:"started,omitempty"`
	Finished  string            `json:"finished,omitempty" yaml:"finished,omitempty"`
	Heartbeat string            `json:"heartbeat_age,omitempty" yaml:"heartbeat_age,omitempty"`
	Message   string            `json:"message,omitempty" yaml:"message,omitempty"`
	Results   map[string]string `json:"results,omitempty" yaml:"results,omitempty"`
	// Checkpoint are the keys of its checkpoint (show-task).
	Checkpoint []string `json:"checkpoint_keys,omitempty" yaml:"checkpoint_keys,omitempty"`
}

// heartbeatAge is how a task's machine's last report reads: "3s ago",
// "never"; "" for a task not on a machine.
func heartbeatAge(t *pb.TaskInfo) string {
	switch {
	case t.GetHeartbeatAgeMs() < 0:
		return "never"
	case t.GetHeartbeatAgeMs() == 0 && !taskOnMachine(t.GetTask().GetState()):
		return ""
	}
	return (time.Duration(t.GetHeartbeatAgeMs()) * time.Millisecond).Round(time.Second).String() + " ago"
}

func taskOnMachine(s pb.TaskState) bool {
	return s == pb.TaskState_TASK_STATE_RUNNING || s == pb.TaskState_TASK_STATE_PAUSING || s == pb.TaskState_TASK_STATE_STOPPING
}

func taskDocument(info *pb.TaskInfo) taskDoc {
	t := info.GetTask()
	return taskDoc{Unit: t.Unit, State: taskState(t.State), Machine: t.Machine, Attempt: t.Attempt, Resumed: t.Resumed,
		Started: when(t.StartedUnixNano), Finished: when(t.FinishedUnixNano), Heartbeat: heartbeatAge(info),
		Message: t.Message, Results: t.Results, Checkpoint: info.CheckpointKeys}
}

type operationDoc struct {
	ID            int64            `json:"id" yaml:"id"`
	Service       string           `json:"service" yaml:"service"`
	Action        string           `json:"action" yaml:"action"`
	State         string           `json:"state" yaml:"state"`
	Units         []string         `json:"units" yaml:"units"`
	Params        json.RawMessage  `json:"params" yaml:"-"`
	ParamsYAML    any              `json:"-" yaml:"params"`
	Charm         string           `json:"charm" yaml:"charm"`
	Revision      int64            `json:"charm_revision" yaml:"charm_revision"`
	Requester     string           `json:"requester" yaml:"requester"`
	Digest        string           `json:"digest" yaml:"digest"`
	Approvers     []string         `json:"approvers,omitempty" yaml:"approvers,omitempty"`
	WhoMayApprove string           `json:"who_may_approve,omitempty" yaml:"who_may_approve,omitempty"`
	Approver      string           `json:"approver,omitempty" yaml:"approver,omitempty"`
	RejectedBy    string           `json:"rejected_by,omitempty" yaml:"rejected_by,omitempty"`
	Reason        string           `json:"reason,omitempty" yaml:"reason,omitempty"`
	ExecutedBy    string           `json:"executed_by,omitempty" yaml:"executed_by,omitempty"`
	Created       string           `json:"created" yaml:"created"`
	Expires       string           `json:"expires,omitempty" yaml:"expires,omitempty"`
	Finished      string           `json:"finished,omitempty" yaml:"finished,omitempty"`
	MaxParallel   int32            `json:"max_parallel" yaml:"max_parallel"`
	Errors        []string         `json:"errors,omitempty" yaml:"errors,omitempty"`
	TaskCounts    map[string]int64 `json:"task_counts" yaml:"task_counts"`
	Tasks         []taskDoc        `json:"tasks" yaml:"tasks"`
	// More says the tasks shown are the first of more.
	More bool `json:"more_tasks,omitempty" yaml:"more_tasks,omitempty"`
}

func operationDocument(resp *pb.ShowOperationResponse) operationDoc {
	op := resp.GetOperation()
	var params any
	_ = json.Unmarshal(op.ParamsJson, &params)
	doc := operationDoc{
		ID: op.Id, Service: op.Service, Action: op.Action, State: opState(op.State), Units: nonNil(op.Units),
		Params: op.ParamsJson, ParamsYAML: params, Charm: op.Charm.GetName(), Revision: op.Charm.GetRevision(),
		Requester: op.Requester, Digest: op.Digest, Approvers: op.Approvers, WhoMayApprove: resp.WhoMayApprove,
		Approver: op.Approver, RejectedBy: op.RejectedBy, Reason: op.Reason, ExecutedBy: op.ExecutedBy,
		Created: when(op.CreatedUnixNano), Expires: when(op.ExpiresUnixNano), Finished: when(op.FinishedUnixNano),
		MaxParallel: op.MaxParallel, Errors: op.Errors, TaskCounts: resp.TaskCounts, Tasks: []taskDoc{}, More: resp.Next != "",
	}
	if doc.TaskCounts == nil {
		doc.TaskCounts = map[string]int64{}
	}
	if len(doc.Params) == 0 {
		doc.Params = json.RawMessage("{}")
	}
	for _, t := range resp.Tasks {
		doc.Tasks = append(doc.Tasks, taskDocument(t))
	}
	return doc
}

func renderOperation(w io.Writer, resp *pb.ShowOperationResponse, format string) error {
	doc := operationDocument(resp)
	if format != formatTabular {
		return writeDoc(w, doc, format)
	}
	t := newTable(w)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(t, "%s:\t%s\n", k, v)
		}
	}
	row("Operation", strconv.FormatInt(doc.ID, 10))
	row("Action", doc.Action+" on "+doc.Service)
	row("State", doc.State)
	row("Units", unitList(doc.Units))
	row("Parameters", string(doc.Params))
	row("Charm", fmt.Sprintf("%s revision %d", doc.Charm, doc.Revision))
	row("Requester", doc.Requester)
	row("Digest", doc.Digest)
	row("May approve", doc.WhoMayApprove)
	row("Approver", doc.Approver)
	row("Rejected by", strings.TrimSuffix(doc.RejectedBy+": "+doc.Reason, ": "))
	row("Executed by", doc.ExecutedBy)
	row("Created", doc.Created)
	row("Expires", doc.Expires)
	row("Finished", doc.Finished)
	if doc.MaxParallel > 0 {
		row("Max parallel", strconv.Itoa(int(doc.MaxParallel)))
	}
	for i, e := range doc.Errors {
		row(map[bool]string{true: "Errors", false: ""}[i == 0], e)
	}
	if len(doc.TaskCounts) > 0 {
		row("Progress", strings.TrimPrefix(progressLine(doc.ID, doc.TaskCounts), fmt.Sprintf("operation %d: ", doc.ID)))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if len(doc.Tasks) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t = newTable(w)
	fmt.Fprintln(t, "Unit\tState\tMachine\tAttempt\tHeartbeat\tResults\tMessage")
	for _, d := range doc.Tasks {
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Unit, d.State, d.Machine, d.Attempt, d.Heartbeat, results(d.Results), d.Message)
	}
	if doc.More {
		fmt.Fprintf(t, "(the first %d tasks of %d)\n", len(doc.Tasks), countAll(doc.TaskCounts))
	}
	return t.Flush()
}

func countAll(counts map[string]int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
}

// results shows a task's results as KEY=VALUE, by key.
func results(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + m[k]
	}
	return strings.Join(out, " ")
}

func renderTask(w io.Writer, id int64, info *pb.TaskInfo, format string) error {
	doc := taskDocument(info)
	if format != formatTabular {
		return writeDoc(w, struct {
			Operation int64 `json:"operation" yaml:"operation"`
			taskDoc   `yaml:",inline"`
		}{id, doc}, format)
	}
	t := newTable(w)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(t, "%s:\t%s\n", k, v)
		}
	}
	row("Operation", strconv.FormatInt(id, 10))
	row("Unit", doc.Unit)
	row("State", doc.State)
	row("Machine", doc.Machine)
	row("Attempt", strconv.FormatInt(doc.Attempt, 10))
	if doc.Resumed > 0 {
		row("Resumed", strconv.FormatInt(doc.Resumed, 10))
	}
	row("Started", doc.Started)
	row("Finished", doc.Finished)
	row("Heartbeat", doc.Heartbeat)
	row("Message", doc.Message)
	row("Results", results(doc.Results))
	row("Checkpoint", strings.Join(doc.Checkpoint, " "))
	return t.Flush()
}

// operationsLine is ctl status's line of operations; "" when all zero.
func operationsLine(o *pb.OperationsStatus) string {
	if o.GetRunning() == 0 && o.GetAwaitingApproval() == 0 && o.GetLostTasks() == 0 {
		return ""
	}
	return fmt.Sprintf("Operations: %d running, %d awaiting approval, %d lost tasks", o.GetRunning(), o.GetAwaitingApproval(), o.GetLostTasks())
}

// operationsStatusDoc is the status document's operations object.
type operationsStatusDoc struct {
	Running          int32 `json:"running" yaml:"running"`
	AwaitingApproval int32 `json:"awaiting_approval" yaml:"awaiting_approval"`
	Approved         int32 `json:"approved" yaml:"approved"`
	LostTasks        int64 `json:"lost_tasks" yaml:"lost_tasks"`
}

func operationsStatusDocument(o *pb.OperationsStatus) operationsStatusDoc {
	return operationsStatusDoc{Running: o.GetRunning(), AwaitingApproval: o.GetAwaitingApproval(), Approved: o.GetApproved(), LostTasks: o.GetLostTasks()}
}
