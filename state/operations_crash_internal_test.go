package state

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestMaterializeSurvivesACrashBetweenBatches crashes the making of an
// operation's tasks after every write and has the leader's worker
// (MaterializePending) of a new State take over each time: every step
// leaves the model consistent, and the tasks are made, each once, with
// the max_parallel slots given to the first targets.
func TestMaterializeSurvivesACrashBetweenBatches(t *testing.T) {
	// With max_parallel the tasks are made in one part, without it in
	// several at once (makeParts).
	for _, maxParallel := range []int{3, 0} {
		t.Run(fmt.Sprintf("max-parallel %d", maxParallel), func(t *testing.T) { materializeThroughCrashes(t, maxParallel) })
	}
}

func materializeThroughCrashes(t *testing.T, maxParallel int) {
	ns := etcdtest.Namespace(t)
	ctx := etcdtest.Context(t)
	base, err := New(etcdtest.Client(t), Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := base.AddService(ctx, AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}}); err != nil {
		t.Fatal(err)
	}
	units, err := base.AddUnits(ctx, "kv", 5*tasksPerBatch+3, Placement{})
	if err != nil {
		t.Fatal(err)
	}
	// One target is gone before its task is made.
	if err := base.DestroyUnit(ctx, units[9].Name, DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range units {
		names = append(names, u.Name)
	}
	crashing := func(budget int64) *State {
		st, err := New(etcdtest.Client(t), Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		b := new(atomic.Int64)
		b.Store(budget)
		st.etcd.Remote = crashingRemote{KVClient: st.etcd.Remote, budget: b}
		return st
	}
	check := func(when string) {
		t.Helper()
		snap, err := base.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckInvariants(snap); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	// The operation's record is written, and one batch of its tasks.
	op, err := crashing(2).CreateOperation(ctx, NewOperation{Service: "kv", Action: "backup", Units: names,
		Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Requester: "alice", Safe: true, MaxParallel: maxParallel})
	if !errors.Is(err, errCrash) || op == nil {
		t.Fatalf("CreateOperation = %v, %v; want the operation and a crash", op, err)
	}
	check("after the first crash")
	lives := 0
	for ; lives < 100; lives++ {
		err := crashing(1).MaterializePending(ctx)
		check("after a crash")
		if err == nil {
			break
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("MaterializePending: %v", err)
		}
	}
	t.Logf("the worker crashed %d times on the way", lives)
	got, err := base.Operation(ctx, op.Id)
	if err != nil {
		t.Fatal(err)
	}
	if !got.TasksCreated || got.State != pb.OperationState_OPERATION_STATE_RUNNING {
		t.Fatalf("operation = %v, want running with its tasks made", got)
	}
	admitted := 0
	for _, n := range names {
		tk, err := base.Task(ctx, op.Id, n)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := base.UnitTasks(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case n == units[9].Name:
			if tk.State != pb.TaskState_TASK_STATE_STOPPED || tk.Message != "unit dying" {
				t.Errorf("task of dying %s = %v, want stopped", n, tk)
			}
		case refs[op.Id] == taskAdmitted:
			admitted++
		case maxParallel == 0:
			t.Errorf("task of %s is %q, want pending (no max-parallel)", n, refs[op.Id])
		case refs[op.Id] != taskQueued:
			t.Errorf("task of %s is %q, want pending or queued", n, refs[op.Id])
		}
	}
	if maxParallel > 0 && admitted != maxParallel {
		t.Errorf("%d tasks admitted, want max-parallel %d", admitted, maxParallel)
	}
}
