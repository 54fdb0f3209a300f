package unitagent

import (
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestNoDepartureBeforeTheScopeIsKnown: a restarted agent knows its
// relations before its scope watches answer; until they do, the members it
// joined before are not departed (they would be joined again at once).
func TestNoDepartureBeforeTheScopeIsKnown(t *testing.T) {
	l := &localState{
		State: StateRunning, Started: true, Charm: "app/1", Spec: testSpec(1), Revision: 1, ConfigRan: configDigest(nil),
		Relations: map[int64]*localRelation{4: {Endpoint: "db", Created: true, InScope: true, Members: map[string]int64{"kv/0": 7}}},
	}
	rel := &pb.Relation{Id: 4, Life: pb.Life_LIFE_ALIVE, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{4: true}, relsKnown: true,
		relations: map[int64]*relationView{4: {rel: rel, known: true, members: map[string]int64{}}},
	}
	if act, ok := relationAction(l, r, "app/0", false); ok && act.kind == actHook {
		t.Fatalf("relationAction before the scope is known = %v, want no hook", act)
	}
	r.relations[4].scoped = true
	act, ok := relationAction(l, r, "app/0", false)
	if !ok || act.kind != actHook || act.op.Hook != "db-relation-departed" || act.op.Remote != "kv/0" {
		t.Fatalf("relationAction once the scope is known empty = %v, want db-relation-departed of kv/0", act)
	}
}

// TestNoHookBeforeTheSpecIsKnown: a hook in progress when the agent
// stopped runs again only once the agent holds its spec, so that
// config-get in it prints the configuration; an agent that ran before
// revisions reads its unit's current revision's, as the one it runs.
func TestNoHookBeforeTheSpecIsKnown(t *testing.T) {
	l := &localState{State: StateRunning, Started: true, Charm: "app/1",
		Op: &hookOp{Hook: "config-changed", Version: 2, Step: stepQueued}}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
	}
	if act := decide(l, r, "app/0", time.Now()); act.kind != actWait {
		t.Fatalf("next before the unit's revision is known = %v, want a wait", act)
	}
	r.revSeen, r.unitRev = true, &pb.UnitRevision{Current: 2, Target: 3}
	if act := decide(l, r, "app/0", time.Now()); act.kind != actFetchSpec || act.revision != 2 || !act.adopt {
		t.Fatalf("next once the unit's revision is known = %v, want revision 2 read and adopted", act)
	}
	l.Spec, l.Revision = testSpec(2), 2
	if act := decide(l, r, "app/0", time.Now()); act.kind != actHook || act.op != nil {
		t.Fatalf("next once the spec is held = %v, want the hook in progress", act)
	}
}

// TestReloadedRelationWithoutMembers: a relation entered but not yet
// joined with anyone is saved without members; loaded again (an agent
// restarted), its first member joins like any other.
func TestReloadedRelationWithoutMembers(t *testing.T) {
	f := newStateStore(t.TempDir())
	l := newLocalState()
	l.State, l.Started = StateRunning, true
	l.Relations[1] = &localRelation{Endpoint: "host", Created: true, InScope: true, Members: map[string]int64{}}
	if err := f.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	l, err := f.load()
	if err != nil {
		t.Fatal(err)
	}
	applySuccess(l, &hookOp{Hook: "host-relation-joined", Relation: 1, Endpoint: "host", Remote: "app/0"})
	if got := l.Relations[1].Members; len(got) != 1 {
		t.Fatalf("members after joined = %v, want app/0", got)
	}
}

// TestDyingServiceLeftToTheCleaner: a unit of a dying service leaves
// setting it dying to the controller's cleaner for cleanerGrace, then does
// it itself.
func TestDyingServiceLeftToTheCleaner(t *testing.T) {
	l := &localState{State: StateRunning, Started: true, Charm: "app/1", Spec: testSpec(1), Revision: 1, ConfigRan: configDigest(nil)}
	seen := time.Now()
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_DYING}, serviceSeen: true, serviceDyingSince: seen,
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
	}
	if act := decide(l, r, "app/0", seen.Add(time.Second)); act.kind != actWait || !act.until.Equal(seen.Add(cleanerGrace)) {
		t.Fatalf("next a second after the service was seen dying = %v (until %v), want a wait until %v", act, act.until, seen.Add(cleanerGrace))
	}
	if act := decide(l, r, "app/0", seen.Add(cleanerGrace)); act.kind != actSetDying {
		t.Fatalf("next once the grace is over = %v, want the unit set dying by its agent", act)
	}
	r.unit.Life = pb.Life_LIFE_DYING // the cleaner did it
	if act := decide(l, r, "app/0", seen.Add(time.Second)); act.kind == actSetDying || act.kind == actWait && act.until.Equal(seen.Add(cleanerGrace)) {
		t.Fatalf("next once the unit is dying = %v, want it on its way out", act)
	}
}

