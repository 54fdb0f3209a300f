package hostexec

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// testConfig is a supervisor's config over a temporary directory, with
// short back-offs and polls so that tests of restarts run quickly.
func testConfig(_ testing.TB, dir string) SupervisorConfig {
	return SupervisorConfig{
		StateFile:      filepath.Join(dir, "daemons.json"),
		UnitDir:        func(unit string) string { return filepath.Join(dir, "units", strings.ReplaceAll(unit, "/", "-")) },
		InitialBackoff: 50 * time.Millisecond,
		MaxBackoff:     time.Second,
		PollInterval:   20 * time.Millisecond,
	}
}

// startSupervisor makes a supervisor and runs it until the test ends (or
// stop is called); the test's end stops the daemons of units.
func startSupervisor(t *testing.T, cfg SupervisorConfig, units ...string) (s *Supervisor, stop func()) {
	t.Helper()
	s, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}
	t.Cleanup(func() {
		stop()
		for _, u := range units {
			if err := s.StopAll(u); err != nil {
				t.Errorf("StopAll(%s): %v", u, err)
			}
		}
	})
	return s, stop
}

func state(t *testing.T, s *Supervisor, unit, name string) DaemonState {
	t.Helper()
	for _, st := range s.States(unit) {
		if st.Name == name {
			return st
		}
	}
	return DaemonState{Name: name}
}

func alive(pid int) bool {
	st, ok, err := procfs.ReadStat(pid)
	return err == nil && ok && st.State != 'Z'
}

func TestSupervisorEnsure(t *testing.T) {
	const unit = "kv/0"
	s, _ := startSupervisor(t, testConfig(t, t.TempDir()), unit)
	spec := Daemon{Name: "srv", Command: []string{"sh", "-c", "echo started $GREETING; exec sleep 1000"}, Env: map[string]string{"GREETING": "hello"}}
	if changed, err := s.Ensure(unit, spec); err != nil || !changed {
		t.Fatalf("Ensure(srv) = %v, %v; want true, nil", changed, err)
	}
	st := state(t, s, unit, "srv")
	if st.State != Running || st.Pid == 0 {
		t.Fatalf("srv = %+v, want running", st)
	}
	pid := st.Pid
	if ps, _, _ := procfs.ReadStat(pid); ps.Session != pid {
		t.Errorf("srv's session = %d, want its own (%d)", ps.Session, pid)
	}
	poll.Until(t, "srv's log", func() bool {
		b, _ := os.ReadFile(st.Log)
		return string(b) == "started hello\n"
	})
	if changed, err := s.Ensure(unit, spec); err != nil || changed {
		t.Fatalf("Ensure(srv) again = %v, %v; want false, nil", changed, err)
	}
	if got := state(t, s, unit, "srv"); got.Pid != pid {
		t.Fatalf("after Ensure of the same spec, srv's pid = %d, want %d", got.Pid, pid)
	}
	spec.Env = map[string]string{"GREETING": "again"}
	if changed, err := s.Ensure(unit, spec); err != nil || !changed {
		t.Fatalf("Ensure(srv) with a new env = %v, %v; want true, nil", changed, err)
	}
	st = state(t, s, unit, "srv")
	if st.State != Running || st.Pid == pid || alive(pid) {
		t.Fatalf("after a changed spec, srv = %+v (old pid %d alive %v); want a new process, the old one gone", st, pid, alive(pid))
	}
	if st.LastExit != "killed by terminated" {
		t.Errorf("the old process's exit = %q, want killed by terminated", st.LastExit)
	}
	if _, err := s.Ensure(unit, Daemon{Name: "Bad Name", Command: []string{"x"}}); err == nil {
		t.Errorf("Ensure of a bad name = nil error")
	}
	if _, err := s.Ensure(unit, Daemon{Name: "missing", Command: []string{"/nonexistent/program"}}); err == nil {
		t.Errorf("Ensure of a missing program = nil error")
	}
	if changed, err := s.Stop(unit, "srv"); err != nil || !changed {
		t.Fatalf("Stop(srv) = %v, %v; want true, nil", changed, err)
	}
	if st := state(t, s, unit, "srv"); st.State != Stopped || alive(st.Pid) {
		t.Errorf("after Stop, srv = %+v", st)
	}
	if changed, err := s.Stop(unit, "srv"); err != nil || changed {
		t.Fatalf("Stop(srv) again = %v, %v; want false, nil", changed, err)
	}
}

