package controller_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/controller"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// opsEnv is a controller with the example kv charm (actions keys: safe;
// backup: approved by an admin; reindex: safe, at most 2 at once)
// deployed as kv with three units, app beside it, and a user of each role.
type opsEnv struct {
	*env
	admin, ada, olga, oscar, vic pb.OperatorServiceClient
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	e := newEnv(t)
	o := &opsEnv{env: e, admin: e.admin()}
	upload(t, e.ctx, o.admin, "../examples/charms/kv")
	upload(t, e.ctx, o.admin, "testdata/app")
	_, err := o.admin.Deploy(e.ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 3})
	must(t, "Deploy kv", err)
	_, err = o.admin.Deploy(e.ctx, &pb.DeployRequest{Charm: "app", NumUnits: 1})
	must(t, "Deploy app", err)
	client := func(name string, role pb.UserRole) pb.OperatorServiceClient {
		return pb.NewOperatorServiceClient(e.Dial(e.User(name, role)))
	}
	o.ada = client("ada", pb.UserRole_USER_ROLE_ADMIN)
	o.olga = client("olga", pb.UserRole_USER_ROLE_OPERATOR)
	o.oscar = client("oscar", pb.UserRole_USER_ROLE_OPERATOR)
	o.vic = client("vic", pb.UserRole_USER_ROLE_VIEWER)
	return o
}

func (o *opsEnv) run(t *testing.T, c pb.OperatorServiceClient, action, params string, targets ...string) *pb.Operation {
	t.Helper()
	resp, err := c.RunAction(o.ctx, &pb.RunActionRequest{Targets: targets, Action: action, ParamsJson: []byte(params)})
	must(t, fmt.Sprintf("RunAction(%s on %v)", action, targets), err)
	return resp.Operation
}

func TestListActions(t *testing.T) {
	o := newOpsEnv(t)
	resp, err := o.vic.ListActions(o.ctx, &pb.ListActionsRequest{Service: "kv"})
	must(t, "ListActions(kv)", err)
	var got []string
	for _, a := range resp.Actions {
		got = append(got, fmt.Sprintf("%s safe=%v approvers=%v max=%d schema=%v", a.Name, a.Safe, a.Approvers, a.MaxParallel,
			strings.Contains(string(a.ParamsSchemaJson), `"type":"object"`)))
	}
	want := []string{
		"backup safe=false approvers=[@admin] max=0 schema=true",
		"keys safe=true approvers=[] max=0 schema=true",
		"reindex safe=true approvers=[] max=2 schema=true",
	}
	if !slices.Equal(got, want) || resp.Charm.GetName() != "kv" {
		t.Errorf("ListActions(kv) = %v of %v, want %v", got, resp.Charm, want)
	}
	if resp, err := o.vic.ListActions(o.ctx, &pb.ListActionsRequest{Service: "app"}); err != nil || len(resp.Actions) != 0 {
		t.Errorf("ListActions(app) = %v, %v; want none", resp, err)
	}
	for _, tt := range []struct {
		service string
		code    codes.Code
	}{{"nope", codes.NotFound}, {"Bad Name", codes.InvalidArgument}, {"", codes.InvalidArgument}} {
		_, err := o.vic.ListActions(o.ctx, &pb.ListActionsRequest{Service: tt.service})
		wantCode(t, fmt.Sprintf("ListActions(%q)", tt.service), err, tt.code, "")
	}
}

