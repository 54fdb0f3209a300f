package unitagent_test

import (
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// barrier asks the controller for a barrier past everything so far.
func (w *world) barrier() int64 {
	w.t.Helper()
	resp, err := w.op.Barrier(w.env.Ctx, &pb.BarrierRequest{})
	if err != nil {
		w.t.Fatalf("Barrier: %v", err)
	}
	return resp.Revision
}

// settled waits until each unit's agent is idle, synced to a barrier
// asked now: it has acted on every change so far, so that what it has
// not done by then it will not do for them (the positive sign a test
// asserting that something does not happen waits for).
func (w *world) settled(units ...string) {
	w.t.Helper()
	rev := w.barrier()
	for _, u := range units {
		w.waitFor(u+" idle, synced to the barrier", func() bool {
			s := w.agentStatus(u)
			return s.Agent == "idle" && s.SyncedRevision >= rev
		})
	}
}

// count is how many of lines start with prefix.
func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// A unit agent reports the latest barrier with its status once it has
// seen every change up to it and acted on them: after a configuration
// change and a barrier, the status says the unit is synced to the barrier
// only once config-changed has run for the change.
func TestAgentReportsTheBarrierOnceItActed(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	first := w.barrier()
	w.waitFor("kv/0 synced to the first barrier", func() bool {
		s := w.agentStatus("kv/0")
		return s.Agent == "idle" && s.SyncedRevision >= first
	})

	w.file("kv/0", "sleep-config-changed", "1")
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"colour": "blue"}}); err != nil {
		t.Fatal(err)
	}
	// The unit moves to the new revision holding its permit.
	w.grant("kv", "kv/0")
	second := w.barrier()
	if second <= first {
		t.Fatalf("the second barrier = %d, want past the first, %d", second, first)
	}
	w.waitFor("kv/0 synced to the second barrier", func() bool {
		s := w.agentStatus("kv/0")
		if s.SyncedRevision < second {
			return false
		}
		if n := count(w.hooks("kv/0"), "config-changed"); n != 2 {
			t.Fatalf("kv/0 reports synced to barrier %d (%s) having run config-changed %d times, want 2: the change before the barrier acted on", second, s.Agent, n)
		}
		return s.Agent == "idle"
	})
}

// A hook that fails shows at once: the agent's status is error, saying
// which run of how many comes next and when; the unit is not in its error
// state yet, and resolved runs the hook again at once rather than after
// the pause. The barrier's report comes with the error too.
func TestFailedHookShowsAtOnce(t *testing.T) {
	w := newWorld(t)
	w.retry = unitagent.RetryPolicy{Initial: time.Hour, Attempts: 5}
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "fail-config-changed", "always")
	w.start("kv/0")
	var shown *pb.UnitStatus
	w.waitFor("kv/0 shown in error", func() bool {
		shown = w.agentStatus("kv/0")
		return shown.Agent == "error"
	})
	if want := `hook failed: "config-changed" (retry 2 of 5 in `; !strings.HasPrefix(shown.Message, want) || shown.State != "ready" {
		t.Errorf("kv/0 after its first failure: %s %q (%s), want error %q... in state ready", shown.Agent, shown.Message, shown.State, want)
	}
	rev := w.barrier()
	w.waitFor("kv/0 synced in error", func() bool {
		s := w.agentStatus("kv/0")
		return s.Agent == "error" && s.SyncedRevision >= rev
	})

	w.file("kv/0", "fail-config-changed", "0")
	if _, err := w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitState("kv/0", "running")
	if n := count(w.lines("kv/0", "attempts.log"), "config-changed"); n != 2 {
		t.Errorf("kv/0 ran config-changed %d times, want 2: the failure, and the run resolved asked for", n)
	}
}
