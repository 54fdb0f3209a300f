package state_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// opsFixture is a model for operations: service kv (charm kv revision 1)
// with units on machines of their own, users admin (admin), alice and
// bob (operators), carol (viewer), and a clock the State tells time by.
type opsFixture struct {
	st    *state.State
	ctx   context.Context
	clock *clock
	ns    string
	units []string
}

func newOpsFixture(t *testing.T, units int) *opsFixture {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	ns := etcdtest.Namespace(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	t.Cleanup(func() { checkInvariants(t, st) })
	f := &opsFixture{st: st, ctx: ctx, clock: clk, ns: ns}
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	addUser(t, ctx, st, "alice", operator, clk.Now())
	addUser(t, ctx, st, "bob", operator, clk.Now())
	addUser(t, ctx, st, "carol", viewer, clk.Now())
	addService(t, ctx, st, "kv", kvEndpoints)
	for _, u := range addUnits(t, ctx, st, "kv", units, state.Placement{}) {
		f.units = append(f.units, u.Name)
	}
	return f
}

// op is a NewOperation of action backup on units by alice.
func (f *opsFixture) op(safe bool, maxParallel int, units ...string) state.NewOperation {
	if len(units) == 0 {
		units = f.units
	}
	return state.NewOperation{
		Service: "kv", Action: "backup", Units: units, ParamsJSON: []byte(`{"to": "/b", "n": 1}`),
		Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Requester: "alice", Safe: safe, MaxParallel: maxParallel,
	}
}

func (f *opsFixture) create(t *testing.T, n state.NewOperation) *pb.Operation {
	t.Helper()
	op, err := f.st.CreateOperation(f.ctx, n)
	must(t, "CreateOperation", err)
	return op
}

// taskStates returns the operation's tasks' states by unit, and what their
// unit-tasks references say.
func (f *opsFixture) taskStates(t *testing.T, id int64) map[string]string {
	t.Helper()
	tasks, err := f.st.Tasks(f.ctx, id, "", 0)
	must(t, "Tasks", err)
	out := map[string]string{}
	for _, tk := range tasks {
		s := state.TaskStateName(tk.State)
		if tk.State == pb.TaskState_TASK_STATE_PENDING {
			refs, err := f.st.UnitTasks(f.ctx, tk.Unit)
			must(t, "UnitTasks", err)
			s = refs[id]
		}
		out[tk.Unit] = s
	}
	return out
}

func (f *opsFixture) opState(t *testing.T, id int64) string {
	t.Helper()
	op, err := f.st.Operation(f.ctx, id)
	must(t, "Operation", err)
	return state.OperationStateName(op.State)
}

func TestCreateOperation(t *testing.T) {
	f := newOpsFixture(t, 3)
	safe := f.create(t, f.op(true, 0))
	if got := f.opState(t, safe.Id); got != "running" {
		t.Errorf("safe operation is %s, want running", got)
	}
	if got := f.taskStates(t, safe.Id); len(got) != 3 || got["kv/0"] != "pending" || got["kv/2"] != "pending" {
		t.Errorf("safe operation's tasks = %v, want 3 pending", got)
	}
	if string(safe.ParamsJson) != `{"n":1,"to":"/b"}` {
		t.Errorf("params = %s, want canonical JSON", safe.ParamsJson)
	}
	unsafe := f.create(t, f.op(false, 0, "kv/1"))
	if unsafe.State != pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL || unsafe.ExpiresUnixNano != f.clock.Now().Add(state.DefaultApprovalTTL).UnixNano() {
		t.Errorf("unsafe operation = %v, want awaiting approval for a day", unsafe)
	}
	if unsafe.Id != safe.Id+1 || unsafe.Digest != state.OperationDigest(unsafe) || len(unsafe.Digest) != 64 {
		t.Errorf("operation %d digest %q", unsafe.Id, unsafe.Digest)
	}
	inv := f.op(true, 0)
	inv.Invalid = []string{"to: not a path", "n: want an integer"}
	bad := f.create(t, inv)
	if bad.State != pb.OperationState_OPERATION_STATE_INVALID {
		t.Errorf("invalid operation is %v", bad.State)
	}
	if tasks, _ := f.st.Tasks(f.ctx, bad.Id, "", 0); len(tasks) != 0 {
		t.Errorf("invalid operation has %d tasks", len(tasks))
	}

	for _, tc := range []struct {
		name     string
		n        func(state.NewOperation) state.NewOperation
		want     error
		rule, in string
	}{
		{"charm moved", func(n state.NewOperation) state.NewOperation { n.Charm.Revision = 2; return n }, state.ErrRefused, "A1", "made against charm revision 2, the service is at 1"},
		{"unit missing", func(n state.NewOperation) state.NewOperation { n.Units = []string{"kv/9"}; return n }, state.ErrNotFound, "", "unit kv/9 not found"},
		{"other service", func(n state.NewOperation) state.NewOperation { n.Units = []string{"app/0"}; return n }, state.ErrInvalid, "", "not of service kv"},
		{"no units", func(n state.NewOperation) state.NewOperation { n.Units = nil; return n }, state.ErrInvalid, "", "no target units"},
		{"params not an object", func(n state.NewOperation) state.NewOperation { n.ParamsJSON = []byte(`[1]`); return n }, state.ErrInvalid, "", "not a JSON object"},
		{"params too large", func(n state.NewOperation) state.NewOperation {
			n.ParamsJSON = []byte(`{"x":"` + strings.Repeat("a", state.MaxParamsBytes) + `"}`)
			return n
		}, state.ErrInvalid, "", "at most 64 KiB"},
		{"bad approver", func(n state.NewOperation) state.NewOperation { n.Approvers = []string{"@root"}; return n }, state.ErrInvalid, "", "invalid approver"},
		{"no service", func(n state.NewOperation) state.NewOperation { n.Service, n.Units = "db", []string{"db/0"}; return n }, state.ErrNotFound, "", "unit db/0 not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.st.CreateOperation(f.ctx, tc.n(f.op(true, 0)))
			wantErr(t, "CreateOperation", err, tc.want, tc.rule, tc.in)
		})
	}
}