// TestSupervisorRestart: a daemon whose process exits is started again,
// after a back-off that doubles.
func TestSupervisorRestart(t *testing.T) {
	const unit = "kv/0"
	cfg := testConfig(t, t.TempDir())
	cfg.InitialBackoff = 100 * time.Millisecond
	s, _ := startSupervisor(t, cfg, unit)
	begin := time.Now()
	if _, err := s.Ensure(unit, Daemon{Name: "flaky", Command: []string{"sh", "-c", "echo run; exit 3"}}); err != nil {
		t.Fatal(err)
	}
	sawBackoff := false
	poll.UntilSays(t, "three restarts", func() (bool, string) {
		st := state(t, s, unit, "flaky")
		sawBackoff = sawBackoff || st.State == Backoff
		return st.Restarts >= 3 && st.LastExit == "exit status 3", fmt.Sprintf("%+v", st)
	})
	elapsed := time.Since(begin)
	st := state(t, s, unit, "flaky")
	// Doubling from 100 ms (±20%), n restarts take at least
	// 0.8 × 100 ms × (2^n − 1).
	if most := int(math.Log2(float64(elapsed)/float64(80*time.Millisecond)+1)) + 1; st.Restarts > most {
		t.Errorf("%d restarts in %s, want at most %d with a doubling back-off", st.Restarts, elapsed, most)
	}
	if !sawBackoff {
		t.Errorf("never saw the daemon in back-off")
	}
	poll.Until(t, "the log of each run", func() bool {
		b, _ := os.ReadFile(st.Log)
		return strings.Count(string(b), "run\n") >= 3
	})
}

