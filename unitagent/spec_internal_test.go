package unitagent

import (
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// testSpec is the local record of revision n of a spec of charm app-1
// with no configuration.
func testSpec(n int64) *localSpec {
	ls, err := newLocalSpec(&pb.Revision{Number: n, Spec: &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "app", Revision: 1}}})
	if err != nil {
		panic(err)
	}
	return ls
}

// specOf is the local record of revision n of spec.
func specOf(t *testing.T, n int64, spec *pb.ServiceSpec) *localSpec {
	t.Helper()
	ls, err := newLocalSpec(&pb.Revision{Number: n, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	ls.spec = nil // decoded again, as from the disk
	return ls
}

func strValue(s string) *pb.ConfigValue {
	return &pb.ConfigValue{Value: &pb.ConfigValue_StringValue{StringValue: s}}
}

// TestMoveSteps walks next through a move of a running unit: the
// target's spec read, the new charm downloaded, upgrade-charm, then
// config-changed, the revision recorded, and reported; each step as the
// previous one's result leaves the local state.
func TestMoveSteps(t *testing.T) {
	now := time.Now()
	v1 := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "app", Revision: 1}, Config: map[string]*pb.ConfigValue{"x": strValue("a")}}
	v2 := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "app", Revision: 2}, Config: map[string]*pb.ConfigValue{"x": strValue("b")}}
	l := &localState{State: StateRunning, Started: true, Charm: "app/1", Spec: specOf(t, 1, v1), Revision: 1,
		ConfigRan: configDigest(v1.Config), Relations: map[int64]*localRelation{}, LeaderSeen: true}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		leaderKnown: true, leaderSettingsKnown: true,
	}
	want := func(step string, kind actionKind, hookName string) {
		t.Helper()
		act := decide(l, r, "app/0", now)
		if act.kind != kind || hookName != "" && (act.op == nil || act.op.Hook != hookName) {
			t.Fatalf("%s: next = %v, want %d %s", step, act, kind, hookName)
		}
	}
	want("on its revision", actWait, "")
	r.unitRev = &pb.UnitRevision{Current: 1, Target: 2}
	want("target moved", actFetchSpec, "")
	l.Spec = specOf(t, 2, v2)
	want("spec read", actDownload, "")
	l.Charm, l.Upgrade, l.ConfigRan = "app/2", true, ""
	want("charm unpacked", actHook, "upgrade-charm")
	applySuccess(l, &hookOp{Hook: "upgrade-charm", Version: 2})
	act := decide(l, r, "app/0", now)
	if act.kind != actHook || act.op.Hook != "config-changed" || act.op.Version != 2 {
		t.Fatalf("upgraded: next = %v, want config-changed for revision 2", act)
	}
	applySuccess(l, act.op)
	if l.ConfigRan != configDigest(v2.Config) {
		t.Fatalf("config-changed ran: ConfigRan %q, want the digest of revision 2's configuration", l.ConfigRan)
	}
	want("configured", actRecord, "")
	l.Revision = 2
	want("recorded", actReport, "")
	r.unitRev = &pb.UnitRevision{Current: 2, Target: 2}
	want("reported", actWait, "")

	// Back to revision 1's configuration with the same charm: only
	// config-changed runs.
	r.unitRev = &pb.UnitRevision{Current: 2, Target: 3}
	want("target 3", actFetchSpec, "")
	l.Spec = specOf(t, 3, &pb.ServiceSpec{Charm: v2.Charm, Config: v1.Config})
	want("spec 3 read", actHook, "config-changed")
}

// TestFailedMoveGivesWay: a move's hook that failed (in error, or
// waiting to run again) gives way to a newer target; one without a newer
// target waits for resolved, and a failed hook of another kind is not
// given up.
func TestFailedMoveGivesWay(t *testing.T) {
	now := time.Now()
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 2},
	}
	l := &localState{State: StateHookError, Resume: StateRunning, Started: true, Charm: "app/1", Spec: testSpec(2), Revision: 1,
		Op: &hookOp{Hook: "config-changed", Version: 2, Step: stepQueued, Attempts: 5}, Relations: map[int64]*localRelation{}}
	if act := decide(l, r, "app/0", now); act.kind != actWait || act.why != "resolved" {
		t.Fatalf("in error, target unchanged: next = %v, want a wait for resolved", act)
	}
	r.unitRev = &pb.UnitRevision{Current: 1, Target: 3}
	if act := decide(l, r, "app/0", now); act.kind != actDropMove {
		t.Fatalf("in error, target moved on: next = %v, want the move given up", act)
	}
	l.State, l.Resume = StateRunning, ""
	l.Op.Attempts, l.Op.NotBefore = 2, now.Add(time.Minute)
	if act := decide(l, r, "app/0", now); act.kind != actDropMove {
		t.Fatalf("retrying, target moved on: next = %v, want the move given up", act)
	}
	l.Op = &hookOp{Hook: "db-relation-changed", Relation: 1, Endpoint: "db", Step: stepQueued, Attempts: 2, NotBefore: now.Add(time.Minute)}
	if act := decide(l, r, "app/0", now); act.kind != actWait {
		t.Fatalf("a relation hook retrying: next = %v, want its retry waited for", act)
	}
}
