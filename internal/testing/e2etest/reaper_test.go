package e2etest

import (
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReaperEndsSandboxWhenParentDies plays a test binary killed before
// its cleanup: the reaper's parent (a shell standing in for the test
// binary) is killed, and the reaper then kills a process that runs in the
// sandbox in a session of its own, as a machine agent does, and exits.
func TestReaperEndsSandboxWhenParentDies(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := goBuild(root, nil, "-o", bin+string(filepath.Separator), "./internal/testing/e2etest/reaper"); err != nil {
		t.Fatal(err)
	}
	sandbox := t.TempDir()

	victim := exec.Command("sleep", "600")
	victim.Dir = sandbox
	victim.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	victimDone := make(chan error, 1)
	go func() { victimDone <- victim.Wait() }()
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		<-victimDone
	})

	// The shell starts the reaper naming itself as the parent, then
	// becomes a sleep with the same pid.
	parent := exec.Command("sh", "-c", `LIFELINE_REAP_PARENT=$$ "$REAPER" & exec sleep 600`)
	parent.Env = append(os.Environ(), "REAPER="+filepath.Join(bin, "reaper"), "LIFELINE_REAP_DIR="+sandbox)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	reaperPID := 0
	poll.Within(t, "the reaper to start", time.Minute, func() (bool, string) {
		for _, p := range Procs(func(p Proc) bool { return len(p.Args) > 0 && filepath.Base(p.Args[0]) == "reaper" }) {
			if raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "environ")); err == nil && containsEnv(raw, "LIFELINE_REAP_DIR="+sandbox) {
				reaperPID = p.PID
				return true, ""
			}
		}
		return false, "no reaper for the sandbox yet"
	})
	if left := SandboxProcs(sandbox); len(left) != 1 || left[0].PID != victim.Process.Pid {
		t.Fatalf("SandboxProcs(sandbox) = %v, want only the victim %d (the reaper does not mention the sandbox)", left, victim.Process.Pid)
	}

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	select {
	case <-victimDone:
		victimDone <- nil // for the cleanup
	case <-time.After(time.Minute):
		t.Fatalf("the sandbox's process still runs a minute after the reaper's parent died")
	}
	poll.Within(t, "the reaper to exit", time.Minute, func() (bool, string) {
		return !PIDAlive(reaperPID), "the reaper still runs"
	})
}

// containsEnv says whether a /proc/PID/environ holds the variable kv.
func containsEnv(environ []byte, kv string) bool {
	return slices.Contains(strings.Split(string(environ), "\x00"), kv)
}