// TestSupervisorStopEscalates: a daemon that ignores SIGTERM gets SIGKILL
// after its stop timeout, its whole process group with it.
func TestSupervisorStopEscalates(t *testing.T) {
	const unit = "kv/0"
	s, _ := startSupervisor(t, testConfig(t, t.TempDir()), unit)
	d := Daemon{Name: "stubborn", StopTimeout: 300 * time.Millisecond,
		Command: []string{"sh", "-c", `trap "" TERM; sleep 1000 & echo ready; while :; do sleep 1; done`}}
	if _, err := s.Ensure(unit, d); err != nil {
		t.Fatal(err)
	}
	st := state(t, s, unit, "stubborn")
	poll.Until(t, "the daemon ignoring SIGTERM", func() bool {
		b, _ := os.ReadFile(st.Log)
		return strings.Contains(string(b), "ready")
	})
	if n := len(procfs.SessionPIDs(st.Pid)); n < 2 {
		t.Fatalf("the daemon's session holds %d processes, want its shell and sleep", n)
	}
	begin := time.Now()
	if _, err := s.Stop(unit, "stubborn"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < d.StopTimeout {
		t.Errorf("Stop took %s, less than the stop timeout %s", took, d.StopTimeout)
	}
	if got := state(t, s, unit, "stubborn"); got.State != Stopped || got.LastExit != "killed by killed" {
		t.Errorf("after Stop, %+v; want stopped, killed by killed", got)
	}
	poll.Until(t, "the daemon's process group gone", func() bool { return len(procfs.SessionPIDs(st.Pid)) == 0 })
}

// TestSupervisorAdopt: a new supervisor adopts a daemon still running,
// never starting it twice, and starts one whose process has gone.
func TestSupervisorAdopt(t *testing.T) {
	const unit = "kv/0"
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s1, stop1 := startSupervisor(t, cfg)
	keep := Daemon{Name: "keep", Command: []string{"sleep", "1000"}}
	lost := Daemon{Name: "lost", Command: []string{"sleep", "1000"}}
	for _, d := range []Daemon{keep, lost} {
		if _, err := s1.Ensure(unit, d); err != nil {
			t.Fatal(err)
		}
	}
	keepPid, lostPid := state(t, s1, unit, "keep").Pid, state(t, s1, unit, "lost").Pid
	stop1()
	syscall.Kill(-lostPid, syscall.SIGKILL)
	poll.Until(t, "lost's process to end", func() bool { return !alive(lostPid) })

	s2, _ := startSupervisor(t, cfg, unit)
	if st := state(t, s2, unit, "keep"); st.State != Running || st.Pid != keepPid {
		t.Fatalf("the new supervisor's keep = %+v, want running as pid %d", st, keepPid)
	}
	if changed, err := s2.Ensure(unit, keep); err != nil || changed {
		t.Fatalf("Ensure(keep) on the new supervisor = %v, %v; want false, nil", changed, err)
	}
	poll.UntilSays(t, "lost started again", func() (bool, string) {
		st := state(t, s2, unit, "lost")
		return st.State == Running && st.Pid != lostPid, fmt.Sprintf("%+v", st)
	})
	// The adopted daemon is watched: when it ends it is started again.
	syscall.Kill(-keepPid, syscall.SIGKILL)
	poll.UntilSays(t, "keep started again", func() (bool, string) {
		st := state(t, s2, unit, "keep")
		return st.State == Running && st.Pid != keepPid && st.Restarts == 1, fmt.Sprintf("%+v", st)
	})
}

// TestSupervisorAdoptUnrecorded: a daemon started just before the agent
// died, its pid never recorded, is found by its mark, not started twice.
func TestSupervisorAdoptUnrecorded(t *testing.T) {
	const unit = "kv/0"
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	d := Daemon{Name: "srv", Command: []string{"sleep", "1000"}}
	mark := newMark()
	cmd := exec.Command("sleep", "1000")
	cmd.Env = d.environ(mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	if err := writeRecord(cfg.StateFile, supervisorRecord{Daemons: []daemonRecord{{Unit: unit, Spec: d, Mark: mark}}}); err != nil {
		t.Fatal(err)
	}
	s, _ := startSupervisor(t, cfg, unit)
	if st := state(t, s, unit, "srv"); st.State != Running || st.Pid != pid {
		t.Fatalf("srv = %+v, want adopted as pid %d", st, pid)
	}
}

// TestSupervisorLogBounded: a daemon's log is rotated past its limit.
func TestSupervisorLogBounded(t *testing.T) {
	const unit = "kv/0"
	cfg := testConfig(t, t.TempDir())
	cfg.LogLimit = 4096
	s, _ := startSupervisor(t, cfg, unit)
	if _, err := s.Ensure(unit, Daemon{Name: "chatty", Command: []string{"sh", "-c", "while :; do echo 0123456789012345678901234567890123456789; sleep 0.005; done"}}); err != nil {
		t.Fatal(err)
	}
	log := state(t, s, unit, "chatty").Log
	poll.Until(t, "the log rotated", func() bool {
		st, err := os.Stat(log + ".1")
		return err == nil && st.Size() == cfg.LogLimit
	})
	if st, err := os.Stat(log); err != nil || st.Size() > 16*cfg.LogLimit {
		t.Errorf("the log: %v, %v; want it bounded", st.Size(), err)
	}
}

// TestStopAllOfAUnitWithoutDaemonsWritesNothing: the machine agent stops
// the daemons of every unit it removes; a unit that had none (most) costs
// no write of the record.
func TestStopAllOfAUnitWithoutDaemonsWritesNothing(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	s, _ := startSupervisor(t, cfg)
	// The supervisor writes its record as it starts: set that aside.
	if err := os.Remove(cfg.StateFile); err != nil {
		t.Fatal(err)
	}
	if err := s.StopAll("kv/0"); err != nil {
		t.Fatalf("StopAll(kv/0) = %v", err)
	}
	if _, err := os.Stat(cfg.StateFile); !os.IsNotExist(err) {
		t.Errorf("the record after stopping a unit without daemons: %v, want none written", err)
	}
}
