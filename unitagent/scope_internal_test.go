package unitagent

import (
	"context"
	"errors"
	"os"
	"slices"
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
// leaving go with the next record, which settling does not write (a crash
// may lose them: TestCheckScopes). A retry after a failed call writes
// nothing.
func TestEnteringIsNotSavedOnItsOwn(t *testing.T) {
	dir := t.TempDir()
	var synced int

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
	a.store.syncFile = func(f *os.File) error { synced++; return f.Sync() }
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
	if err := ex.do(context.Background(), enter, &modelView{}); !errors.Is(err, refused) {
		t.Fatalf("enter = %v, want the controller's refusal", err)
	}
	if lr := a.l.Relations[4]; !lr.Entering || lr.InScope {
		t.Errorf("refused: %+v, want entering", lr)
	}
	api.onEnter = func() error { return nil }
	if err := ex.do(context.Background(), enter, &modelView{}); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; !lr.InScope || lr.Entering {
		t.Errorf("entered: %+v, want in scope", lr)
	}
	if err := ex.do(context.Background(), action{kind: actLeaveScope, relation: 4}, &modelView{}); err != nil {
		t.Fatal(err)
	}
	if lr := a.l.Relations[4]; lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("left: %+v, want left", lr)
	}
	if a.store.seq != 0 || synced != 0 {
		t.Errorf("entering and leaving wrote %d records, %d syncs; want none", a.store.seq, synced)
	}
	if err := a.store.sync(barrierSettle); err != nil {
		t.Fatal(err)
	}
	if lr := onDisk(); lr != nil || a.store.seq != 0 || synced != 0 {
		t.Errorf("on disk once settled: %+v, %d records, %d syncs; want nothing", lr, a.store.seq, synced)
	}
	if err := a.record(commitSynced); err != nil {
		t.Fatal(err)
	}
	if lr := onDisk(); lr == nil || lr.InScope || lr.Entering || !lr.Left {
		t.Errorf("on disk with the next record: %+v, want left", lr)
	}
}

// scopesAPI answers UnitScopes with its errors first, then its scopes.
type scopesAPI struct {
	API
	errs   []error
	scopes []*pb.UnitScope
	calls  int
}

func (f *scopesAPI) UnitScopes(context.Context, *pb.UnitScopesRequest, ...grpc.CallOption) (*pb.UnitScopesResponse, error) {
	f.calls++
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return &pb.UnitScopesResponse{Scopes: f.scopes}, nil
}

