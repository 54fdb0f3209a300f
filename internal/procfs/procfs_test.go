//go:build linux

package procfs_test

import (
	"fmt"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// A session's process is listed while it lives, and not once it has
// exited, though not yet reaped.
func TestSessionPIDs(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if got := procfs.SessionPIDs(sid); !slices.Equal(got, []int{sid}) {
		t.Errorf("SessionPIDs(%d) = %v, want its leader alone", sid, got)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	poll.UntilSays(t, "the session empty, its leader a zombie", func() (bool, string) {
		pids := procfs.SessionPIDs(sid)
		return len(pids) == 0, fmt.Sprint(pids)
	})
}
