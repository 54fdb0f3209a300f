package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestParseRunArgs(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		targets []string
		action  string
		params  []string
		err     string
	}{
		{[]string{"kv", "keys"}, []string{"kv"}, "keys", nil, ""},
		{[]string{"kv/0", "kv/1", "backup", "name=x", "compress=true"}, []string{"kv/0", "kv/1"}, "backup", []string{"name=x", "compress=true"}, ""},
		{[]string{"kv", "backup", "target.dir=/a=b"}, []string{"kv"}, "backup", []string{"target.dir=/a=b"}, ""},
		{[]string{"keys"}, nil, "", nil, "at least one unit or service"},
		{[]string{"kv", "name=x"}, nil, "", nil, "at least one unit or service"},
		{[]string{"kv", "a=1", "backup", "b=2"}, nil, "", nil, `argument "a=1": parameters (KEY=VALUE) come after the action`},
		{nil, nil, "", nil, "TARGET... ACTION"},
	} {
		got, err := parseRunArgs(tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseRunArgs(%q) = %+v, %v; want an error saying %q", tt.args, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.targets, tt.targets) || got.action != tt.action || !slices.Equal(got.params, tt.params) {
			t.Errorf("parseRunArgs(%q) = %+v, %v; want %v %s %v", tt.args, got, err, tt.targets, tt.action, tt.params)
		}
	}
}

func TestRunLine(t *testing.T) {
	many := make([]string, 12)
	for i := range many {
		many[i] = fmt.Sprintf("kv/%d", i)
	}
	for _, tt := range []struct {
		op   *pb.Operation
		who  string
		want string
	}{
		{&pb.Operation{Id: 7, Action: "backup", Units: []string{"kv/0", "kv/1", "kv/2"}, State: pb.OperationState_OPERATION_STATE_RUNNING}, "",
			"operation 7: backup on kv/0 kv/1 kv/2: running"},
		{&pb.Operation{Id: 7, Action: "backup", Units: []string{"kv/0"}, State: pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL}, "alice or an admin",
			"operation 7: backup on kv/0: awaiting approval by alice or an admin"},
		{&pb.Operation{Id: 8, Action: "keys", Units: many, State: pb.OperationState_OPERATION_STATE_RUNNING}, "",
			"operation 8: keys on kv/0 kv/1 kv/2 kv/3 kv/4 kv/5 kv/6 kv/7 kv/8 kv/9 and 2 more: running"},
	} {
		if got := runLine(tt.op, tt.who); got != tt.want {
			t.Errorf("runLine(%v) = %q, want %q", tt.op, got, tt.want)
		}
	}
}

func TestProgressLine(t *testing.T) {
	for _, tt := range []struct {
		counts map[string]int64
		want   string
	}{
		{map[string]int64{"done": 3, "running": 2, "pending": 4, "failed": 1}, "operation 7: 3/10 done, 2 running, 4 pending, 1 failed"},
		{map[string]int64{"done": 2}, "operation 7: 2/2 done"},
		{nil, "operation 7: 0/0 done"},
	} {
		if got := progressLine(7, tt.counts); got != tt.want {
			t.Errorf("progressLine(%v) = %q, want %q", tt.counts, got, tt.want)
		}
	}
}

func TestVerbText(t *testing.T) {
	for _, tt := range []struct {
		res  *pb.TaskVerbResult
		want string
	}{
		{&pb.TaskVerbResult{Changed: []string{"kv/0", "kv/1"}, Already: []string{"kv/2"}}, "operation 7: paused kv/0 kv/1; already paused: kv/2\n"},
		{&pb.TaskVerbResult{}, "operation 7: no task to pause\n"},
		{&pb.TaskVerbResult{Refused: []*pb.TaskRefused{{Unit: "kv/0", Message: "m"}}}, ""},
	} {
		if got := verbText(7, "pause", "paused", tt.res); got != tt.want {
			t.Errorf("verbText(%v) = %q, want %q", tt.res, got, tt.want)
		}
	}
}