func TestApproveOperation(t *testing.T) {
	f := newOpsFixture(t, 2)
	for _, tc := range []struct {
		name      string
		approvers []string
		approver  string
		digest    func(op *pb.Operation) string
		wait      time.Duration
		rule, in  string
		state     string // the operation's after
	}{
		{"self", nil, "alice", nil, 0, "A2", "alice cannot approve operation", "awaiting-approval"},
		{"not an admin", nil, "bob", nil, 0, "A2", "bob cannot approve operation", "awaiting-approval"},
		{"viewer", []string{"@operator"}, "carol", nil, 0, "A2", "only an operator may", "awaiting-approval"},
		{"stale digest", nil, "admin", func(*pb.Operation) string { return "abc" }, 0, "A2", "not what you saw", "awaiting-approval"},
		{"expired", nil, "admin", nil, 25 * time.Hour, "A2", "expired at", "expired"},
		{"admin", nil, "admin", nil, 0, "", "", "approved"},
		{"operator", []string{"@operator"}, "bob", nil, 0, "", "", "approved"},
		{"named", []string{"carol"}, "carol", nil, 0, "", "", "approved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := f.op(false, 0)
			n.Approvers = tc.approvers
			op := f.create(t, n)
			digest := op.Digest
			if tc.digest != nil {
				digest = tc.digest(op)
			}
			f.clock.Advance(tc.wait)
			_, err := f.st.ApproveOperation(f.ctx, op.Id, tc.approver, digest)
			if tc.rule == "" {
				must(t, "ApproveOperation", err)
			} else {
				wantErr(t, "ApproveOperation", err, state.ErrRefused, tc.rule, tc.in)
			}
			if got := f.opState(t, op.Id); got != tc.state {
				t.Errorf("operation is %s, want %s", got, tc.state)
			}
		})
	}
}

