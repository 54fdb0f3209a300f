package state

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestAuditedCallCrashingAnywhereLeavesNoChangeWithoutItsEntry crashes
// an operator's call (a deploy's units in three transactions after the
// reservations of their numbers and machines' ids) after each of its
// writes: whatever it
// committed comes with its audit entry, which stays pending, its result
// never recorded.
func TestAuditedCallCrashingAnywhereLeavesNoChangeWithoutItsEntry(t *testing.T) {
	ctx := etcdtest.Context(t)
	for writes := int64(0); writes <= 6; writes++ {
		ns := etcdtest.Namespace(t)
		base, err := New(etcdtest.Client(t), Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := base.AddService(ctx, AddServiceArgs{Name: "app", Charm: &pb.CharmRef{Name: "app"}}); err != nil {
			t.Fatal(err)
		}
		st, err := New(etcdtest.Client(t), Config{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		budget := new(atomic.Int64)
		budget.Store(writes)
		st.etcd.Remote = crashingRemote{KVClient: st.etcd.Remote, budget: budget}
		a := NewAudit(&pb.AuditEntry{User: "alice", Rpc: "AddUnits"})
		_, err = st.AddUnits(WithAudit(ctx, a), "app", 30, Placement{})
		if err != nil && !errors.Is(err, errCrash) {
			t.Fatalf("after %d writes: AddUnits = %v", writes, err)
		}
		crashed := err != nil
		if err == nil {
			// The call ended: its result is recorded, unless the crash
			// comes first.
			err := st.FinishAudit(ctx, a, 0, "", false)
			if err != nil && !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			crashed = err != nil
		}
		snap, err := base.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckInvariants(snap); err != nil {
			t.Fatalf("after %d writes: %v", writes, err)
		}
		units, err := base.Units(ctx, "app")
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := base.AuditAfter(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(units) > 0 && len(entries) != 1:
			t.Errorf("after %d writes: %d units and %d audit entries, want 1", writes, len(units), len(entries))
		case len(units) == 0 && len(entries) != 0:
			t.Errorf("after %d writes: no unit and %d audit entries, want none", writes, len(entries))
		case len(entries) == 1 && entries[0].Pending != crashed:
			t.Errorf("after %d writes (crashed %v): entry pending %v", writes, crashed, entries[0].Pending)
		}
		t.Logf("after %d writes: crashed %v, %d units, %d entries", writes, crashed, len(units), len(entries))
	}
}
