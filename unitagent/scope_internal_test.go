package unitagent

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// scopeAPI answers EnterScope and LeaveScope, calling onEnter first; the
// agent's other calls are not expected.
type scopeAPI struct {
	API
	onEnter func() error
	leaves  int
}

func (f *scopeAPI) EnterScope(context.Context, *pb.EnterScopeRequest, ...grpc.CallOption) (*pb.EnterScopeResponse, error) {
	if err := f.onEnter(); err != nil {
		return nil, err
	}
	return &pb.EnterScopeResponse{}, nil
}

func (f *scopeAPI) LeaveScope(context.Context, *pb.LeaveScopeRequest, ...grpc.CallOption) (*pb.LeaveScopeResponse, error) {
	f.leaves++
	return &pb.LeaveScopeResponse{}, nil
}

// TestEnteringIsMarkedFirst: before the agent asks to enter a scope, the
// mark that it may be in it is on disk, synced; the answer, and leaving,
// wait for the next record (done again after a crash, they do nothing).
// A retry after a failed call writes nothing.
func TestEnteringIsMarkedFirst(t *testing.T) {
	dir := t.TempDir()
	var synced int
	defer func(f func(*os.File) error) { syncFile = f }(syncFile)
	syncFile = func(f *os.File) error { synced++; return f.Sync() }

	onDisk := func() *localRelation {
		t.Helper()
		l, err := newStateStore(dir).load()
		if err != nil {
			t.Fatal(err)
		}
		return l.Relations[4]
	}
	api := &scopeAPI{}
	a := &Agent{cfg: Config{Unit: "app/0", API: api}, logger: hclog.NewNullLogger(), store: newStateStore(dir)}
	var err error
	if a.l, err = a.store.load(); err != nil {
		t.Fatal(err)
	}
	a.l.State, a.l.Started = StateRunning, true
	a.l.Relations[4] = &localRelation{Endpoint: "db", Created: true, Members: map[string]int64{}}
	ex := &executor{a: a}
	enter := action{kind: actEnterScope, relation: 4}

	refused := status.Error(codes.Unavailable, "controller away")
	api.onEnter = func() error {
		if lr := onDisk(); lr == nil || !lr.Entering || lr.InScope {
			t.Errorf("on disk as the agent asks to enter: %+v, want entering", lr)
		}
		if synced == 0 {
			t.Error("the mark of entering is not synced")
		}
		return refused
	}
	if err := ex.do(context.Background(), enter, nil); !errors.Is(err, refused) {
		t.Fatalf("enter = %v, want the controller's refusal", err)
	}
	records, syncs := a.store.seq, synced
	api.onEnter = func() error { return nil }
	if err := ex.do(context.Background(), enter, nil); err != nil {
		t.Fatal(err)
	}
	if a.store.seq != records || synced != syncs {
		t.Errorf("entering again wrote %d records, %d syncs; want none", a.store.seq-records, synced-syncs)
	}
	if lr := a.l.Relations[4]; !lr.InScope || lr.Entering {
		t.Errorf("entered: %+v, want in scope", lr)
	}
	if lr := onDisk(); !lr.Entering || lr.InScope {
		t.Errorf("on disk once entered: %+v, want still entering (the answer is left for later)", lr)
	}

	if err := ex.do(context.Background(), action{kind: actLeaveScope, relation: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("left: %+v, want left", lr)
	}
	if a.store.seq != records || synced != syncs {
		t.Errorf("leaving wrote %d records, %d syncs; want none", a.store.seq-records, synced-syncs)
	}
	if err := a.store.settle(); err != nil {
		t.Fatal(err)
	}
	if lr := onDisk(); lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("on disk once settled: %+v, want left", lr)
	}
}

// TestEnteringMarkLeavesTheScope: a unit whose relation dies while it may
// be in its scope (it asked to enter and the answer, or the record of it,
// was lost to a crash) leaves the scope before relation-broken; one that
// never asked goes to relation-broken at once.
func TestEnteringMarkLeavesTheScope(t *testing.T) {
	rel := &pb.Relation{Id: 4, Life: pb.Life_LIFE_DYING, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	r := &remote{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{4: true}, relsKnown: true,
		relations: map[int64]*remoteRelation{4: {rel: rel, known: true, scoped: true, members: map[string]int64{}}},
	}
	for _, entering := range []bool{true, false} {
		l := &localState{State: StateRunning, Started: true, Charm: "app/1", ConfigVersion: 1,
			Relations: map[int64]*localRelation{4: {Endpoint: "db", Created: true, Entering: entering, Members: map[string]int64{}}}}
		act, ok := relationAction(l, r, "app/0", false)
		switch {
		case !ok:
			t.Errorf("entering %v: no action", entering)
		case entering && act.kind != actLeaveScope:
			t.Errorf("entering: %v, want to leave the scope", act)
		case !entering && (act.kind != actHook || act.op.Hook != "db-relation-broken"):
			t.Errorf("never entered: %v, want db-relation-broken", act)
		}
	}
}
