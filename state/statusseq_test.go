package state_test

import (
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
