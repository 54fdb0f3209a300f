package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestResolvedOnce: ctl resolved answers a unit in error once. A second
// answer, before the unit's agent has acted on the first, is refused (here
// the agent is held stopped so that it cannot act in between); the agent
// then acts on the first: the failed hook runs again. It runs beside the
// other parallel tests: most of it is waiting for the hook's attempts.
func TestResolvedOnce(t *testing.T) {
	t.Parallel()
	kv := charmPath(t, "kv")
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", kv)
	s.OK(t, "wait", "--timeout", "2m")
	s.Fails(t, 1, "ctl: unit kv/0 is not in an error state", "resolved", "kv/0")

	// A port kv-server cannot listen on: config-changed fails at every
	// attempt, and the unit ends in error once they run out (its rollout
	// fails, and without auto-revert waits for the operator).
	s.OK(t, "set-rollout", "kv", "--auto-revert=false")
	s.OK(t, "config", "kv", "port=70000")
	waitInError(t, s, "kv/0", "config-changed")

	// The machine agent runs kv/0's agent: stopped, it cannot take the
	// mark away between the two answers.
	agent := e2etest.ReadPID(t, filepath.Join(s.MachinesDir(), "0", "pid"))
	if err := syscall.Kill(agent, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(agent, syscall.SIGCONT) }
	defer cont()
	if out := s.OK(t, "resolved", "kv/0"); out != "unit kv/0: its failed hook will run again\n" {
		t.Errorf("ctl resolved kv/0 said %q, want that its failed hook will run again", out)
	}
	s.Fails(t, 1, "ctl: unit kv/0 is already resolved: its agent has yet to run its failed hook again", "resolved", "kv/0")
	s.Fails(t, 1, "ctl: unit kv/0 is already resolved", "resolved", "kv/0", "--no-retry")
	if out := s.OK(t, "resolved", "--all"); out != "unit kv/0 is already resolved: its agent has yet to run its failed hook again\n" {
		t.Errorf("ctl resolved --all said %q, want kv/0 reported as already resolved", out)
	}

	// Fixed, and let go: the agent acts on the one answer it was given.
	s.OK(t, "config", "kv", "--reset", "port")
	cont()
	s.WaitStatus(t, "kv/0 idle, running, active, serving on port 7070", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit("kv/0")
		return u.Agent == "idle" && u.State == "running" && u.Workload == "active" && strings.HasSuffix(u.Message, ":7070")
	})
	s.Fails(t, 1, "ctl: unit kv/0 is not in an error state", "resolved", "kv/0")
	if out := s.OK(t, "resolved", "--all"); out != "no unit is in an error state\n" {
		t.Errorf("ctl resolved --all said %q, want that no unit is in error", out)
	}
}

// waitInError waits until unit is in an error state on hook, its attempts
// spent (5, with pauses doubling from 5 s: up to 75 s): its agent shows
// error from the first failure, with the retry to come ("hook failed:
// \"HOOK\" (retry 2 of 5 in 10s)"), and the hook alone once none is.
func waitInError(t *testing.T, s *e2etest.Sandbox, unit, hook string) {
	t.Helper()
	s.WaitStatus(t, unit+" in error", 3*time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit(unit)
		return u.Agent == "error" && u.Message == fmt.Sprintf("hook failed: %q", hook)
	})
}
