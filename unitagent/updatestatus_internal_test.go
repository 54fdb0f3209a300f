package unitagent

import (
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestUpdateStatusSchedule: update-status runs on a started unit only
// when nothing else is due and its time has come; the schedule then moves
// on by an interval, give or take a tenth; the first of a unit falls
// within its first interval; a saved update-status is dropped on start
// unless it failed into an error state.
func TestUpdateStatusSchedule(t *testing.T) {
	now := time.Now()
	v1 := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "kv", Revision: 1}}
	l := &localState{State: StateRunning, Started: true, Charm: "kv/1", Spec: specOf(t, 1, v1), Revision: 1,
		ConfigRan: configDigest(v1.Config), Relations: map[int64]*localRelation{}, LeaderSeen: true}
	r := &modelView{
		unit: &pb.Unit{Name: "kv/0", Service: "kv", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		service: &pb.Service{Name: "kv", Life: pb.Life_LIFE_ALIVE}, serviceSeen: true,
		relationIDs: map[int64]bool{}, relsKnown: true, relations: map[int64]*relationView{},
		revSeen: true, unitRev: &pb.UnitRevision{Current: 1, Target: 1},
		leaderKnown: true, leaderSettingsKnown: true,
	}
	if act := decide(l, r, "kv/0", now); act.kind != actWait || !act.until.IsZero() {
		t.Fatalf("next without a schedule = %v (until %v), want a plain wait", act, act.until)
	}
	r.updateStatusAt = now.Add(time.Minute)
	if act := decide(l, r, "kv/0", now); act.kind != actWait || !act.until.Equal(r.updateStatusAt) {
		t.Fatalf("next before it is due = %v (until %v), want a wait until %v", act, act.until, r.updateStatusAt)
	}
	r.updateStatusAt = now
	act := decide(l, r, "kv/0", now)
	if act.kind != actHook || act.op.Hook != "update-status" {
		t.Fatalf("next when due = %v, want update-status", act)
	}
	// Another hook due goes first.
	r.leaderVersion = 9
	if act := decide(l, r, "kv/0", now); act.kind != actHook || act.op.Hook != "leader-settings-changed" {
		t.Fatalf("next when due with a hook queued = %v, want leader-settings-changed first", act)
	}

	u := newUpdateStatus(5*time.Minute, now)
	if u.at.Before(now) || !u.at.Before(now.Add(5*time.Minute)) {
		t.Errorf("first update-status at %v, want within the first interval after %v", u.at, now)
	}
	for range 100 {
		u.decided(act, now)
		if d := u.at.Sub(now); d < 270*time.Second || d > 330*time.Second {
			t.Fatalf("next update-status in %v, want 5 minutes give or take 30 s", d)
		}
	}
	if never := newUpdateStatus(-1, now); !never.at.IsZero() {
		t.Errorf("update-status with a negative interval at %v, want never", never.at)
	}

	saved := &localState{State: StateRunning, Op: &hookOp{Hook: "update-status", Step: stepRunning}}
	dropUpdateStatus(saved)
	if saved.Op != nil {
		t.Errorf("a saved update-status survived the start: %+v", saved.Op)
	}
	failed := &localState{State: StateHookError, Resume: StateRunning, Op: &hookOp{Hook: "update-status", Step: stepQueued}}
	dropUpdateStatus(failed)
	if failed.Op == nil {
		t.Errorf("a failed update-status was dropped: the unit is in error for it")
	}
}