func TestRunAction(t *testing.T) {
	o := newOpsEnv(t)
	running, awaiting := pb.OperationState_OPERATION_STATE_RUNNING, pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL
	for _, tt := range []struct {
		name        string
		targets     []string
		action      string
		params      string
		maxParallel int32
		wantState   pb.OperationState
		wantUnits   []string
		wantParams  string
		wantMax     int32
		wantWho     string
	}{
		{"safe, on the service", []string{"kv"}, "keys", "", 0, running, []string{"kv/0", "kv/1", "kv/2"}, "{}", 0, ""},
		{"unsafe, defaults applied", []string{"kv/2", "kv/0"}, "backup", `{"name":"nightly"}`, 0, awaiting,
			[]string{"kv/0", "kv/2"}, `{"compress":false,"name":"nightly"}`, 0, "an admin"},
		{"a unit twice, and its service", []string{"kv/1", "kv", "kv/1"}, "reindex", "", 0, running,
			[]string{"kv/0", "kv/1", "kv/2"}, `{"step-ms":200,"steps":20}`, 2, ""},
		{"max-parallel below the action's", []string{"kv"}, "reindex", `{"steps":1}`, 1, running,
			[]string{"kv/0", "kv/1", "kv/2"}, `{"step-ms":200,"steps":1}`, 1, ""},
		{"max-parallel where the action has none", []string{"kv/0"}, "keys", "", 5, running, []string{"kv/0"}, "{}", 5, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := o.olga.RunAction(o.ctx, &pb.RunActionRequest{Targets: tt.targets, Action: tt.action,
				ParamsJson: []byte(tt.params), MaxParallel: tt.maxParallel})
			must(t, "RunAction", err)
			op := resp.Operation
			if op.State != tt.wantState || !slices.Equal(op.Units, tt.wantUnits) || string(op.ParamsJson) != tt.wantParams ||
				op.MaxParallel != tt.wantMax || op.Requester != "olga" || resp.WhoMayApprove != tt.wantWho || op.Digest == "" {
				t.Errorf("RunAction = %v (who may approve %q), want %v on %v with %s, max-parallel %d, by olga, approved by %q",
					op, resp.WhoMayApprove, tt.wantState, tt.wantUnits, tt.wantParams, tt.wantMax, tt.wantWho)
			}
			show, err := o.vic.ShowOperation(o.ctx, &pb.ShowOperationRequest{Id: op.Id})
			must(t, "ShowOperation", err)
			wantTasks := 0
			if tt.wantState == running {
				wantTasks = len(tt.wantUnits)
			}
			if len(show.Tasks) != wantTasks || show.TaskCounts["pending"] != int64(wantTasks) {
				t.Errorf("ShowOperation(%d) = %d tasks, counts %v; want %d pending", op.Id, len(show.Tasks), show.TaskCounts, wantTasks)
			}
		})
	}

	before := listIDs(t, o, &pb.ListOperationsRequest{})
	for _, tt := range []struct {
		name    string
		c       pb.OperatorServiceClient
		req     *pb.RunActionRequest
		code    codes.Code
		msg     string
		records bool
	}{
		{"parameters that do not validate", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "backup", ParamsJson: []byte(`{"compress":"yes","extra":1}`)},
			codes.InvalidArgument, `backup on kv is invalid, nothing runs: parameter "compress": want boolean, got string; parameter "extra" is not allowed; parameter "name" is required`, true},
		{"an unknown action", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "restore"},
			codes.InvalidArgument, "the charm's actions are backup, keys, reindex", false},
		{"a charm without actions", o.olga, &pb.RunActionRequest{Targets: []string{"app"}, Action: "keys"},
			codes.InvalidArgument, "the charm has no actions", false},
		{"two services", o.olga, &pb.RunActionRequest{Targets: []string{"kv/0", "app/0"}, Action: "keys"},
			codes.InvalidArgument, "units of one service", false},
		{"an unknown unit", o.olga, &pb.RunActionRequest{Targets: []string{"kv/7"}, Action: "keys"}, codes.NotFound, "unit kv/7 not found", false},
		{"an unknown service", o.olga, &pb.RunActionRequest{Targets: []string{"nope"}, Action: "keys"}, codes.NotFound, "", false},
		{"no targets", o.olga, &pb.RunActionRequest{Action: "keys"}, codes.InvalidArgument, "name the units", false},
		{"a bad target", o.olga, &pb.RunActionRequest{Targets: []string{"kv/x"}, Action: "keys"}, codes.InvalidArgument, "", false},
		{"a bad action name", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "Keys"}, codes.InvalidArgument, "invalid action name", false},
		{"parameters not JSON", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "keys", ParamsJson: []byte("[1]")},
			codes.InvalidArgument, "not a JSON object", false},
		{"max-parallel above the action's", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "reindex", MaxParallel: 3},
			codes.InvalidArgument, "at most 2 units at once", false},
		{"a negative max-parallel", o.olga, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "keys", MaxParallel: -1},
			codes.InvalidArgument, "max-parallel -1", false},
		{"too many targets", o.olga, &pb.RunActionRequest{Targets: make([]string, state.MaxOperationTargets+1), Action: "keys"},
			codes.InvalidArgument, "at most 10000", false},
		{"a viewer", o.vic, &pb.RunActionRequest{Targets: []string{"kv"}, Action: "keys"}, codes.PermissionDenied, "needs the operator role", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.RunAction(o.ctx, tt.req)
			wantCode(t, "RunAction", err, tt.code, tt.msg)
			after := listIDs(t, o, &pb.ListOperationsRequest{})
			if grew := len(after) - len(before); grew != map[bool]int{true: 1, false: 0}[tt.records] {
				t.Fatalf("RunAction refused recorded %d operations, want records=%v", grew, tt.records)
			}
			if !tt.records {
				return
			}
			// The operation is recorded INVALID with each error, and the
			// refusal names it (and carries it, for ctl).
			id := after[0]
			before = after
			if !strings.Contains(status.Convert(err).Message(), fmt.Sprintf("operation %d:", id)) {
				t.Errorf("RunAction = %v, want it to name operation %d", err, id)
			}
			var brief *pb.OperationBrief
			for _, d := range status.Convert(err).Details() {
				brief, _ = d.(*pb.OperationBrief)
			}
			if brief.GetId() != id {
				t.Errorf("RunAction's refusal carries %v, want operation %d", brief, id)
			}
			show, err := o.vic.ShowOperation(o.ctx, &pb.ShowOperationRequest{Id: id})
			must(t, "ShowOperation", err)
			if op := show.Operation; op.State != pb.OperationState_OPERATION_STATE_INVALID || len(op.Errors) != 3 || len(show.Tasks) != 0 {
				t.Errorf("ShowOperation(%d) = %v with %d tasks, want INVALID with 3 errors and no tasks", id, op, len(show.Tasks))
			}
		})
	}
}

