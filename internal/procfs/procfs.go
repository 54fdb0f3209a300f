package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// PIDs lists the processes /proc names now (none without /proc).
func PIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Stat is what /proc/<pid>/stat says of a process that matters here.
type Stat struct {
	State     byte   // R, S, D, Z (zombie), X (dead), ...
	PGID      int    // field 5
	Session   int    // field 6
	StartTime uint64 // field 22, clock ticks after boot: with the pid, names a process
}

// Gone says whether the process has ended: a zombie not yet reaped, or
// dead.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// ReadStat reads /proc/<pid>/stat; ok is false when there is no such
// process.
func ReadStat(pid int) (st Stat, ok bool, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	st, err = ParseStat(data)
	if err != nil {
		return st, false, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, true, nil
}

// ParseStat parses the content of a /proc/<pid>/stat.
func ParseStat(data []byte) (st Stat, err error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return st, errors.New("no command name")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return st, fmt.Errorf("%d fields, want at least 22", len(f)+2)
	}
	st.State = f[0][0]
	if st.PGID, err = strconv.Atoi(f[2]); err != nil {
		return st, fmt.Errorf("process group: %w", err)
	}
	if st.Session, err = strconv.Atoi(f[3]); err != nil {
		return st, fmt.Errorf("session: %w", err)
	}
	if st.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, fmt.Errorf("start time: %w", err)
	}
	return st, nil
}

// SessionPIDs lists the live processes of session sid: those whose
// /proc/<pid>/stat names sid as their session, zombies left out (a
// process that has exited but is not yet reaped holds nothing).
func SessionPIDs(sid int) []int {
	var out []int
	for _, pid := range PIDs() {
		if st, ok, err := ReadStat(pid); err == nil && ok && !st.Gone() && st.Session == sid {
			out = append(out, pid)
		}
	}
	return out
}
