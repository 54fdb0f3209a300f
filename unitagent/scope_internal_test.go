package unitagent

import (
	"context"
	"errors"
	"fmt"
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

// TestEnteringIsNotSavedOnItsOwn: the agent asks to enter a scope with
// nothing written first; the mark that it may be in it, the answer, and
// leaving go with the next record, which settling writes unsynced: a
// crash of the machine may lose them, and the scope's watch then tells
// (TestInScopeLeavesTheScope). A retry after a failed call writes nothing.
func TestEnteringIsNotSavedOnItsOwn(t *testing.T) {
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
		if lr := onDisk(); lr != nil {
			t.Errorf("on disk as the agent asks to enter: %+v, want nothing", lr)
		}
		return refused
	}
	if err := ex.do(context.Background(), enter, nil); !errors.Is(err, refused) {
		t.Fatalf("enter = %v, want the controller's refusal", err)
	}
	if lr := a.l.Relations[4]; !lr.Entering || lr.InScope {
		t.Errorf("refused: %+v, want entering", lr)
	}
	api.onEnter = func() error { return nil }
	if err := ex.do(context.Background(), enter, nil); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; !lr.InScope || lr.Entering {
		t.Errorf("entered: %+v, want in scope", lr)
	}
	if err := ex.do(context.Background(), action{kind: actLeaveScope, relation: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("left: %+v, want left", lr)
	}
	if a.store.seq != 0 || synced != 0 {
		t.Errorf("entering and leaving wrote %d records, %d syncs; want none", a.store.seq, synced)
	}
	if err := a.store.settle(); err != nil {
		t.Fatal(err)
	}
	if lr := onDisk(); lr == nil || lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("on disk once settled: %+v, want left", lr)
	}
	if synced != 0 {
		t.Errorf("settling synced %d times, want none", synced)
	}
}

// TestInScopeLeavesTheScope: a unit whose relation dies while it may be
// in its scope leaves the scope before relation-broken: it asked to enter
// and the answer was lost, or the scope's watch shows it in the scope
// whatever its record (even none: a crash of the machine lost all it
// saved since relation-created). One that never asked, and that the watch
// does not show, goes to relation-broken at once, once the watch has
// told.
func TestInScopeLeavesTheScope(t *testing.T) {
	rel := &pb.Relation{Id: 4, Life: pb.Life_LIFE_DYING, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	remoteWith := func(scoped bool, members ...string) *remote {
		rr := &remoteRelation{rel: rel, known: true, scoped: scoped, members: map[string]int64{}}
		for _, m := range members {
			rr.members[m] = 1
		}
		return &remote{
			unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
			relationIDs: map[int64]bool{4: true}, relsKnown: true,
			relations: map[int64]*remoteRelation{4: rr},
		}
	}
	record := func(entering bool) *localRelation {
		return &localRelation{Endpoint: "db", Created: true, Entering: entering, Members: map[string]int64{}}
	}
	const leave, broken, wait = "leave", "broken", "wait"
	for _, c := range []struct {
		name string
		lr   *localRelation
		r    *remote
		want string
	}{
		{"entering", record(true), remoteWith(true), leave},
		{"in the scope, no mark", record(false), remoteWith(true, "app/0"), leave},
		{"in the scope, no record", nil, remoteWith(true, "app/0", "kv/0"), leave},
		{"never entered", record(false), remoteWith(true, "kv/0"), broken},
		{"never entered, the scope not told yet", record(false), remoteWith(false), wait},
		{"no record, not in the scope", nil, remoteWith(true, "kv/0"), wait},
	} {
		l := &localState{State: StateRunning, Started: true, Charm: "app/1", ConfigVersion: 1, Relations: map[int64]*localRelation{}}
		if c.lr != nil {
			l.Relations[4] = c.lr
		}
		act, ok := relationAction(l, c.r, "app/0", false)
		got := wait
		switch {
		case ok && act.kind == actLeaveScope:
			got = leave
		case ok && act.kind == actHook && act.op.Hook == "db-relation-broken":
			got = broken
		case ok:
			got = fmt.Sprint(act)
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestLeavingWithNoRecord: leaving a scope the unit has no record of
// makes one, as relation-created left it, so that relation-broken runs
// next.
func TestLeavingWithNoRecord(t *testing.T) {
	rel := &pb.Relation{Id: 4, Life: pb.Life_LIFE_DYING, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	r := &remote{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{4: true}, relsKnown: true,
		relations: map[int64]*remoteRelation{4: {rel: rel, known: true, scoped: true, members: map[string]int64{"app/0": 1}}},
	}
	api := &scopeAPI{}
	a := &Agent{cfg: Config{Unit: "app/0", API: api}, logger: hclog.NewNullLogger(), store: newStateStore(t.TempDir())}
	var err error
	if a.l, err = a.store.load(); err != nil {
		t.Fatal(err)
	}
	a.l.State, a.l.Started = StateRunning, true
	ex := &executor{a: a}
	if err := ex.do(context.Background(), action{kind: actLeaveScope, relation: 4}, r); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; lr == nil || !lr.Left || lr.Endpoint != "db" || api.leaves != 1 {
		t.Fatalf("left with no record: %+v, %d calls; want a record of db, left, one call", lr, api.leaves)
	}
	delete(r.relations[4].members, "app/0")
	act, ok := relationAction(a.l, r, "app/0", false)
	if !ok || act.kind != actHook || act.op.Hook != "db-relation-broken" {
		t.Errorf("after leaving: %v, %v; want db-relation-broken", act, ok)
	}
}