// listIDs lists the operations' ids, newest first.
func listIDs(t *testing.T, o *opsEnv, req *pb.ListOperationsRequest) []int64 {
	t.Helper()
	resp, err := o.vic.ListOperations(o.ctx, req)
	must(t, "ListOperations", err)
	var ids []int64
	for _, op := range resp.Operations {
		ids = append(ids, op.Id)
	}
	return ids
}

// The approval flow: the requester cannot approve its own, an approver
// approves exactly what it saw, the requester (or an admin) executes it.
func TestApproveRejectExecute(t *testing.T) {
	o := newOpsEnv(t)
	op := o.run(t, o.olga, "backup", `{"name":"nightly"}`, "kv")
	id := op.Id
	approve := func(c pb.OperatorServiceClient, digest string) error {
		_, err := c.ApproveOperation(o.ctx, &pb.ApproveOperationRequest{Id: id, Digest: digest})
		return err
	}
	execute := func(c pb.OperatorServiceClient) error {
		_, err := c.ExecuteOperation(o.ctx, &pb.ExecuteOperationRequest{Id: id})
		return err
	}
	steps := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"the requester approves", func() error { return approve(o.olga, op.Digest) }, codes.FailedPrecondition, "olga cannot approve operation " + fmt.Sprint(id) + ": olga requested it"},
		{"an operator not among the approvers", func() error { return approve(o.oscar, op.Digest) }, codes.FailedPrecondition, "only an admin may"},
		{"a viewer", func() error { return approve(o.vic, op.Digest) }, codes.PermissionDenied, ""},
		{"another digest", func() error { return approve(o.ada, strings.Repeat("0", 64)) }, codes.FailedPrecondition, "it is not what you saw"},
		{"no digest", func() error { return approve(o.ada, "") }, codes.InvalidArgument, "no digest"},
		{"executing unapproved", func() error { return execute(o.olga) }, codes.FailedPrecondition, "is awaiting approval: only olga or an admin may execute it once approved"},
		{"an admin approves", func() error { return approve(o.ada, op.Digest) }, codes.OK, ""},
		{"approving again", func() error { return approve(o.admin, op.Digest) }, codes.FailedPrecondition, "is approved"},
		{"another operator executes", func() error { return execute(o.oscar) }, codes.FailedPrecondition, "oscar cannot execute operation " + fmt.Sprint(id) + ": only olga or an admin may"},
		{"the requester executes", func() error { return execute(o.olga) }, codes.OK, ""},
		{"executing again", func() error { return execute(o.olga) }, codes.FailedPrecondition, "is running"},
		{"an unknown operation", func() error {
			_, err := o.ada.ApproveOperation(o.ctx, &pb.ApproveOperationRequest{Id: id + 100, Digest: op.Digest})
			return err
		}, codes.NotFound, "not found"},
		{"a bad id", func() error {
			_, err := o.olga.ExecuteOperation(o.ctx, &pb.ExecuteOperationRequest{Id: -1})
			return err
		}, codes.InvalidArgument, "invalid operation id"},
	}
	for _, s := range steps {
		err := s.call()
		if s.code == codes.OK {
			must(t, s.name, err)
			continue
		}
		wantCode(t, s.name, err, s.code, s.msg)
	}
	show, err := o.vic.ShowOperation(o.ctx, &pb.ShowOperationRequest{Id: id})
	must(t, "ShowOperation", err)
	if got := show.Operation; got.State != pb.OperationState_OPERATION_STATE_RUNNING || got.Approver != "ada" || got.ExecutedBy != "olga" || len(show.Tasks) != 3 {
		t.Errorf("ShowOperation(%d) = %v with %d tasks, want running, approved by ada, executed by olga, 3 tasks", id, got, len(show.Tasks))
	}

	// Rejecting: an approver (or an admin), while it awaits approval.
	other := o.run(t, o.olga, "backup", `{"name":"weekly","compress":true}`, "kv/1")
	_, err = o.oscar.RejectOperation(o.ctx, &pb.RejectOperationRequest{Id: other.Id, Reason: "not now"})
	wantCode(t, "RejectOperation by oscar", err, codes.FailedPrecondition, "only an admin may")
	rej, err := o.ada.RejectOperation(o.ctx, &pb.RejectOperationRequest{Id: other.Id, Reason: "not now"})
	must(t, "RejectOperation by ada", err)
	if rej.Operation.State != pb.OperationState_OPERATION_STATE_REJECTED || rej.Operation.RejectedBy != "ada" || rej.Operation.Reason != "not now" {
		t.Errorf("RejectOperation = %v, want rejected by ada: not now", rej.Operation)
	}
	_, err = o.olga.ExecuteOperation(o.ctx, &pb.ExecuteOperationRequest{Id: other.Id})
	wantCode(t, "ExecuteOperation of a rejected one", err, codes.FailedPrecondition, "is rejected")

	// The audit log names each operation and its service, and the
	// parameters' keys, never their values.
	log, _, _, err := o.st.ScanAudit(o.ctx, state.AuditQuery{}, 1000, 1000)
	must(t, "ScanAudit", err)
	var runs, approvals int
	for _, en := range log {
		text := fmt.Sprint(en.Targets, en.Summary)
		if strings.Contains(text, "nightly") || strings.Contains(text, "weekly") {
			t.Errorf("audit entry %d holds a parameter's value: %v", en.Seq, en)
		}
		switch {
		case en.Rpc == "RunAction" && en.Code == 0:
			runs++
			if !slices.Contains(en.Targets, "service:kv") || !strings.Contains(en.Summary, "parameter keys") ||
				!slices.ContainsFunc(en.Targets, func(s string) bool { return strings.HasPrefix(s, "operation:") }) {
				t.Errorf("RunAction's audit entry = %v, want the operation, service:kv and the parameters' keys", en)
			}
		case en.Rpc == "ApproveOperation" && en.Code == 0:
			approvals++
			if !slices.Contains(en.Targets, fmt.Sprintf("operation:%d", id)) || !slices.Contains(en.Targets, "service:kv") || en.User != "ada" {
				t.Errorf("ApproveOperation's audit entry = %v, want ada's of operation:%d on service:kv", en, id)
			}
		}
	}
	if runs != 2 || approvals != 1 {
		t.Errorf("the audit log holds %d RunAction and %d ApproveOperation entries that succeeded, want 2 and 1", runs, approvals)
	}
}

