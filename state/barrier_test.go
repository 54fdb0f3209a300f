package state_test

import (
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A barrier is written at or past the revision asked for, and one already
// there that is recent enough is given again without a write; a revision
// the store has not reached is refused.
func TestBarrier(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)

	before, err := st.Revision(ctx)
	must(t, "Revision", err)
	b1, err := st.Barrier(ctx, 0)
	must(t, "Barrier(0)", err)
	if b1 <= before {
		t.Fatalf("Barrier(0) = %d, want a barrier written past revision %d", b1, before)
	}
	if rev, _ := st.Revision(ctx); rev != b1 {
		t.Errorf("after Barrier(0) = %d, the store is at %d: want the barrier the latest write", b1, rev)
	}
	// Nothing written since: the same barrier serves.
	if got, err := st.Barrier(ctx, 0); err != nil || got != b1 {
		t.Errorf("Barrier(0) again = %d, %v; want %d, written no more", got, err, b1)
	}
	if rev, _ := st.Revision(ctx); rev != b1 {
		t.Errorf("a barrier asked for again wrote: the store is at %d, want %d", rev, b1)
	}
	// A barrier at or past an older revision is the one there.
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	if got, err := st.Barrier(ctx, before); err != nil || got != b1 {
		t.Errorf("Barrier(%d) = %d, %v; want the barrier there, %d", before, got, err, b1)
	}
	// The model moved on: a new barrier.
	now, _ := st.Revision(ctx)
	b2, err := st.Barrier(ctx, 0)
	must(t, "Barrier(0) after a change", err)
	if b2 <= now {
		t.Errorf("Barrier(0) after a change at %d = %d, want a new barrier past it", now, b2)
	}
	if got, err := st.Barrier(ctx, now); err != nil || got != b2 {
		t.Errorf("Barrier(%d) = %d, %v; want %d", now, got, err, b2)
	}

	for _, at := range []int64{-1, b2 + 1000} {
		_, err := st.Barrier(ctx, at)
		wantErr(t, "Barrier of a revision not reached", err, state.ErrInvalid, "", "")
		if rev, _ := st.Revision(ctx); rev != b2 {
			t.Errorf("Barrier(%d) refused wrote: the store is at %d, want %d", at, rev, b2)
		}
	}
	checkInvariants(t, st)
}

// A unit agent's report that only says it has seen a newer barrier moves
// the stored status's barrier on without a history entry; an older one
// does not move it back.
func TestStatusSyncedRevisionWithoutHistory(t *testing.T) {
	st, ctx := historyUnit(t)
	set := func(status string, synced int64) {
		t.Helper()
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, "kv/0", &pb.Status{Status: status, SyncedRevision: synced}))
	}
	synced := func() int64 {
		t.Helper()
		cur, err := st.Status(ctx, state.StatusUnitAgent, "kv/0")
		must(t, "Status", err)
		return cur.GetSyncedRevision()
	}
	set("idle", 0)
	b, err := st.Barrier(ctx, 0)
	must(t, "Barrier", err)
	set("idle", b)
	if got := synced(); got != b {
		t.Errorf("after idle synced to %d, the status is synced to %d", b, got)
	}
	set("idle", 0) // an agent started again, not knowing the barrier yet
	if got := synced(); got != b {
		t.Errorf("after the same status with no barrier, synced to %d, want %d kept", got, b)
	}
	if h := history(t, ctx, st, "kv/0", 0); len(h) != 1 {
		t.Errorf("history has %d entries, want 1: a barrier seen is no change of status", len(h))
	}
	set("executing", 0)
	if got := synced(); got != 0 {
		t.Errorf("after a change of status with no barrier, synced to %d, want 0", got)
	}
	checkInvariants(t, st)
}
