package hostexec

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

func TestProcessAlive(t *testing.T) {
	st, ok, err := procfs.ReadStat(os.Getpid())
	if err != nil || !ok {
		t.Fatalf("procfs.ReadStat(self) = %v, %v", ok, err)
	}
	if a, _ := processAlive(os.Getpid(), st.StartTime); !a {
		t.Errorf("processAlive(self) = false")
	}
	// The same pid with another start time is another process.
	if a, _ := processAlive(os.Getpid(), st.StartTime+1); a {
		t.Errorf("processAlive(self, another start time) = true")
	}
}

// TestSupervisorFinishesStop: a daemon recorded stopped whose process
// still runs (the agent died stopping it) is stopped by the next
// supervisor's Run.
func TestSupervisorFinishesStop(t *testing.T) {
	const unit = "kv/0"
	cfg := testConfig(t, t.TempDir())
	d := Daemon{Name: "srv", Command: []string{"sleep", "1000"}, StopTimeout: time.Second}
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, _, _ := procfs.ReadStat(cmd.Process.Pid)
	rec := supervisorRecord{Daemons: []daemonRecord{{Unit: unit, Spec: d, Pid: cmd.Process.Pid, StartTime: st.StartTime, Stopped: true}}}
	if err := writeRecord(cfg.StateFile, rec); err != nil {
		t.Fatal(err)
	}
	s, _ := startSupervisor(t, cfg, unit)
	poll.UntilSays(t, "the stop finished", func() (bool, string) {
		got := state(t, s, unit, "srv")
		return got.State == Stopped && !alive(cmd.Process.Pid), got.State
	})
}

// TestSupervisorConcurrent: units' daemons started and stopped from many
// goroutines at once while Run watches them.
func TestSupervisorConcurrent(t *testing.T) {
	s, _ := startSupervisor(t, testConfig(t, t.TempDir()))
	units := []string{"a/0", "a/1", "b/0", "b/1", "c/0", "c/1"}
	errs := make(chan error, 2*len(units))
	for _, u := range units {
		go func() {
			_, err := s.Ensure(u, Daemon{Name: "srv", Command: []string{"sleep", "1000"}})
			errs <- err
		}()
	}
	for range units {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	pids := map[int]bool{}
	for _, u := range units {
		st := state(t, s, u, "srv")
		if st.State != Running || pids[st.Pid] {
			t.Fatalf("%s's srv = %+v", u, st)
		}
		pids[st.Pid] = true
	}
	for _, u := range units {
		go func() { errs <- s.StopAll(u) }()
	}
	for range units {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d runs after StopAll", pid)
		}
	}
	for _, u := range units {
		if got := s.States(u); len(got) != 0 {
			t.Errorf("States(%s) after StopAll = %+v, want none", u, got)
		}
	}
}

// TestChildRunning: a child is running until it exits, then ended but
// not collected (its zombie left for ended to reap); a process that is
// not this one's child is not answered for.
func TestChildRunning(t *testing.T) {
	cmd := exec.Command("sleep", "0.2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	if running, ok := childRunning(pid); !ok || !running {
		t.Fatalf("childRunning(a sleeping child) = %v, %v; want running", running, ok)
	}
	poll.Until(t, "the child to end", func() bool {
		running, ok := childRunning(pid)
		if !ok {
			t.Fatal("childRunning lost its child")
		}
		return !running
	})
	if _, zombie := processAlive(pid, mustStartTime(t, pid)); !zombie {
		t.Error("childRunning collected the child: no zombie left for ended")
	}
	if how := reap(pid); how != "exit status 0" {
		t.Errorf("reap = %q, want exit status 0", how)
	}
	if _, ok := childRunning(pid); ok {
		t.Error("childRunning answered for a process already collected")
	}
	if _, ok := childRunning(1); ok {
		t.Error("childRunning answered for init, not a child")
	}
}

// mustStartTime reads pid's start time from /proc.
func mustStartTime(t *testing.T, pid int) uint64 {
	t.Helper()
	st, ok, err := procfs.ReadStat(pid)
	if err != nil || !ok {
		t.Fatalf("procfs.ReadStat(%d) = %v, %v", pid, ok, err)
	}
	return st.StartTime
}
