package procfs

import (
	"os"
	"strconv"
	"strings"
)

// SessionPIDs lists the live processes of session sid: those whose
// /proc/<pid>/stat names sid as their session, zombies left out (a
// process that has exited but is not yet reaped holds nothing).
func SessionPIDs(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command (which may hold spaces and
		// parentheses) in parentheses: state ppid pgrp session ...
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if sess, _ := strconv.Atoi(f[3]); sess == sid {
			out = append(out, pid)
		}
	}
	return out
}
