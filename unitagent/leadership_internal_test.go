package unitagent

import (
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestLeadershipHooks: after install and before config-changed a unit
// runs leader-elected when it leads, leader-settings-changed when it does
// not (Juju's order); afterwards leader-elected when it becomes the
// leader, and, on a unit that does not lead, leader-settings-changed when
// the settings' version moves or it stops leading. Nothing runs until the
// leadership's watches have answered.
func TestLeadershipHooks(t *testing.T) {
	now := time.Now()
	v1 := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "kv", Revision: 1}}
	newUnit := func() (*localState, *modelView) {
		l := &localState{State: StateReady, Charm: "kv/1", Spec: specOf(t, 1, v1), Relations: map[int64]*localRelation{}}
		r := &modelView{
			unit: &pb.Unit{Name: "kv/0", Service: "kv", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
			service: &pb.Service{Name: "kv", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
			relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
			revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		}
		return l, r
	}
	// run applies the hooks decide decides until it waits, and returns them.
	run := func(l *localState, r *modelView) []string {
		t.Helper()
		var ran []string
		for range 10 {
			act := decide(l, r, "kv/0", now)
			switch act.kind {
			case actHook:
				ran = append(ran, act.op.Hook)
				applySuccess(l, act.op)
			case actRecord:
				l.Revision = l.Spec.Revision
			case actWait:
				return ran
			default:
				t.Fatalf("next = %v, want a hook, a record or a wait", act)
			}
		}
		t.Fatalf("no wait after %v", ran)
		return nil
	}
	same := func(what string, got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: hooks %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: hooks %v, want %v", what, got, want)
			}
		}
	}

	l, r := newUnit()
	if act := decide(l, r, "kv/0", now); act.kind != actWait || act.why != "the service's leadership" {
		t.Fatalf("next before the leadership is known = %v, want a wait for it", act)
	}
	r.leaderKnown, r.leaderSettingsKnown = true, true
	r.leader = "kv/1"
	same("a new unit that does not lead", run(l, r), "leader-settings-changed", "config-changed", "start")
	same("nothing changed", run(l, r))
	r.leaderVersion = 42
	same("settings changed", run(l, r), "leader-settings-changed")
	if l.LeaderSettings != 42 || l.Leader {
		t.Fatalf("after leader-settings-changed: Leader %v, LeaderSettings %d; want false, 42", l.Leader, l.LeaderSettings)
	}
	r.leader = "kv/0"
	same("elected", run(l, r), "leader-elected")
	r.leaderVersion = 50
	same("the leader's own write", run(l, r))
	r.leader = ""
	same("no longer the leader", run(l, r), "leader-settings-changed")

	l, r = newUnit()
	r.leaderKnown, r.leaderSettingsKnown, r.leader = true, true, "kv/0"
	same("a new unit that leads", run(l, r), "leader-elected", "config-changed", "start")

	// A crash after the hook ran but before its success was saved runs
	// it again (the state saved is the one before); once saved, never.
	l, r = newUnit()
	r.leaderKnown, r.leaderSettingsKnown, r.leader = true, true, "kv/0"
	act := decide(l, r, "kv/0", now)
	if act.kind != actHook || act.op.Hook != "leader-elected" {
		t.Fatalf("next = %v, want leader-elected", act)
	}
	if again := decide(l, r, "kv/0", now); again.kind != actHook || again.op.Hook != "leader-elected" {
		t.Fatalf("next without the success saved = %v, want leader-elected again", again)
	}
	applySuccess(l, act.op)
	if again := decide(l, r, "kv/0", now); again.kind == actHook && again.op.Hook == "leader-elected" {
		t.Fatalf("next after leader-elected's success = %v, want not leader-elected again", again)
	}
}
