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

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may name itself.
	line := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 0\n"
	st, err := procfs.ParseStat([]byte(line))
	if err != nil || st.State != 'S' || st.Session != 4242 || st.StartTime != 987654 {
		t.Errorf("ParseStat(%q) = %+v, %v; want S, session 4242, start 987654", line, st, err)
	}
	if _, err := procfs.ParseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Errorf("ParseStat of a short line = nil error")
	}
}
