package e2etest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/provisioner/provider"
)

// Sandbox is the home of one test's controllers: their client config, data
// directories and API ports, under a short temporary directory (a unix
// socket path must stay under 107 bytes). Its cleanup stops everything
// that runs there.
type Sandbox struct {
	t   testing.TB
	Bin Binaries
	// Dir is the sandbox's directory, removed at the end.
	Dir string
	// Config is the client config every ctl run reads ($LIFELINE_CONFIG),
	// written by the first controller to start.
	Config string
	// DataDir is the first controller's data directory (and ctl
	// bootstrap's); Port its API port, the next port being free for its
	// metrics.
	DataDir string
	Port    int
	// Network is the loopback network of the sandbox's local machines
	// (LocalNetwork), given to every controller with the local provider.
	Network string
	// KeepOnFailure keeps the directory of a failed test (its logs, the
	// machines' and units' files) for a look; its processes are stopped
	// all the same.
	KeepOnFailure bool

	reaper  *exec.Cmd
	starter *starter // starts the sandbox's children: starter.go

	mu           sync.Mutex
	controllers  []*Controller
	machinesDirs []string
	afterStop    []func()
}

// NewSandbox makes a sandbox for the test; its cleanup stops everything
// started there.
func NewSandbox(t testing.TB, bin Binaries) *Sandbox {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{
		t: t, Bin: bin, Dir: dir, Config: filepath.Join(dir, "client.json"), DataDir: filepath.Join(dir, "data"),
		Port: FreePorts(t), Network: LocalNetwork(t),
	}
	s.startReaper(t)
	// The teardown ends the starter, and runs before the network's
	// release, which Cleanup runs after it.
	s.starter = newStarter()
	t.Cleanup(s.teardown)
	return s
}

// startReaper starts the sandbox's reaper (e2etest/reaper), which kills
// what runs in the sandbox if this test binary dies without its cleanup.
// It runs in a process group of its own, so that the terminal's interrupt
// reaches the test binary but not it.
func (s *Sandbox) startReaper(t testing.TB) {
	if s.Bin.Reaper == "" {
		return
	}
	cmd := exec.Command(s.Bin.Reaper)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LIFELINE_REAP_DIR="+s.Dir, "LIFELINE_REAP_PARENT="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the sandbox's reaper: %v", err)
	}
	s.reaper = cmd
}

// stopReaper ends the reaper of a sandbox whose cleanup runs.
func (s *Sandbox) stopReaper() {
	if s.reaper == nil {
		return
	}
	_ = s.reaper.Process.Kill()
	_ = s.reaper.Wait()
	s.reaper = nil
}

// OnStop registers f to run once the controllers and their machines are
// stopped (last registered, first run): the test's own etcd, its clients.
func (s *Sandbox) OnStop(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterStop = append(s.afterStop, f)
}

// AddMachinesDir has the teardown stop the local machines under dir too,
// besides those under each controller's data directory.
func (s *Sandbox) AddMachinesDir(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machinesDirs = append(s.machinesDirs, dir)
}

// MachinesDir is the first controller's local machines directory.
func (s *Sandbox) MachinesDir() string { return filepath.Join(s.DataDir, "machines") }

// Bootstrap starts the sandbox's controller with ctl bootstrap.
func (s *Sandbox) Bootstrap(t testing.TB) {
	t.Helper()
	s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port), "--local-network", s.Network)
}

// Controller is a lifelined controller the test started itself, in its
// own session, logging to controller.log in its data directory.
type Controller struct {
	s *Sandbox
	// Index counts the sandbox's controllers from 0.
	Index int
	// DataDir is the sandbox's DataDir for the first controller and
	// DataDir1, DataDir2... for the next; Port its API port.
	DataDir string
	Port    int
	// Args are lifelined's arguments, kept for Start.
	Args []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool // by Kill or Stop, until Start
}