// TestCheckScopes: started again, the agent marks as entered each scope
// the controller says its unit is in, even one of a relation it has no
// record of (lost with what was not saved), so that it leaves it when the
// relation dies; the marks go with the next record. It asks again while
// the controller is away, and goes on as it is when the controller
// refuses.
func TestCheckScopes(t *testing.T) {
	newAgent := func(api API) *Agent {
		a := &Agent{cfg: Config{Unit: "app/0", API: api}, logger: hclog.NewNullLogger(), store: newStateStore(t.TempDir())}
		var err error
		if a.l, err = a.store.load(); err != nil {
			t.Fatal(err)
		}
		a.l.State, a.l.Started = StateRunning, true
		a.l.Relations[4] = &localRelation{Endpoint: "db", Created: true, Entering: true, Members: map[string]int64{}}
		a.l.Relations[5] = &localRelation{Endpoint: "cache", Created: true, Members: map[string]int64{}}
		return a
	}
	api := &scopesAPI{errs: []error{status.Error(codes.Unavailable, "controller away")},
		scopes: []*pb.UnitScope{{Relation: 4, Endpoint: "db"}, {Relation: 7, Endpoint: "juju-info"}}}
	a := newAgent(api)
	if err := a.checkScopes(context.Background()); err != nil {
		t.Fatal(err)
	}
	if api.calls != 2 {
		t.Errorf("%d calls, want 2 (asked again after Unavailable)", api.calls)
	}
	if a.store.seq != 0 {
		t.Errorf("checking wrote %d records, want none", a.store.seq)
	}
	if err := a.record(commitSynced); err != nil { // the next record
		t.Fatal(err)
	}
	l, err := newStateStore(a.store.dir).load()
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{4: "db in scope", 5: "cache", 7: "juju-info in scope"} {
		lr := l.Relations[id]
		got := "none"
		if lr != nil {
			got = lr.Endpoint
			if lr.InScope {
				got += " in scope"
			}
		}
		if got != want {
			t.Errorf("relation %d on disk: %s, want %s", id, got, want)
		}
	}
	rel := &pb.Relation{Id: 7, Life: pb.Life_LIFE_DYING, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "juju-info"}}, {Service: "logger", Endpoint: &pb.Endpoint{Name: "host"}},
	}}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{7: true}, relsKnown: true,
		relations: map[int64]*relationView{7: {rel: rel, known: true, scoped: true, members: map[string]int64{}}},
	}
	delete(a.l.Relations, 4)
	delete(a.l.Relations, 5)
	if act, ok := relationAction(a.l, r, "app/0", false); !ok || act.kind != actLeaveScope || act.relation != 7 {
		t.Errorf("relation 7 dying: %v, %v; want to leave its scope", act, ok)
	}

	refused := &scopesAPI{errs: []error{status.Error(codes.Unimplemented, "unknown method UnitScopes")}}
	a = newAgent(refused)
	if err := a.checkScopes(context.Background()); err != nil || a.l.Relations[4].InScope || a.store.seq != 0 {
		t.Errorf("refused: %v, %+v, %d records; want nothing changed", err, a.l.Relations[4], a.store.seq)
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
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{4: true}, relsKnown: true,
		relations: map[int64]*relationView{4: {rel: rel, known: true, scoped: true, members: map[string]int64{}}},
	}
	for _, entering := range []bool{true, false} {
		l := &localState{State: StateRunning, Started: true, Charm: "app/1", Spec: testSpec(1), Revision: 1, ConfigRan: configDigest(nil),
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

// deathAPI answers LeaveScope, counting the calls, and EnsureUnitDead,
// keeping the departures each call carried and refusing with its errors
// first.
type deathAPI struct {
	API
	leaves  []int64
	carried [][]int64
	errs    []error
}

func (f *deathAPI) LeaveScope(_ context.Context, in *pb.LeaveScopeRequest, _ ...grpc.CallOption) (*pb.LeaveScopeResponse, error) {
	f.leaves = append(f.leaves, in.GetRelation())
	return &pb.LeaveScopeResponse{}, nil
}

func (f *deathAPI) EnsureUnitDead(_ context.Context, in *pb.EnsureUnitDeadRequest, _ ...grpc.CallOption) (*pb.EnsureUnitDeadResponse, error) {
	f.carried = append(f.carried, in.GetLeaveScopes())
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return &pb.EnsureUnitDeadResponse{}, nil
}

// TestCarriedDepartures: a dying unit's departures wait for its death
// call, which carries them; refused (a controller that did not leave
// them), they go in calls of their own before the next try. An alive
// unit leaving a dying relation's scope leaves at once.
func TestCarriedDepartures(t *testing.T) {
	api := &deathAPI{errs: []error{status.Error(codes.FailedPrecondition, "unit app/0 is still in the scope of relation 4")}}
	a := &Agent{cfg: Config{Unit: "app/0", API: api}, logger: hclog.NewNullLogger(), store: newStateStore(t.TempDir())}
	var err error
	if a.l, err = a.store.load(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{4, 5} {
		a.l.Relations[id] = &localRelation{Endpoint: "db", Created: true, InScope: true, Members: map[string]int64{}}
	}
	ex := &executor{a: a}
	ctx := context.Background()
	dying := &modelView{unit: &pb.Unit{Name: "app/0", Life: pb.Life_LIFE_DYING}}
	for _, id := range []int64{4, 5} {
		if err := ex.do(ctx, action{kind: actLeaveScope, relation: id}, dying); err != nil {
			t.Fatal(err)
		}
		if lr := a.l.Relations[id]; lr.InScope || !lr.Left {
			t.Errorf("relation %d after leaving: %+v, want left", id, lr)
		}
	}
	if len(api.leaves) != 0 {
		t.Errorf("the dying unit left in calls of their own: %v, want none yet", api.leaves)
	}
	refused := ex.do(ctx, action{kind: actEnsureDead}, dying)
	if status.Code(refused) != codes.FailedPrecondition {
		t.Fatalf("first death call = %v, want the refusal", refused)
	}
	if len(api.carried) != 1 || !slices.Equal(api.carried[0], []int64{4, 5}) {
		t.Errorf("the death call carried %v, want [4 5]", api.carried)
	}
	if !slices.Equal(api.leaves, []int64{4, 5}) || len(a.leaving) != 0 {
		t.Errorf("after the refusal: left %v on their own, %v still held; want [4 5], none", api.leaves, a.leaving)
	}
	if err := ex.do(ctx, action{kind: actEnsureDead}, dying); err != nil {
		t.Fatal(err)
	}
	if len(api.carried) != 2 || len(api.carried[1]) != 0 {
		t.Errorf("the second death call carried %v, want none", api.carried[1:])
	}

	api.leaves = nil
	a.l.Relations[6] = &localRelation{Endpoint: "db", Created: true, InScope: true, Members: map[string]int64{}}
	alive := &modelView{unit: &pb.Unit{Name: "app/0", Life: pb.Life_LIFE_ALIVE}}
	if err := ex.do(ctx, action{kind: actLeaveScope, relation: 6}, alive); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(api.leaves, []int64{6}) || len(a.leaving) != 0 {
		t.Errorf("the alive unit left %v on their own, held %v; want [6], none", api.leaves, a.leaving)
	}
}
