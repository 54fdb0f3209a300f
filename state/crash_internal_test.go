package state

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

var errCrash = errors.New("crashed")

// crashingRemote lets a budget of write transactions through, then fails
// every one: the process "crashed" between two steps.
type crashingRemote struct {
	etcdserverpb.KVClient
	budget *atomic.Int64
}

func (k crashingRemote) Txn(ctx context.Context, r *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	writes := false
	for _, op := range append(r.Success, r.Failure...) {
		writes = writes || op.GetRequestRange() == nil
	}
	if writes && k.budget.Add(-1) < 0 {
		return nil, errCrash
	}
	return k.KVClient.Txn(ctx, r, opts...)
}

// TestCleanerSurvivesACrashBetweenAnyTwoSteps lets each cleaner make one
// write and then crash, and starts a new one, until the work is done:
// every step must leave the model consistent, and the work must finish.
func TestCleanerSurvivesACrashBetweenAnyTwoSteps(t *testing.T) {
	ns := etcdtest.Namespace(t)
	ctx := etcdtest.Context(t)
	base, err := New(etcdtest.Client(t), Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	eps := map[string][]*pb.Endpoint{
		"app":    {{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL}, {Name: "info", Interface: "info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}},
		"kv":     {{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}, {Name: "peers", Interface: "kvp", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL}},
		"logger": {{Name: "host", Interface: "info", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_CONTAINER}},
	}
	for _, name := range []string{"app", "kv", "logger"} {
		if _, err := base.AddService(ctx, AddServiceArgs{Name: name, Charm: &pb.CharmRef{Name: name}, Endpoints: eps[name], Subordinate: name == "logger"}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ms, err := base.AddMachines(ctx, 1)
	step("AddMachines", err)
	_, err = base.AddUnits(ctx, "app", 20, Placement{Machine: ms[0].Id})
	step("AddUnits", err)
	_, err = base.AddUnits(ctx, "kv", 3, Placement{})
	step("AddUnits", err)
	db, err := base.AddRelation(ctx, EndpointSpec{Service: "app"}, EndpointSpec{Service: "kv"})
	step("AddRelation", err)
	host, err := base.AddRelation(ctx, EndpointSpec{Service: "app"}, EndpointSpec{Service: "logger"})
	step("AddRelation", err)
	for i := 0; i < 20; i++ {
		u := unitName("app", int64(i))
		step("EnterScope", base.EnterScope(ctx, db.Id, u, nil))
		sub, err := base.AddSubordinate(ctx, u, "logger")
		step("AddSubordinate", err)
		step("EnterScope", base.EnterScope(ctx, host.Id, sub.Name, nil))
		step("EnterScope", base.EnterScope(ctx, host.Id, u, nil))
	}
	for i := 0; i < 3; i++ {
		step("EnterScope", base.EnterScope(ctx, db.Id, unitName("kv", int64(i)), nil))
	}
	// Everything on the machine is forced out, and kv is destroyed with
	// agents that never come.
	step("DestroyMachine", base.DestroyMachine(ctx, ms[0].Id, DestroyOptions{Force: true}))
	step("DestroyService", base.DestroyService(ctx, "kv"))

	lives := 0
	for ; lives < 2000; lives++ {
		st, err := New(etcdtest.Client(t), Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		budget := new(atomic.Int64)
		budget.Store(1)
		st.etcd.Remote = crashingRemote{KVClient: st.etcd.Remote, budget: budget}
		_, err = NewCleaner(st, time.Second).Pass(ctx)
		snap, serr := base.Snapshot(ctx)
		if serr != nil {
			t.Fatal(serr)
		}
		if ierr := CheckInvariants(snap); ierr != nil {
			t.Fatalf("after crash %d: %v", lives, ierr)
		}
		if err == nil && budget.Load() >= 0 {
			break // a whole pass without needing to write: nothing left to do
		}
		if err != nil && !errors.Is(err, errCrash) {
			t.Fatalf("pass %d: %v", lives, err)
		}
	}
	t.Logf("the cleaner crashed %d times on the way", lives)
	m, err := base.Machine(ctx, ms[0].Id)
	step("Machine", err)
	if m.Life != pb.Life_LIFE_DEAD {
		t.Errorf("machine is %v, want dead", m.Life)
	}
	for _, svc := range []string{"app", "logger"} {
		if units, _ := base.Units(ctx, svc); len(units) != 0 {
			t.Errorf("%s still has %d units", svc, len(units))
		}
	}
	units, err := base.Units(ctx, "kv")
	step("Units", err)
	for _, u := range units {
		if u.Life != pb.Life_LIFE_DYING {
			t.Errorf("%s is %v, want dying", u.Name, u.Life)
		}
	}
	if items, _ := base.listAll(ctx, cleanupsPrefix, true); len(items) != 0 {
		t.Errorf("cleanup items left: %d", len(items))
	}
}