func TestExecuteOperation(t *testing.T) {
	f := newOpsFixture(t, 2)
	op := f.create(t, f.op(false, 0))
	_, err := f.st.ExecuteOperation(f.ctx, op.Id, "alice", false)
	wantErr(t, "ExecuteOperation(awaiting)", err, state.ErrRefused, "A3", "is awaiting approval: only alice or an admin may execute it once approved")
	_, err = f.st.ApproveOperation(f.ctx, op.Id, "admin", op.Digest)
	must(t, "ApproveOperation", err)
	_, err = f.st.ApproveOperation(f.ctx, op.Id, "admin", op.Digest)
	wantErr(t, "ApproveOperation(again)", err, state.ErrRefused, "A2", "is approved: only an operation awaiting approval")
	_, err = f.st.ExecuteOperation(f.ctx, op.Id, "bob", false)
	wantErr(t, "ExecuteOperation(bob)", err, state.ErrRefused, "A3", "only alice or an admin may")
	ran, err := f.st.ExecuteOperation(f.ctx, op.Id, "alice", false)
	must(t, "ExecuteOperation", err)
	if ran.State != pb.OperationState_OPERATION_STATE_RUNNING || ran.ExecutedBy != "alice" {
		t.Errorf("executed operation = %v", ran)
	}
	if got := f.taskStates(t, op.Id); len(got) != 2 {
		t.Errorf("tasks = %v, want 2", got)
	}
	_, err = f.st.ExecuteOperation(f.ctx, op.Id, "alice", false)
	wantErr(t, "ExecuteOperation(again)", err, state.ErrRefused, "A3", "is running")

	// An approval lapses, and an approved operation made against another
	// charm is refused.
	late := f.create(t, f.op(false, 0))
	_, err = f.st.ApproveOperation(f.ctx, late.Id, "admin", late.Digest)
	must(t, "ApproveOperation", err)
	f.clock.Advance(25 * time.Hour)
	_, err = f.st.ExecuteOperation(f.ctx, late.Id, "admin", true)
	wantErr(t, "ExecuteOperation(late)", err, state.ErrRefused, "A3", "expired")
	if got := f.opState(t, late.Id); got != "expired" {
		t.Errorf("late operation is %s, want expired", got)
	}
	moved := f.create(t, f.op(false, 0))
	_, err = f.st.ApproveOperation(f.ctx, moved.Id, "admin", moved.Digest)
	must(t, "ApproveOperation", err)
	setCharm(t, f, "kv", &pb.CharmRef{Name: "kv", Revision: 4})
	_, err = f.st.ExecuteOperation(f.ctx, moved.Id, "alice", false)
	wantErr(t, "ExecuteOperation(moved)", err, state.ErrRefused, "A1", "made against charm revision 1, the service is at 4: run it again")

	rej := f.create(t, state.NewOperation{Service: "kv", Action: "backup", Units: f.units, Charm: &pb.CharmRef{Name: "kv", Revision: 4}, Requester: "alice"})
	_, err = f.st.RejectOperation(f.ctx, rej.Id, "bob", "no")
	wantErr(t, "RejectOperation(bob)", err, state.ErrRefused, "A4", "bob cannot reject")
	got, err := f.st.RejectOperation(f.ctx, rej.Id, "admin", "not today")
	must(t, "RejectOperation", err)
	if got.State != pb.OperationState_OPERATION_STATE_REJECTED || got.Reason != "not today" || got.RejectedBy != "admin" {
		t.Errorf("rejected operation = %v", got)
	}
}

// setCharm points the service at another charm, by a refresh's revision.
func setCharm(t *testing.T, f *opsFixture, service string, ch *pb.CharmRef) {
	t.Helper()
	_, err := f.st.ChangeSpec(f.ctx, service, state.SpecChange{Reason: "refresh", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		return &pb.ServiceSpec{Charm: ch, Config: head.Spec.Config}, nil, nil
	}})
	must(t, "ChangeSpec", err)
}
