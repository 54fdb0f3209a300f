package unitagent

import (
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestAlivePrincipalRemovesDeadSubordinate: a subordinate that died while
// its principal lives on (its service or its container relation
// destroyed) is removed by the principal (U5); one still dying is left
// to end, and nothing is done before the subordinates are known.
func TestAlivePrincipalRemovesDeadSubordinate(t *testing.T) {
	now := time.Now()
	v1 := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "app", Revision: 1}}
	l := &localState{State: StateRunning, Started: true, Charm: "app/1", Spec: specOf(t, 1, v1), Revision: 1,
		ConfigRan: configDigest(v1.Config), Relations: map[int64]*localRelation{}, LeaderSeen: true}
	r := &modelView{
		unit: &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "app", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		leaderKnown: true, leaderSettingsKnown: true,
		subs: map[string]*pb.Unit{
			"logger/0": {Name: "logger/0", Service: "logger", Principal: "app/0", Life: pb.Life_LIFE_DEAD},
			"audit/0":  {Name: "audit/0", Service: "audit", Principal: "app/0", Life: pb.Life_LIFE_DYING},
		},
	}
	if act := decide(l, r, "app/0", now); act.kind == actRemoveSub {
		t.Fatalf("next before the subordinates are known = %v, want no removal", act)
	}
	r.subsKnown = true
	if act := decide(l, r, "app/0", now); act.kind != actRemoveSub || act.unit != "logger/0" {
		t.Fatalf("next = %v, want logger/0 removed", act)
	}
	delete(r.subs, "logger/0")
	if act := decide(l, r, "app/0", now); act.kind == actRemoveSub {
		t.Fatalf("next with only a dying subordinate = %v, want no removal", act)
	}
}
