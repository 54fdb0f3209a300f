package state_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// An agent's report that arrives after a newer one of the same agent (it
// gave up waiting for it, and reported the next status) is ignored: the
// unit keeps the newer status.
func TestStatusReportOvertakenIsIgnored(t *testing.T) {
	st, ctx := historyUnit(t)
	base := time.Now().UnixNano()
	set := func(s string, seq int64) {
		t.Helper()
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, "kv/0", &pb.Status{Status: s, Seq: seq}))
	}
	current := func() string {
		t.Helper()
		cur, err := st.Status(ctx, state.StatusUnitAgent, "kv/0")
		must(t, "Status", err)
		return cur.GetStatus()
	}

	set("allocating", 0) // the controller's own: not ordered
	set("idle", base+20)
	set("executing", base+10) // overtaken on its way
	if got := current(); got != "idle" {
		t.Fatalf("after idle (seq +20) then executing (seq +10), status %q, want idle", got)
	}
	if h := history(t, ctx, st, "kv/0", 0); len(h) != 2 {
		t.Errorf("history has %d entries, want 2 (allocating, idle): the overtaken report left none", len(h))
	}

	// The same status again with a newer seq changes nothing visible, but
	// a report older than it that is still on its way must find it newer.
	set("idle", base+40)
	set("executing", base+30)
	if got := current(); got != "idle" {
		t.Errorf("after idle repeated (seq +40) then executing (seq +30), status %q, want idle", got)
	}

	// A status without a seq always applies, and one with any seq follows it.
	set("lost", 0)
	set("executing", base+35)
	if got := current(); got != "executing" {
		t.Errorf("after lost (no seq) then executing (seq +35), status %q, want executing", got)
	}

	// A seq far below the stored one is the agent's clock set back, not a
	// delayed report: it applies.
	set("idle", base+35-int64(10*time.Minute))
	if got := current(); got != "idle" {
		t.Errorf("after a report 10 minutes behind, status %q, want idle (a clock set back)", got)
	}
}

// SetUnitStatuses records several units' statuses, ten to a transaction,
// each as SetStatus would: with its history entry, an overtaken report
// ignored, and a unit that does not exist refused alone.
func TestSetUnitStatusesRecordsEachAsSetStatusWould(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 23, state.Placement{})
	base := time.Now().UnixNano()
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, "kv/3", &pb.Status{Status: "idle", Seq: base + 100}))
	var reports []state.UnitStatus
	for i := range 23 {
		reports = append(reports, state.UnitStatus{Kind: state.StatusUnitAgent, Unit: fmt.Sprintf("kv/%d", i), Status: &pb.Status{Status: "executing", Seq: base + 10}})
	}
	reports = append(reports, state.UnitStatus{Kind: state.StatusUnitAgent, Unit: "kv/99", Status: &pb.Status{Status: "idle"}})
	txns := st.Stats().Txns
	errs, err := st.SetUnitStatuses(ctx, reports)
	must(t, "SetUnitStatuses", err)
	if got := st.Stats().Txns - txns; got != 3 {
		t.Errorf("%d transactions for 23 reports, want 3 (ten a transaction)", got)
	}
	for i, err := range errs {
		if (i == 23) != errors.Is(err, state.ErrNotFound) {
			t.Errorf("report %d (%s): %v", i, reports[i].Unit, err)
		}
	}
	for i := range 23 {
		unit := fmt.Sprintf("kv/%d", i)
		cur, err := st.Status(ctx, state.StatusUnitAgent, unit)
		must(t, "Status", err)
		want, entries := "executing", 1
		if i == 3 {
			want, entries = "idle", 1 // its report was overtaken
		}
		if cur.GetStatus() != want || cur.GetSinceUnixNano() == 0 {
			t.Errorf("%s: status %q since %d, want %q, stamped", unit, cur.GetStatus(), cur.GetSinceUnixNano(), want)
		}
		if h := history(t, ctx, st, unit, 0); len(h) != entries {
			t.Errorf("%s: %d history entries, want %d", unit, len(h), entries)
		}
	}
	if _, err := st.SetUnitStatuses(ctx, []state.UnitStatus{reports[0], reports[0]}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("a unit reported twice: %v, want invalid", err)
	}
	if max := st.Stats().MaxOps; max > state.MaxTxnOps {
		t.Errorf("a transaction of %d operations", max)
	}
}