// StartController starts the sandbox's next controller: lifelined
// controller with its own data directory and API address (127.0.0.1 and a
// free port), no metrics listener, the sandbox's client config, and extra
// flags. Every controller gets the same --client-config: the first to
// start writes it (with the admin credential), and the others find it
// there and leave it. It waits until the controller answers ctl status
// through its own address alone (ClientConfig).
//
// Several controllers of one model share --etcd-endpoints and --namespace
// in extra; each has its own local machines under its data directory
// unless extra says otherwise (AddMachinesDir has the teardown stop those).
// Every controller after the first joins the model's controllers as an
// operator's would: with a join token from ctl add-controller
// (--join-file), which it needs on its first start only.
func (s *Sandbox) StartController(t testing.TB, extra ...string) *Controller {
	t.Helper()
	s.mu.Lock()
	c := &Controller{s: s, Index: len(s.controllers), DataDir: s.DataDir, Port: s.Port}
	if c.Index > 0 {
		c.DataDir = s.DataDir + strconv.Itoa(c.Index)
		c.Port = FreePorts(t)
	}
	s.controllers = append(s.controllers, c)
	s.mu.Unlock()
	c.Args = []string{"controller",
		"--data-dir", c.DataDir, "--api-addr", c.Addr(),
		"--metrics-addr", "", "--client-config", s.Config}
	if localProvider(extra) {
		c.Args = append(c.Args, "--local-network", s.Network)
	}
	c.Args = append(c.Args, extra...)
	if c.Index > 0 {
		token := filepath.Join(s.Dir, fmt.Sprintf("join-%d.token", c.Index))
		if r := s.Ctl("add-controller", "--token-file", token); r.Code != 0 {
			t.Fatalf("a join token for controller %d: %v", c.Index, r)
		}
		c.Args = append(c.Args, "--join-file", token)
	}
	c.Start(t)
	return c
}

// localProvider says whether lifelined's flags args leave the provider
// local, the default.
func localProvider(args []string) bool {
	local := true
	for i, a := range args {
		switch {
		case a == "--provider" && i+1 < len(args):
			local = args[i+1] == "local"
		case strings.HasPrefix(a, "--provider="):
			local = a == "--provider=local"
		}
	}
	return local
}

// Controllers lists the controllers the test started, in order.
func (s *Sandbox) Controllers() []*Controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Controller(nil), s.controllers...)
}

// Addr is the controller's API address.
func (c *Controller) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)) }

// Log is the path of the controller's log.
func (c *Controller) Log() string { return filepath.Join(c.DataDir, "controller.log") }

// MachinesDir is the controller's local machines directory (by default).
func (c *Controller) MachinesDir() string { return filepath.Join(c.DataDir, "machines") }

// ClientConfig is the path of a client config that names this controller
// alone, with the sandbox's CA and admin credential: for ctl through this
// controller (Sandbox.CtlVia). It is written when the controller starts.
func (c *Controller) ClientConfig() string {
	return filepath.Join(c.s.Dir, fmt.Sprintf("client-%d.json", c.Index))
}

// PID is the controller's process id (of its latest start).
func (c *Controller) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd.Process.Pid
}

