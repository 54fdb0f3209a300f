package state

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// recordingRemote keeps the range requests of the reads made through it.
type recordingRemote struct {
	etcdserverpb.KVClient
	mu     *sync.Mutex
	ranges *[]*etcdserverpb.RangeRequest
}

func (k recordingRemote) Txn(ctx context.Context, r *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	k.mu.Lock()
	for _, op := range r.Success {
		if rr := op.GetRequestRange(); rr != nil {
			*k.ranges = append(*k.ranges, rr)
		}
	}
	k.mu.Unlock()
	return k.KVClient.Txn(ctx, r, opts...)
}

// TestTaskChangesReadBoundedRanges has an operation's tasks made, started,
// finished, paused and stopped, and checks every read of its tasks or of
// their references: etcd reads a range sorted other than by key
// ascending whole before it cuts it to its limit, so none may be sorted,
// and a range over the open tasks or the tasks must have a limit (or
// count from the index alone). Such reads cost the same whatever the
// operation's size.
func TestTaskChangesReadBoundedRanges(t *testing.T) {
	ns := etcdtest.Namespace(t)
	ctx := etcdtest.Context(t)
	st, err := New(etcdtest.Client(t), Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ranges []*etcdserverpb.RangeRequest
	st.etcd.Remote = recordingRemote{KVClient: st.etcd.Remote, mu: &mu, ranges: &ranges}
	if _, err := st.AddService(ctx, AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}}); err != nil {
		t.Fatal(err)
	}
	units, err := st.AddUnits(ctx, "kv", 3*tasksPerBatch+2, Placement{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range units {
		names = append(names, u.Name)
	}
	mu.Lock()
	ranges = nil
	mu.Unlock()
	op, err := st.CreateOperation(ctx, NewOperation{Service: "kv", Action: "backup", Units: names,
		Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Requester: "admin", Safe: true, ParamsJSON: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units[:4] {
		tk, err := st.StartTask(ctx, op.Id, u.Name, u.MachineId)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishTask(ctx, TaskReport{Operation: op.Id, Unit: u.Name, Attempt: tk.Attempt, Outcome: pb.TaskState_TASK_STATE_DONE}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PauseOperation(ctx, op.Id, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.StopOperation(ctx, op.Id, nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.operation(ctx, op.Id)
	if err != nil {
		t.Fatal(err)
	}
	if got.v.State != pb.OperationState_OPERATION_STATE_STOPPED {
		t.Fatalf("operation is %s, want stopped", OperationStateName(got.v.State))
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckInvariants(snap); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	open := 0
	for _, rr := range ranges {
		key := strings.TrimPrefix(string(rr.Key), ns)
		if rr.SortOrder != etcdserverpb.RangeRequest_NONE {
			t.Errorf("a sorted read from %s", key)
		}
		onOpen := strings.HasPrefix(key, opOpenPrefix(op.Id))
		onTasks := strings.HasPrefix(key, TasksPrefix(op.Id))
		if onOpen && len(rr.RangeEnd) > 0 {
			open++
		}
		if (onOpen || onTasks) && len(rr.RangeEnd) > 0 && rr.Limit == 0 && !rr.CountOnly {
			t.Errorf("a read of the range from %s without a limit", key)
		}
	}
	if open == 0 {
		t.Errorf("no read of the open tasks' references recorded")
	}
}
