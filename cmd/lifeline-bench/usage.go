package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// usage is what a process (a process of the fleet of agents) and the
// processes it ran and waited for (the hooks) have used so far.
type usage struct {
	cpu      time.Duration // the process's user and system CPU
	children time.Duration // its waited-for children's
	written  int64         // bytes the process sent to storage (/proc/<pid>/io write_bytes)
	syscalls int64         // its read and write system calls, sockets' and files' (procIO)
}

// currentUsage is what this process and its waited-for children have
// used so far.
func currentUsage() usage {
	var u usage
	var self, children syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) == nil {
		u.cpu = time.Duration(self.Utime.Nano() + self.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children) == nil {
		u.children = time.Duration(children.Utime.Nano() + children.Stime.Nano())
	}
	u.written, u.syscalls = procIO(os.Getpid())
	return u
}

// procIO returns, from one read of /proc/<pid>/io, the bytes a process
// has sent to storage so far (write_bytes) and the read and write system
// calls it has made (syscr and syscw: read, write and their kin, on
// sockets and files alike; over a run most are its gRPC connections' and
// etcd's), 0 if unknown.
func procIO(pid int) (written, syscalls int64) {
	n := procFields(pid, "io", "write_bytes", "syscr", "syscw")
	return n[0], n[1] + n[2]
}

// ioSyscalls is procIO's system calls alone.
func ioSyscalls(pid int) int64 {
	_, n := procIO(pid)
	return n
}

// procField returns the number on the line "name: N" (or "name: N kB",
// in bytes) of /proc/<pid>/<file>, 0 if unknown.
func procField(pid int, file, name string) int64 { return procFields(pid, file, name)[0] }

// procFields is procField for several names, from one read of the file.
func procFields(pid int, file string, names ...string) []int64 {
	out := make([]int64, len(names))
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		for i, name := range names {
			rest, ok := strings.CutPrefix(line, name+":")
			if !ok {
				continue
			}
			v, kb := strings.CutSuffix(strings.TrimSpace(rest), " kB")
			n, _ := strconv.ParseInt(v, 10, 64)
			if kb {
				n <<= 10
			}
			out[i] = n
		}
	}
	return out
}

// plus adds another's use.
func (u usage) plus(o usage) usage {
	return usage{cpu: u.cpu + o.cpu, children: u.children + o.children, written: u.written + o.written, syscalls: u.syscalls + o.syscalls}
}

// procCPU returns what another process used so far: its CPU, and that of
// its children it has waited for (its hooks). A process gone is an error:
// once waited for, all it used is its parent's children's.
func procCPU(pid int) (usage, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	// The fields after the command's closing parenthesis, from the third:
	// utime, stime, cutime and cstime are the 14th to 17th.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return usage{}, fmt.Errorf("/proc/%d/stat has %d fields after the command, want 15 or more", pid, len(f))
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i-3], 10, 64)
		return time.Duration(n) * time.Second / clockTicks
	}
	return usage{cpu: tick(14) + tick(15), children: tick(16) + tick(17)}, nil
}

// clockTicks is the kernel's USER_HZ, what /proc/<pid>/stat counts CPU in:
// 100 on every Linux this runs on.
const clockTicks = 100

// since returns what was used between then and u.
func (u usage) since(then usage) usage {
	return usage{cpu: u.cpu - then.cpu, children: u.children - then.children, written: u.written - then.written, syscalls: u.syscalls - then.syscalls}
}

// machineBusy returns the time the machine's CPUs have spent busy and in
// all since boot (the "cpu" line of /proc/stat: busy is everything but
// idle and iowait), in USER_HZ ticks; zeros if unknown.
func machineBusy() (busy, total int64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// phaseMeter measures what a phase of the run used beyond the fleet: the
// controller's CPU and system calls, the harness's own CPU and how busy
// the machine's CPUs were.
type phaseMeter struct {
	pid         int
	ctl, self   time.Duration
	ctlSyscalls int64
	busy, total int64
}

func startPhase(controllerPID int) phaseMeter {
	m := phaseMeter{pid: controllerPID, self: currentUsage().cpu, ctlSyscalls: ioSyscalls(controllerPID)}
	if u, err := procCPU(controllerPID); err == nil {
		m.ctl = u.cpu
	}
	m.busy, m.total = machineBusy()
	return m
}

// phaseUse is what a phase used beyond the fleet.
type phaseUse struct {
	// controller and harness are CPU seconds: the controller's process
	// and the harness's own (with -fleet-procs 0, the fleet's too).
	controller, harness float64
	// controllerSyscalls are the controller's read and write system calls.
	controllerSyscalls int64
	// busy is the fraction of the machine's CPU time that was busy.
	busy float64
}

// end returns what was used since the start of the phase.
func (m phaseMeter) end() phaseUse {
	var p phaseUse
	if u, err := procCPU(m.pid); err == nil {
		p.controller = (u.cpu - m.ctl).Seconds()
	}
	p.controllerSyscalls = ioSyscalls(m.pid) - m.ctlSyscalls
	p.harness = (currentUsage().cpu - m.self).Seconds()
	b, t := machineBusy()
	if t > m.total {
		p.busy = float64(b-m.busy) / float64(t-m.total)
	}
	return p
}

// reniceSelf sets every thread of this process to nice n. Linux keeps a
// nice value per thread, and a thread or process started takes that of
// the thread starting it, so a thread started by one not yet set is set
// on a later pass.
func reniceSelf(n int) error {
	for pass := 0; pass < 5; pass++ {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("renice the fleet: %w", err)
		}
		done := true
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// getpriority(2) answers 20 minus the nice value.
			if p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid); err == nil && 20-p == n {
				continue
			}
			done = false
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && err != syscall.ESRCH {
				return fmt.Errorf("renice the fleet: thread %d: %w", tid, err)
			}
		}
		if done {
			return nil
		}
	}
	return nil
}