// Running says whether the controller's process runs.
func (c *Controller) Running() bool {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Start starts the controller's process with its Args (again, after Kill
// or Stop) and waits until it answers ctl status through its own address.
func (c *Controller) Start(t testing.TB) {
	t.Helper()
	if c.Running() {
		t.Fatalf("controller %d runs already", c.Index)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(c.Log(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(c.s.Bin.Lifelined, c.Args...)
	cmd.Dir = c.DataDir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.s.starter.start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmd, c.done, c.stopped = cmd, done, false
	c.mu.Unlock()
	poll.Within(t, fmt.Sprintf("controller %d to answer", c.Index), time.Minute, func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("controller %d exited at start: %v", c.Index, cmd.ProcessState)
		default:
		}
		if err := c.writeClientConfig(); err != nil {
			return false, err.Error()
		}
		r := c.s.CtlVia(c.ClientConfig(), "status", "--format", "json")
		return r.Code == 0, r.String()
	})
}

// writeClientConfig writes ClientConfig from the sandbox's, once that
// exists.
func (c *Controller) writeClientConfig() error {
	cfg, err := pki.ReadClientConfig(c.s.Config)
	if err != nil {
		return err
	}
	cfg.Controllers = []string{c.Addr()}
	return pki.WriteClientConfig(c.ClientConfig(), cfg)
}

// Stopped says whether the test stopped the controller (Kill, Stop)
// since it last started it: whether it is meant not to run.
func (c *Controller) Stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// Kill kills the controller's process with SIGKILL and waits until it has
// exited.
func (c *Controller) Kill(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.stopped = true
	c.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && c.Running() {
		t.Fatal(err)
	}
	<-done
}

// Stop stops the controller: SIGTERM to its session, SIGKILL after 30
// seconds (which fails the test).
func (c *Controller) Stop(t testing.TB) {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.stopped = true
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("controller %d (pid %d) did not stop within 30s of SIGTERM: killed it", c.Index, pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// teardown stops the controllers (ctl kill-controller when ctl bootstrap
// started one), their local machines and whatever their units started;
// runs the OnStop functions; then, as a backstop, kills any process still
// mentioning the sandbox, which it reports as a failure: nothing may
// outlive the test. Last it ends the starter's thread (starter.go).
func (s *Sandbox) teardown() {
	t := s.t
	if t.Failed() {
		s.dumpLogs()
	}
	if _, err := os.Stat(strings.TrimSuffix(s.Config, ".json") + ".controller.json"); err == nil {
		if r := s.Ctl("kill-controller"); r.Code != 0 {
			t.Errorf("teardown: %v", r)
		}
	}
	s.mu.Lock()
	controllers := s.controllers
	dirs := append([]string(nil), s.machinesDirs...)
	after := s.afterStop
	s.mu.Unlock()
	for _, c := range controllers {
		c.Stop(t)
		dirs = append(dirs, c.MachinesDir())
	}
	dirs = append(dirs, s.MachinesDir())
	for _, d := range dirs {
		(&provider.Local{Dir: d}).StopAll()
	}
	for i := len(after) - 1; i >= 0; i-- {
		after[i]()
	}
	s.stopReaper()
	if left := SandboxProcs(s.Dir); len(left) > 0 {
		t.Errorf("teardown: processes outlived their controller and machines; killing them:\n%s", ProcList(left))
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(SandboxProcs(s.Dir)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.starter.stop()
	if s.KeepOnFailure && t.Failed() {
		t.Logf("teardown: kept %s", s.Dir)
		return
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		t.Logf("teardown: %v", err)
	}
}

// maxDumpedAgentLogs bounds how many machine agents' logs a failed test
// shows.
const maxDumpedAgentLogs = 8

// dumpLogs logs the end of the controllers' and the machine agents' logs,
// for a failed test.
func (s *Sandbox) dumpLogs() {
	logs := []string{filepath.Join(s.DataDir, "controller.log")}
	for _, c := range s.Controllers() {
		if c.Index > 0 {
			logs = append(logs, c.Log())
		}
	}
	agents, _ := filepath.Glob(filepath.Join(s.Dir, "data*", "machines", "*", "agent.log"))
	outs, _ := filepath.Glob(filepath.Join(s.Dir, "data*", "machines", "*", "agent.out"))
	agents = append(agents, outs...) // a crash's trace
	if len(agents) > maxDumpedAgentLogs {
		// The most recently written say the most.
		mod := map[string]time.Time{}
		for _, p := range agents {
			if fi, err := os.Stat(p); err == nil {
				mod[p] = fi.ModTime()
			}
		}
		sort.Slice(agents, func(i, j int) bool { return mod[agents[i]].After(mod[agents[j]]) })
		s.t.Logf("%d machine agent logs; the %d written last:", len(agents), maxDumpedAgentLogs)
		agents = agents[:maxDumpedAgentLogs]
	}
	for _, p := range append(logs, agents...) {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		s.t.Logf("the end of %s:\n%s", p, strings.Join(lines, "\n"))
	}
}