// Pausing, resuming and stopping tasks, some or all; stopping is final.
func TestTaskVerbs(t *testing.T) {
	o := newOpsEnv(t)
	op := o.run(t, o.olga, "keys", "", "kv")
	// kv/0's agent starts its task, from its machine.
	u, err := o.st.Unit(o.ctx, "kv/0")
	must(t, "Unit", err)
	_, err = o.st.StartTask(o.ctx, op.Id, "kv/0", u.MachineId)
	must(t, "StartTask", err)

	type verbFn func(units ...string) (*pb.TaskVerbResult, error)
	pause := func(units ...string) (*pb.TaskVerbResult, error) {
		r, err := o.olga.PauseTasks(o.ctx, &pb.PauseTasksRequest{Id: op.Id, Units: units})
		return r.GetResult(), err
	}
	resume := func(units ...string) (*pb.TaskVerbResult, error) {
		r, err := o.olga.ResumeTasks(o.ctx, &pb.ResumeTasksRequest{Id: op.Id, Units: units})
		return r.GetResult(), err
	}
	stop := func(units ...string) (*pb.TaskVerbResult, error) {
		r, err := o.oscar.StopTasks(o.ctx, &pb.StopTasksRequest{Id: op.Id, Units: units})
		return r.GetResult(), err
	}
	for _, tt := range []struct {
		name    string
		verb    verbFn
		units   []string
		changed []string
		already []string
		refused []string
		states  string // kv/0 kv/1 kv/2 after
	}{
		{"pause all", pause, nil, []string{"kv/0", "kv/1", "kv/2"}, nil, nil, "pausing paused paused"},
		{"pause one again", pause, []string{"kv/1"}, nil, []string{"kv/1"}, nil, "pausing paused paused"},
		{"resume one", resume, []string{"kv/2"}, []string{"kv/2"}, nil, nil, "pausing paused pending"},
		{"stop one", stop, []string{"kv/1"}, []string{"kv/1"}, nil, nil, "pausing stopped pending"},
		{"resume a stopped one", resume, []string{"kv/1"}, nil, nil, []string{"kv/1"}, "pausing stopped pending"},
		{"stop the rest", stop, nil, []string{"kv/0", "kv/2"}, nil, nil, "stopping stopped stopped"},
	} {
		res, err := tt.verb(tt.units...)
		must(t, tt.name, err)
		var refused []string
		for _, r := range res.Refused {
			refused = append(refused, r.Unit)
			if r.Message == "" {
				t.Errorf("%s: refused %s without a reason", tt.name, r.Unit)
			}
		}
		if !slices.Equal(res.Changed, tt.changed) || !slices.Equal(res.Already, tt.already) || !slices.Equal(refused, tt.refused) {
			t.Errorf("%s = changed %v, already %v, refused %v; want %v, %v, %v", tt.name, res.Changed, res.Already, refused, tt.changed, tt.already, tt.refused)
		}
		var states []string
		for _, unit := range []string{"kv/0", "kv/1", "kv/2"} {
			resp, err := o.vic.ShowTask(o.ctx, &pb.ShowTaskRequest{Id: op.Id, Unit: unit})
			must(t, "ShowTask", err)
			states = append(states, state.TaskStateName(resp.Task.Task.State))
			if unit == "kv/0" && resp.Task.HeartbeatAgeMs < 0 {
				t.Errorf("%s: ShowTask(kv/0) on its machine has heartbeat age %d, want its StartTask's", tt.name, resp.Task.HeartbeatAgeMs)
			}
		}
		if got := strings.Join(states, " "); got != tt.states {
			t.Errorf("after %s, the tasks are %s, want %s", tt.name, got, tt.states)
		}
	}
	for _, tt := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"a viewer pauses", func() error {
			_, err := o.vic.PauseTasks(o.ctx, &pb.PauseTasksRequest{Id: op.Id})
			return err
		}, codes.PermissionDenied},
		{"an unknown operation", func() error { _, err := o.olga.StopTasks(o.ctx, &pb.StopTasksRequest{Id: op.Id + 9}); return err }, codes.NotFound},
		{"a bad unit", func() error {
			_, err := o.olga.ResumeTasks(o.ctx, &pb.ResumeTasksRequest{Id: op.Id, Units: []string{"kv"}})
			return err
		}, codes.InvalidArgument},
		{"a task that is not there", func() error {
			_, err := o.vic.ShowTask(o.ctx, &pb.ShowTaskRequest{Id: op.Id, Unit: "app/0"})
			return err
		}, codes.NotFound},
	} {
		wantCode(t, tt.name, tt.call(), tt.code, "")
	}
}