// TestRelationCreatedBeforeConfigChanged: a relation the service is in,
// whose watch or scope's watch has not answered yet, holds config-changed
// back, so that its relation-created runs first (TestHookOrder failed once
// in CI when config-changed slipped in).
func TestRelationCreatedBeforeConfigChanged(t *testing.T) {
	l := &localState{State: StateReady, Charm: "app/1", Spec: testSpec(1), Relations: map[int64]*localRelation{}}
	rel := &pb.Relation{Id: 4, Life: pb.Life_LIFE_ALIVE, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		relationIDs: map[int64]bool{4: true}, relsKnown: true,
		relations: map[int64]*relationView{4: {members: map[string]int64{}}},
	}
	if act := decide(l, r, "app/0", time.Now()); act.kind != actWait {
		t.Fatalf("next before the relation's watch answered = %v, want a wait", act)
	}
	r.relations[4].rel, r.relations[4].known = rel, true
	if act := decide(l, r, "app/0", time.Now()); act.kind != actWait {
		t.Fatalf("next before the scope's watch answered = %v, want a wait", act)
	}
	r.relations[4].scoped = true
	if act := decide(l, r, "app/0", time.Now()); act.kind != actHook || act.op.Hook != "db-relation-created" {
		t.Fatalf("next once the relation is known = %v, want db-relation-created", act)
	}
}

// TestRefusedSubordinateHoldsNothingBack: a subordinate the controller
// refused to place (rule P1) is not asked for again until its time comes,
// and meanwhile the principal's member hooks run.
func TestRefusedSubordinateHoldsNothingBack(t *testing.T) {
	l := &localState{
		State: StateRunning, Started: true, Charm: "app/1", Spec: testSpec(1), Revision: 1, ConfigRan: configDigest(nil),
		Relations: map[int64]*localRelation{
			4: {Endpoint: "db", Created: true, InScope: true, Members: map[string]int64{}},
			3: {Endpoint: "logs", Created: true, InScope: true, Members: map[string]int64{}},
		},
		AddedSubordinates: map[int64]string{},
	}
	db := &pb.Relation{Id: 4, Life: pb.Life_LIFE_ALIVE, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "kv", Endpoint: &pb.Endpoint{Name: "server"}},
	}}
	logs := &pb.Relation{Id: 3, Life: pb.Life_LIFE_ALIVE, Scope: pb.Scope_SCOPE_CONTAINER, Endpoints: []*pb.RelationEndpoint{
		{Service: "app", Endpoint: &pb.Endpoint{Name: "logs"}}, {Service: "side", Subordinate: true, Endpoint: &pb.Endpoint{Name: "logs"}},
	}}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{3: true, 4: true}, relsKnown: true,
		relations: map[int64]*relationView{
			4: {rel: db, known: true, scoped: true, members: map[string]int64{"kv/0": 1}},
			3: {rel: logs, known: true, scoped: true, members: map[string]int64{}},
		},
	}
	if act, ok := relationAction(l, r, "app/0", false); !ok || act.kind != actAddSub || act.unit != "side" {
		t.Fatalf("relationAction with a subordinate to add = %v, want it added", act)
	}
	l.SubordinatesRefused = map[int64]time.Time{3: time.Now().Add(time.Minute)}
	act, ok := relationAction(l, r, "app/0", false)
	if !ok || act.kind != actHook || act.op.Hook != "db-relation-joined" || act.op.Remote != "kv/0" {
		t.Fatalf("relationAction with the subordinate refused = %v, want db-relation-joined of kv/0", act)
	}
}