func TestOperationsLine(t *testing.T) {
	for _, tt := range []struct {
		ops  *pb.OperationsStatus
		want string
	}{
		{&pb.OperationsStatus{Running: 2, AwaitingApproval: 1}, "Operations: 2 running, 1 awaiting approval, 0 lost tasks"},
		{&pb.OperationsStatus{LostTasks: 3}, "Operations: 0 running, 0 awaiting approval, 3 lost tasks"},
		{&pb.OperationsStatus{Approved: 1}, ""},
		{nil, ""},
	} {
		if got := operationsLine(tt.ops); got != tt.want {
			t.Errorf("operationsLine(%v) = %q, want %q", tt.ops, got, tt.want)
		}
	}
	var buf bytes.Buffer
	st := &pb.ModelStatus{Operations: &pb.OperationsStatus{Running: 1},
		Machines: []*pb.MachineStatus{{Id: "0", Life: "alive", Agent: "started"}}}
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "Operations: 1 running, 0 awaiting approval, 0 lost tasks\n\nMachine") {
		t.Errorf("ctl status =\n%s\nwant the operations' line first", buf.String())
	}
}

func TestParseOpState(t *testing.T) {
	for name, want := range map[string]pb.OperationState{
		"awaiting-approval": pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL,
		"running":           pb.OperationState_OPERATION_STATE_RUNNING,
		"invalid":           pb.OperationState_OPERATION_STATE_INVALID,
	} {
		if got, ok := parseOpState(name); !ok || got != want {
			t.Errorf("parseOpState(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, name := range []string{"", "unspecified", "AWAITING_APPROVAL", "awaiting_approval"} {
		if got, ok := parseOpState(name); ok {
			t.Errorf("parseOpState(%q) = %v, want none", name, got)
		}
	}
}

// showResponse is an operation with a task of each kind ShowOperation
// answers.
func showResponse() *pb.ShowOperationResponse {
	return &pb.ShowOperationResponse{
		Operation: &pb.Operation{Id: 7, Service: "kv", Action: "backup", Units: []string{"kv/0", "kv/1"},
			ParamsJson: []byte(`{"compress":false,"name":"nightly"}`), Charm: &pb.CharmRef{Name: "kv", Revision: 3},
			Requester: "olga", Digest: "abc", State: pb.OperationState_OPERATION_STATE_RUNNING, Approver: "ada", ExecutedBy: "olga"},
		Tasks: []*pb.TaskInfo{
			{Task: &pb.Task{Unit: "kv/0", State: pb.TaskState_TASK_STATE_RUNNING, Machine: "0", Attempt: 1}, HeartbeatAgeMs: 3000},
			{Task: &pb.Task{Unit: "kv/1", State: pb.TaskState_TASK_STATE_DONE, Machine: "1", Attempt: 2, Results: map[string]string{"size": "10", "path": "/b"}}},
		},
		TaskCounts: map[string]int64{"running": 1, "done": 1},
	}
}

func TestRenderOperation(t *testing.T) {
	var buf bytes.Buffer
	if err := renderOperation(&buf, showResponse(), formatTabular); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Operation:    7", "Action:       backup on kv", "Parameters:   {\"compress\":false,\"name\":\"nightly\"}",
		"Charm:        kv revision 3", "Requester:    olga", "Digest:       abc", "Approver:     ada", "Progress:     1/2 done, 1 running",
		"kv/0  running  0        1        3s ago", "kv/1  done     1        2                   path=/b size=10"} {
		if !strings.Contains(out, want) {
			t.Errorf("show-operation =\n%s\nwant %q in it", out, want)
		}
	}
	for _, format := range []string{formatJSON, formatYAML} {
		buf.Reset()
		if err := renderOperation(&buf, showResponse(), format); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		var err error
		if format == formatJSON {
			err = json.Unmarshal(buf.Bytes(), &doc)
		} else {
			err = yaml.Unmarshal(buf.Bytes(), &doc)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, buf.String())
		}
		params, _ := doc["params"].(map[string]any)
		tasks, _ := doc["tasks"].([]any)
		if doc["state"] != "running" || doc["digest"] != "abc" || params["name"] != "nightly" || len(tasks) != 2 {
			t.Errorf("show-operation --format %s =\n%s\nwant state, digest, params and tasks", format, buf.String())
		}
	}
}

func TestRenderTaskAndActions(t *testing.T) {
	var buf bytes.Buffer
	info := &pb.TaskInfo{Task: &pb.Task{Unit: "kv/0", State: pb.TaskState_TASK_STATE_PAUSED, Attempt: 2, Resumed: 1, Message: "paused by an operator"},
		CheckpointKeys: []string{"step"}}
	if err := renderTask(&buf, 7, info, formatTabular); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"State:       paused", "Attempt:     2", "Resumed:     1", "Checkpoint:  step", "Message:     paused by an operator"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("show-task =\n%s\nwant %q in it", buf.String(), want)
		}
	}
	buf.Reset()
	if err := renderTask(&buf, 7, info, formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || doc["operation"] != 7.0 || doc["state"] != "paused" {
		t.Errorf("show-task --format json =\n%s\n(%v) want the operation and the task's state", buf.String(), err)
	}

	buf.Reset()
	resp := &pb.ListActionsResponse{Service: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Actions: []*pb.ActionInfo{
		{Name: "backup", Approvers: []string{"@admin"}, Description: "copy",
			ParamsSchemaJson: []byte(`{"type":"object","properties":{"name":{"type":"string"},"compress":{"type":"boolean","default":false}},"required":["name"]}`)},
		{Name: "keys", Safe: true, Description: "list", ParamsSchemaJson: []byte(`{"type":"object"}`)},
	}}
	if err := renderActions(&buf, resp, formatTabular); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Action  Safe  Approvers  Parameters", "backup  no    @admin     compress=false name*  copy", "keys    yes   -          -"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("actions =\n%s\nwant %q in it", buf.String(), want)
		}
	}
}

