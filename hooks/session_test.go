package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// spawner is a start hook that leaves processes behind the ways a charm
// may, each writing its pid into a file of the charm directory: a daemon
// under nohup (in the hook's group, the caller's session), one under
// setsid (a session of its own), a child that cleared its environment (in
// the hook's group), one that cleared it in a group of its own in a setsid
// session (bash's job control), and one that ignores SIGTERM.
const spawner = `#!/bin/sh
nohup sleep 1001 </dev/null >/dev/null 2>&1 &
echo $! > nohup.pid
setsid sh -c 'echo $$ > setsid.pid; exec sleep 1002' </dev/null >/dev/null 2>&1 &
env -i sleep 1003 </dev/null >/dev/null 2>&1 &
echo $! > cleared.pid
setsid bash -c 'set -m; env -i sleep 1004 </dev/null >/dev/null 2>&1 & echo $! > cleared-session.pid; exec sleep 1005' </dev/null >/dev/null 2>&1 &
sh -c 'trap "" TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &
`

var spawnedPIDFiles = []string{"nohup.pid", "setsid.pid", "cleared.pid", "cleared-session.pid", "stubborn.pid"}

// runSpawner runs spawner as a hook with env (its session marks) and
// returns the pids it left running, by file name.
func runSpawner(t *testing.T, env map[string]string) map[string]int {
	t.Helper()
	spec := charmWithHook(t, "start", spawner, 0o755)
	spec.Env = env
	if res, err := hooks.Run(context.Background(), spec); err != nil || !res.Succeeded() {
		t.Fatalf("Run() = %+v, %v, want success", res, err)
	}
	pids := map[string]int{}
	for _, f := range spawnedPIDFiles {
		pids[f] = readPid(t, filepath.Join(spec.CharmDir, f))
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// alive says whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// waitAlive waits until each of pids runs the program it was started for
// (a shell's exec may not have happened yet).
func waitAlive(t *testing.T, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if !alive(pid) {
			t.Fatalf("%s: process %d is not running", name, pid)
		}
	}
}

// TestStopSession: the processes a unit's hooks left running, however
// they left, end; a principal's end with its subordinates'; another
// unit's stay, and so does the caller.
func TestStopSession(t *testing.T) {
	dir := tempDir(t)
	mark := func(unit string) string { return filepath.Join(dir, "units", unit) }
	spawned := map[string]map[string]int{
		"kv-0": runSpawner(t, map[string]string{hooks.EnvSession: mark("kv-0")}),
		"kv-1": runSpawner(t, map[string]string{hooks.EnvSession: mark("kv-1")}),
		// Subordinates of kv-0.
		"log-0": runSpawner(t, map[string]string{hooks.EnvSession: mark("log-0"), hooks.EnvPrincipalSession: mark("kv-0")}),
		"log-1": runSpawner(t, map[string]string{hooks.EnvSession: mark("log-1"), hooks.EnvPrincipalSession: mark("kv-0")}),
	}
	for _, pids := range spawned {
		waitAlive(t, pids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	running := map[string]bool{"kv-0": true, "kv-1": true, "log-0": true, "log-1": true}
	for _, step := range []struct {
		stop []string // units
		ends []string // the units whose processes end
	}{
		{stop: []string{"log-0"}, ends: []string{"log-0"}},
		{stop: []string{"kv-0"}, ends: []string{"kv-0", "log-1"}},
		{stop: []string{"kv-1", "kv-0"}, ends: []string{"kv-1"}},
		{stop: []string{"kv-0", "kv-1", "log-0"}},
	} {
		marks := make([]string, len(step.stop))
		for i, u := range step.stop {
			marks[i] = mark(u)
		}
		n, err := hooks.StopSession(ctx, marks, 200*time.Millisecond)
		if err != nil || n < len(step.ends)*len(spawnedPIDFiles) || (len(step.ends) == 0 && n != 0) {
			t.Fatalf("StopSession(%v) = %d, %v, want the %d processes of %v signalled", step.stop, n, err, len(step.ends)*len(spawnedPIDFiles), step.ends)
		}
		for _, u := range step.ends {
			running[u] = false
		}
		for u, pids := range spawned {
			for name, pid := range pids {
				if alive(pid) != running[u] {
					t.Errorf("after StopSession(%v), %s's %s (pid %d) running: %v, want %v", step.stop, u, name, pid, alive(pid), running[u])
				}
			}
		}
	}
}

// TestStopSessionEndsWithCtx: a session whose processes outlast the
// caller's patience is left as it is, with ctx's error.
func TestStopSessionEndsWithCtx(t *testing.T) {
	mark := filepath.Join(tempDir(t), "units", "kv-0")
	pids := runSpawner(t, map[string]string{hooks.EnvSession: mark})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := hooks.StopSession(ctx, []string{mark}, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StopSession() = %v, want context.DeadlineExceeded", err)
	}
	if pid := pids["stubborn.pid"]; !alive(pid) {
		t.Errorf("the process ignoring SIGTERM (%d) is gone before its grace ended", pid)
	}
}

// TestStopSessionSparesOthersGroups: a unit's process in a group and a
// session that no process of the unit made (their leader, alive, is not
// the unit's) ends alone: the group's and session's other processes, of
// another unit or of none, stay.
func TestStopSessionSparesOthersGroups(t *testing.T) {
	dir := tempDir(t)
	a, b := filepath.Join(dir, "units", "kv-0"), filepath.Join(dir, "units", "kv-1")
	script := hooks.EnvSession + "=" + a + " sleep 1011 </dev/null >/dev/null 2>&1 & echo $! > a.pid\n" +
		hooks.EnvSession + "=" + b + " sleep 1012 </dev/null >/dev/null 2>&1 & echo $! > b.pid\n" +
		"echo $$ > leader.pid\nexec sleep 1013\n"
	cmd := exec.Command("setsid", "sh", "-c", script)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, f := range []string{"a.pid", "b.pid", "leader.pid"} {
		pids[f] = readPid(t, filepath.Join(dir, f))
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Wait()
	})
	waitAlive(t, pids)
	// A background child is the shell's fork until it execs sleep, and
	// only sleep's environment holds the mark.
	for _, f := range []string{"a.pid", "b.pid"} {
		poll.UntilSays(t, fmt.Sprintf("%s: process %d to run sleep", f, pids[f]), func() (bool, string) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pids[f]), "cmdline"))
			return strings.HasPrefix(string(cmdline), "sleep\x00"), fmt.Sprintf("%q", cmdline)
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n, err := hooks.StopSession(ctx, []string{a}, 200*time.Millisecond); n != 1 || err != nil {
		t.Errorf("StopSession(%s) = %d, %v, want 1 process signalled", a, n, err)
	}
	if alive(pids["a.pid"]) {
		t.Errorf("after StopSession(%s), its process %d runs", a, pids["a.pid"])
	}
	for _, f := range []string{"b.pid", "leader.pid"} {
		if !alive(pids[f]) {
			t.Errorf("after StopSession(%s), %s's process %d is gone, want it running", a, f, pids[f])
		}
	}
}
