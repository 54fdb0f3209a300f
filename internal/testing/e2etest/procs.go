package e2etest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/procfs"
)

// Proc is a live process.
type Proc struct {
	PID  int
	Args []string
	Cwd  string
}

func (p Proc) String() string { return fmt.Sprintf("%d %s", p.PID, strings.Join(p.Args, " ")) }

// ProcList formats processes one a line, for failure messages.
func ProcList(ps []Proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %v\n", p)
	}
	return b.String()
}

// Procs lists the live processes (zombies are not) that match, but not
// this one.
func Procs(match func(Proc) bool) []Proc {
	var out []Proc
	for _, pid := range procfs.PIDs() {
		if pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || len(raw) == 0 || !PIDAlive(pid) {
			continue
		}
		p := Proc{PID: pid, Args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")}
		p.Cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

// SandboxProcs lists the processes that mention dir in their command line
// or run in it.
func SandboxProcs(dir string) []Proc {
	return Procs(func(p Proc) bool {
		return strings.Contains(strings.Join(p.Args, " "), dir+"/") || p.Cwd == dir || strings.HasPrefix(p.Cwd, dir+"/")
	})
}

// MachineAgents maps machine ids to the pids of the machine-agent
// processes running with a data directory under machinesDir (a local
// provider's directory, such as a controller's <data-dir>/machines).
func MachineAgents(machinesDir string) map[string][]int {
	prefix := machinesDir + "/"
	out := map[string][]int{}
	for _, p := range Procs(func(p Proc) bool { return slices.Contains(p.Args, "machine-agent") }) {
		for i, a := range p.Args {
			if a == "--data-dir" && i+1 < len(p.Args) && strings.HasPrefix(p.Args[i+1], prefix) {
				id := strings.TrimPrefix(p.Args[i+1], prefix)
				out[id] = append(out[id], p.PID)
			}
		}
	}
	return out
}

// MachineProcs lists the processes of local machine id under machinesDir:
// its agent, its hooks and its units' servers, which all name the
// machine's directory.
func MachineProcs(machinesDir, id string) []Proc {
	dir := filepath.Join(machinesDir, id)
	return Procs(func(p Proc) bool {
		cmdline := strings.Join(p.Args, " ") + " "
		return strings.Contains(cmdline, dir+" ") || strings.Contains(cmdline, dir+"/") ||
			p.Cwd == dir || strings.HasPrefix(p.Cwd, dir+"/")
	})
}

// PIDAlive says whether pid is a process that has not exited (a zombie has).
func PIDAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// ReadPID reads a pid file.
func ReadPID(t testing.TB, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %s holds %q", path, data)
	}
	return pid
}

// HTTPGet fetches url and returns the status code and body.
func HTTPGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// handedOut holds every port this test process has handed out. A port
// is free when chosen but only bound later, by another process; without
// this, a later choice (an etcd member's) could repeat an earlier one (a
// controller's) that is not bound yet.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// claim records port as handed out; it reports false when it was already.
func claim(ports ...int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	for _, p := range ports {
		if handedOut.ports[p] {
			return false
		}
	}
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	return true
}

// FreePorts returns a free loopback port whose next two ports are free
// too (a controller's metrics port, and its dashboard's by default). None
// of them has been handed out before by this process. The ports are
// below Linux's ephemeral range (32768 up), from which the kernel picks
// the local ports of outgoing connections: chosen there, a port free when
// checked could be taken by any test's client connection before the
// controller binds it.
func FreePorts(t testing.TB) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		free := true
		for _, p := range []int{port, port + 1, port + 2} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free && claim(port, port+1, port+2) {
			return port
		}
	}
	t.Fatal("no three free consecutive ports")
	return 0
}

// LocalNetwork returns a loopback network, 127.N, for the test's local
// machines that no other test on this host holds while this one runs: the
// demo charms bind fixed ports on their machine's address, so two suites
// at once (or a suite and make demo) on one network collide. The test
// holds an flock on a file of the network's in the temporary directory,
// which the kernel releases when the process ends, however it ends. 127.1,
// the default, is left to controllers bootstrapped by hand.
func LocalNetwork(t testing.TB) string {
	t.Helper()
	first := rand.IntN(253)
	for i := range 253 {
		network := fmt.Sprintf("127.%d", 2+(first+i)%253)
		path := filepath.Join(os.TempDir(), "lifeline-test-network-"+network+".lock")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return network
	}
	t.Fatal("no local network free: other tests hold 127.2 to 127.254")
	return ""
}

// FreeLoopbackPorts returns n distinct free loopback ports that this
// process has not handed out before, below the ephemeral range as
// FreePorts' are.
func FreeLoopbackPorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 50*n {
			t.Fatalf("no %d free loopback ports", n)
		}
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		defer l.Close() // held until all are chosen, so that none repeats
		if claim(port) {
			ports = append(ports, port)
		}
	}
	return ports
}