// The operations' commands check their arguments before they call: a
// mistake exits 2 with a usage line.
func TestOperationsUsageErrorsExit2(t *testing.T) {
	s := newSandbox(t) // no controller: usage is checked first
	for _, args := range [][]string{
		{"actions"},
		{"actions", "kv", "--format", "xml"},
		{"run", "kv"},
		{"run", "backup", "name=x"},
		{"run", "kv", "name=x", "backup"},
		{"run", "kv", "backup", "a.b=1", "a=2"},
		{"run", "kv", "keys", "--max-parallel", "-1"},
		{"run", "kv", "keys", "--timeout", "1m"},
		{"run", "kv", "keys", "--wait", "--timeout", "-1s"},
		{"operations", "--state", "busy"},
		{"operations", "--limit", "0"},
		{"operations", "extra"},
		{"show-operation"},
		{"show-operation", "seven"},
		{"show-operation", "0"},
		{"show-task", "7"},
		{"show-task", "7", "kv"},
		{"approve", "-3"},
		{"reject", "7", "8"},
		{"execute"},
		{"pause"},
		{"resume", "x"},
		{"stop", "7", "kv/x"},
		{"logs"},
		{"logs", "x"},
		{"logs", "7", "kv"},
		{"logs", "7", "kv/0", "kv/1"},
		{"logs", "7", "--tail", "-1"},
	} {
		r := s.ctl(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "usage: ctl") {
			t.Errorf("%v\nwant exit status 2 and a usage line", r)
		}
	}
	out := s.ok(t, "run", "--help")
	for _, want := range []string{"ctl run TARGET... ACTION [KEY=VALUE...]", "Example:", "--max-parallel", "--wait"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl run --help says:\n%s\nwant %q in it", out, want)
		}
	}
}

// ctl logs prints whole lines, each with its unit when it shows several
// tasks, a line cut between two responses once its end has come, and
// what was dropped before a task's log.
func TestLogWriter(t *testing.T) {
	var out strings.Builder
	l := &logWriter{w: &out, prefix: true}
	for _, r := range []*pb.TaskLogsResponse{
		{Unit: "kv/0", Dropped: 10, Data: []byte("step 1\nste")},
		{Unit: "kv/1", Data: []byte("hello\n")},
		{Unit: "kv/0", Data: []byte("p 2\n")},
		{Unit: "kv/1", Data: []byte("no end")},
	} {
		if err := l.write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
	want := "kv/0: ... 10 bytes of this task's log dropped (the last 1 MiB is kept) ...\nkv/0: step 1\nkv/1: hello\nkv/0: step 2\nkv/1: no end\n"
	if out.String() != want {
		t.Errorf("logs printed %q, want %q", out.String(), want)
	}
}
