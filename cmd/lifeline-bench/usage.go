package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// usage is what this process (the fleet of agents) and the processes it
// ran and waited for (the hooks; the controller only once stopped) have
// used so far.
type usage struct {
	cpu      time.Duration // this process's user and system CPU
	children time.Duration // its waited-for children's
	written  int64         // bytes this process sent to storage (/proc/self/io write_bytes)
}

func currentUsage() usage {
	var u usage
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		u.cpu = time.Duration(self.Utime.Nano() + self.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) == nil {
		u.children = time.Duration(children.Utime.Nano() + children.Stime.Nano())
	}
	if data, err := os.ReadFile("/proc/self/io"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "write_bytes:"); ok {
				u.written, _ = strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			}
		}
	}
	return u
}

// since returns what was used between then and u.
func (u usage) since(then usage) usage {
	return usage{cpu: u.cpu - then.cpu, children: u.children - then.children, written: u.written - then.written}
}