// Operations list newest first, by state and service, a page at a time;
// the status counts the open ones.
func TestListOperationsAndStatus(t *testing.T) {
	o := newOpsEnv(t)
	a := o.run(t, o.olga, "keys", "", "kv").Id
	b := o.run(t, o.olga, "backup", `{"name":"x"}`, "kv").Id
	c := o.run(t, o.olga, "keys", "", "kv/1").Id
	running := pb.OperationState_OPERATION_STATE_RUNNING
	for _, tt := range []struct {
		name string
		req  *pb.ListOperationsRequest
		want []int64
	}{
		{"all", &pb.ListOperationsRequest{}, []int64{c, b, a}},
		{"running", &pb.ListOperationsRequest{State: running}, []int64{c, a}},
		{"of kv", &pb.ListOperationsRequest{Service: "kv"}, []int64{c, b, a}},
		{"of app", &pb.ListOperationsRequest{Service: "app"}, nil},
		{"a page", &pb.ListOperationsRequest{Limit: 2}, []int64{c, b}},
		{"the next page", &pb.ListOperationsRequest{Limit: 2, Before: b}, []int64{a}},
	} {
		if got := listIDs(t, o, tt.req); !slices.Equal(got, tt.want) {
			t.Errorf("ListOperations(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	resp, err := o.vic.ListOperations(o.ctx, &pb.ListOperationsRequest{Limit: 2})
	must(t, "ListOperations", err)
	if resp.Next != b {
		t.Errorf("ListOperations(limit 2).Next = %d, want %d", resp.Next, b)
	}
	for _, req := range []*pb.ListOperationsRequest{{Limit: -1}, {Limit: 1001}, {Before: -1}, {State: 99}, {Service: "Bad"}} {
		_, err := o.vic.ListOperations(o.ctx, req)
		wantCode(t, fmt.Sprintf("ListOperations(%v)", req), err, codes.InvalidArgument, "")
	}
	st, err := o.vic.Status(o.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	if got := st.Status.Operations; got.GetRunning() != 2 || got.GetAwaitingApproval() != 1 || got.GetLostTasks() != 0 {
		t.Errorf("Status().Operations = %v, want 2 running, 1 awaiting approval", got)
	}
	// The controllers alone: the same counts, and no model read.
	only, err := o.vic.Status(o.ctx, &pb.StatusRequest{ControllersOnly: true})
	must(t, "Status(controllers only)", err)
	if got := only.Status; !proto.Equal(got.GetOperations(), st.Status.Operations) || len(got.GetServices())+len(got.GetMachines())+len(got.GetRelations()) != 0 ||
		got.GetRevision() < st.Status.Revision || len(got.GetControllers()) != len(st.Status.Controllers) {
		t.Errorf("Status(controllers only) = %v, want the operations' counts, the controllers and a revision, and no model", got)
	}
	_, err = o.vic.Status(o.ctx, &pb.StatusRequest{ControllersOnly: true, Services: []string{"kv"}})
	wantCode(t, "Status(controllers only, of kv)", err, codes.InvalidArgument, "controllers_only takes no services, units or machines")
}

// The leader's operations worker marks lost the task of a machine that
// stopped reporting, once --task-lost-after has passed (and it has led
// that long), counts the tasks in its metrics, and deletes an operation
// finished longer ago than the retention.
func TestOperationsWorker(t *testing.T) {
	o := newOpsEnv(t)
	op := o.run(t, o.olga, "keys", "", "kv/0")
	u, err := o.st.Unit(o.ctx, "kv/0")
	must(t, "Unit", err)
	_, err = o.st.StartTask(o.ctx, op.Id, "kv/0", u.MachineId)
	must(t, "StartTask", err)
	rejected := o.run(t, o.olga, "backup", `{"name":"x"}`, "kv/1")
	_, err = o.ada.RejectOperation(o.ctx, &pb.RejectOperationRequest{Id: rejected.Id})
	must(t, "RejectOperation", err)

	reg := prometheus.NewRegistry()
	w, err := controller.NewOperationsWorker(controller.OperationsWorkerConfig{
		State: o.st, Metrics: reg, Interval: 20 * time.Millisecond, TaskLostAfter: 300 * time.Millisecond, Retention: time.Millisecond,
	})
	must(t, "NewOperationsWorker", err)
	ctx, cancel := context.WithCancel(o.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil once stopped", err)
		}
	}()

	// Running at first: its machine reported as it started (StartTask).
	poll.Until(t, "the worker to count the running task", func() bool {
		return gauge(t, reg, "lifeline_tasks", "running") == 1
	})
	poll.Until(t, "the task to be lost", func() bool {
		tk, err := o.st.Task(o.ctx, op.Id, "kv/0")
		must(t, "Task", err)
		return tk.State == pb.TaskState_TASK_STATE_LOST
	})
	poll.Until(t, "the worker to count the lost task", func() bool {
		return gauge(t, reg, "lifeline_tasks", "lost") == 1 && gauge(t, reg, "lifeline_tasks_lost_total", "") == 1 &&
			gauge(t, reg, "lifeline_tasks", "running") == 0
	})
	poll.Until(t, "the rejected operation to be pruned", func() bool {
		_, err := o.st.Operation(o.ctx, rejected.Id)
		return status.Code(toStatusErr(err)) == codes.NotFound
	})
	if _, err := o.st.Operation(o.ctx, op.Id); err != nil {
		t.Errorf("the running operation: %v, want it kept (a lost task is open)", err)
	}
	st, err := o.vic.Status(o.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	if got := st.Status.Operations.GetLostTasks(); got != 1 {
		t.Errorf("Status().Operations.LostTasks = %d, want 1", got)
	}
}

// toStatusErr keeps state's not-found as NotFound for the comparison.
func toStatusErr(err error) error {
	if errors.Is(err, state.ErrNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	return err
}

// gauge reads a metric's value from reg, by its state label when given.
func gauge(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	must(t, "Gather", err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			if label != "" && (len(m.Label) == 0 || m.Label[0].GetValue() != label) {
				continue
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
			return m.Counter.GetValue()
		}
	}
	return -1
}
