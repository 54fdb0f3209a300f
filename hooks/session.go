package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifelinehq/lifeline/internal/procfs"
)

const (
	// sessionPoll is how often StopSession looks again for the session's
	// processes while it ends them.
	sessionPoll = 20 * time.Millisecond
	// sessionKillWait bounds how long StopSession waits for the processes
	// it sent SIGKILL to be gone.
	sessionKillWait = 5 * time.Second
)

// StopSession ends every process of the unit sessions marks on this host
// and returns how many it signalled. A process is a session's when its
// environment holds EnvSession, or EnvPrincipalSession, with that mark (a
// hook, and whatever it started that kept its environment: a daemon under
// nohup or setsid; a principal's session holds its subordinates'), or
// when it is in a process group or a POSIX session one of those made (a
// child that cleared its environment): a group one of them is in, whose
// leader is one of them or gone (a hook's group, the hook ended: Run
// gives each hook a group of its own), and a session whose leader is one
// of them (it called setsid). Never the caller's own group or session.
//
// Each gets SIGTERM; those left after grace (DefaultKillGrace when zero)
// get SIGKILL. Processes the session starts meanwhile are found and
// signalled too. StopSession returns once none is left; it fails when
// some are still there sessionKillWait after SIGKILL, or when ctx ends
// first. A process of another user, whose environment cannot be read,
// is not seen.
func StopSession(ctx context.Context, marks []string, grace time.Duration) (int, error) {
	if len(marks) == 0 {
		return 0, nil
	}
	grace = orDefault(grace, DefaultKillGrace)
	sc := newSessionScan(marks)
	signalled := map[int]bool{}
	var killAt, giveUp time.Time
	for {
		pids := sc.members()
		if len(pids) == 0 {
			return len(signalled), nil
		}
		now := time.Now()
		switch {
		case killAt.IsZero():
			killAt = now.Add(grace)
		case giveUp.IsZero() && now.After(killAt):
			giveUp = now.Add(sessionKillWait)
		case !giveUp.IsZero() && now.After(giveUp):
			return len(signalled), fmt.Errorf("stop unit session: %d processes are left after SIGKILL: %v", len(pids), pids)
		}
		for _, pid := range pids {
			sig := syscall.SIGTERM
			if !giveUp.IsZero() {
				sig = syscall.SIGKILL
			} else if signalled[pid] {
				continue
			}
			if syscall.Kill(pid, sig) == nil {
				signalled[pid] = true
			}
		}
		t := time.NewTimer(sessionPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return len(signalled), fmt.Errorf("stop unit session: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// sessionScan finds the processes of unit sessions in /proc.
type sessionScan struct {
	needles [][]byte // "LIFELINE_UNIT_SESSION=<mark>", and the principal's, for each mark
	self    int
	pgid    int // the caller's process group and POSIX session, never
	sid     int // stopped
	buf     []byte
}

func newSessionScan(marks []string) *sessionScan {
	sc := &sessionScan{self: os.Getpid(), pgid: syscall.Getpgrp(), buf: make([]byte, 0, 16<<10)}
	sc.sid, _ = unix.Getsid(0)
	for _, m := range marks {
		sc.needles = append(sc.needles, []byte(EnvSession+"="+m), []byte(EnvPrincipalSession+"="+m))
	}
	return sc
}

// procInfo is what a scan reads of one process.
type procInfo struct {
	pid, pgid, sid int
	marked         bool
}

// members lists the live processes of the sessions, sorted.
func (sc *sessionScan) members() []int {
	procs := map[int]procInfo{}
	for _, pid := range procfs.PIDs() {
		if pid == sc.self {
			continue
		}
		if p, ok := sc.read(pid); ok {
			procs[pid] = p
		}
	}
	groups, sessions := map[int]bool{}, map[int]bool{}
	for _, p := range procs {
		if !p.marked {
			continue
		}
		if leader, ok := procs[p.pgid]; !ok || leader.marked {
			groups[p.pgid] = true
		}
		if leader, ok := procs[p.sid]; ok && leader.marked {
			sessions[p.sid] = true
		}
	}
	delete(groups, sc.pgid)
	delete(sessions, sc.sid)
	var out []int
	for _, p := range procs {
		if p.marked || groups[p.pgid] || sessions[p.sid] {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// read reads process pid's group, session and whether it is marked; ok is
// false for a process gone, or a zombie (it has exited: its parent reaps
// it).
func (sc *sessionScan) read(pid int) (procInfo, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := sc.readFile(dir + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	st, err := procfs.ParseStat(stat)
	if err != nil || st.Gone() {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, pgid: st.PGID, sid: st.Session}
	env, err := sc.readFile(dir + "/environ")
	if err != nil {
		return p, true // another user's, say
	}
	for len(env) > 0 {
		v, rest, _ := bytes.Cut(env, []byte{0})
		for _, n := range sc.needles {
			if bytes.Equal(v, n) {
				p.marked = true
			}
		}
		env = rest
	}
	return p, true
}

// readFile reads a /proc file into the scan's buffer, valid until the
// next read.
func (sc *sessionScan) readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc.buf = sc.buf[:0]
	for {
		if len(sc.buf) == cap(sc.buf) {
			sc.buf = slices.Grow(sc.buf, cap(sc.buf))
		}
		n, err := f.Read(sc.buf[len(sc.buf):cap(sc.buf)])
		sc.buf = sc.buf[:len(sc.buf)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return sc.buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
