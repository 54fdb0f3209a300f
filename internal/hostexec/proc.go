package hostexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/procfs"
	"golang.org/x/sys/unix"
)

// processAlive reports whether the process pid started at startTime
// still runs: a zombie has ended, and a pid now naming another process
// (its start time differs) means it ended too.
func processAlive(pid int, startTime uint64) (alive, zombie bool) {
	st, ok, err := procfs.ReadStat(pid)
	if err != nil || !ok || st.StartTime != startTime {
		return false, false
	}
	if st.Gone() {
		return false, true
	}
	return true, false
}

// reap collects the exit of pid if it is this process's child, saying
// how it ended; for a process that is not (a daemon adopted from an
// earlier agent), whose parent collects it, it says only that it ended.
func reap(pid int) string {
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if err != nil || got != pid {
		return "exited"
	}
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return "exited"
}

// childRunning reports whether pid, a child of this process, still
// runs, without collecting it (waitid with WNOWAIT, so that ended still
// finds the zombie and kills what is left of its group): one system call,
// where reading /proc/<pid>/stat takes three and a parse, for every
// daemon at every poll. ok is false when pid is not this process's child
// (or the call failed): the caller then asks /proc.
func childRunning(pid int) (running, ok bool) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return false, false
	}
	return info.Signo == 0, true
}

// ended checks whether the process has ended, and if so, kills what is
// left of its process group (before it is reaped, while a zombie leader
// still holds the group's id) and reaps it: it returns how it ended.
func ended(pid int, startTime uint64) (bool, string) {
	alive, zombie := processAlive(pid, startTime)
	if alive {
		return false, ""
	}
	if zombie {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	return true, reap(pid)
}

// killWait is how long a daemon's process has to be gone after SIGKILL.
const killWait = 10 * time.Second

// terminate stops the process group pid leads: SIGTERM, up to timeout
// for the leader to end, then SIGKILL to the group; it returns how the
// leader ended.
func terminate(pid int, startTime uint64, timeout time.Duration) (string, error) {
	if done, how := ended(pid, startTime); done {
		return how, nil
	}
	syscall.Kill(-pid, syscall.SIGTERM)
	if how, ok := waitEnded(pid, startTime, timeout); ok {
		// What the leader left in its group goes with it.
		return how, nil
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	if how, ok := waitEnded(pid, startTime, killWait); ok {
		return how, nil
	}
	return "", fmt.Errorf("process %d still runs %s after SIGKILL", pid, killWait)
}

// waitEnded polls until the process has ended or d passed.
func waitEnded(pid int, startTime uint64, d time.Duration) (string, bool) {
	deadline := time.Now().Add(d)
	for step := time.Millisecond; ; step = min(2*step, 50*time.Millisecond) {
		if done, how := ended(pid, startTime); done {
			return how, true
		}
		if time.Now().After(deadline) {
			return "", false
		}
		pause.For(context.Background(), step)
	}
}

// MarkEnv names the variable a daemon's mark is in: a value unique to
// each start, by which a daemon started just before the agent died, its
// pid unrecorded, is found again (and by which the local provider finds
// a machine's daemons to end them with the machine).
const MarkEnv = "LIFELINE_DAEMON_MARK"

// findMarked returns the pid and start time of the session leader whose
// environment holds mark, if one runs.
func findMarked(mark string) (int, uint64, bool) {
	want := []byte(MarkEnv + "=" + mark + "\x00")
	for _, pid := range procfs.PIDs() {
		f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil {
			continue
		}
		env, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		f.Close()
		if !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
			continue
		}
		st, ok, err := procfs.ReadStat(pid)
		if err == nil && ok && st.Session == pid && st.State != 'Z' {
			return pid, st.StartTime, true
		}
	}
	return 0, 0, false
}
