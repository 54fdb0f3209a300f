package unitagent

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/hooks"
)

// startGroup starts sleep in a process group of its own with env; the
// returned channel closes when it has ended.
func startGroup(t *testing.T, env ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, done
}

// ended says whether done closes within d.
func ended(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestEndLeftHook: the agent's next run ends the process group noted for
// the hook it ran, when the group's leader is the unit's hook, and only
// then; the note goes either way.
func TestEndLeftHook(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir}, logger: hclog.NewNullLogger()}

	other, otherDone := startGroup(t, "PATH=/usr/bin:/bin", hooks.EnvSession+"=/another/unit")
	a.recordHookGroup(other.Process.Pid)
	if pgid := a.endLeftHook(); pgid != 0 {
		t.Errorf("endLeftHook ended group %d, another unit's", pgid)
	}
	if _, err := os.Stat(dir + "/" + hookGroupFile); !os.IsNotExist(err) {
		t.Errorf("the note stays after endLeftHook: %v", err)
	}

	hook, hookDone := startGroup(t, "PATH=/usr/bin:/bin", hooks.EnvSession+"="+dir)
	a.recordHookGroup(hook.Process.Pid)
	if pgid := a.endLeftHook(); pgid != hook.Process.Pid {
		t.Errorf("endLeftHook = %d, want the hook's group %d", pgid, hook.Process.Pid)
	}
	if !ended(hookDone, 5*time.Second) {
		t.Error("the hook left running still runs")
	}
	if a.endLeftHook() != 0 {
		t.Error("endLeftHook ended a group with no note")
	}
	if ended(otherDone, 100*time.Millisecond) {
		t.Error("another unit's process ended")
	}
}
