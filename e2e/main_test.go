package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/provisioner"
)

// What TestMain builds once for the package: the tests run these as an
// operator would, and never write into the repository.
var (
	binDir    string // ctl and lifelined
	charmsDir string // copies of examples/charms/{kv,app,logger} with their servers built in
	charmsErr error  // why the charms could not be built, if they could not
)

// demoCharms are the example charms the tests deploy.
var demoCharms = []string{"kv", "app", "logger"}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ll-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = filepath.Join(dir, "bin")
	if out, err := goBuild(nil, "-o", binDir+string(filepath.Separator), "../cmd/ctl", "../cmd/lifelined"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: build ctl and lifelined: %v\n%s", err, out)
		return 1
	}
	charmsDir = filepath.Join(dir, "charms")
	charmsErr = buildCharms(charmsDir)
	return m.Run()
}

func goBuild(env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// buildCharms copies the demo charms into dir and builds their servers
// into the copies, as make charms does into the originals.
func buildCharms(dir string) error {
	for _, name := range demoCharms {
		if err := copyCharm(filepath.Join("..", "examples", "charms", name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("copy charm %s: %w", name, err)
		}
	}
	static := []string{"CGO_ENABLED=0"}
	for charm, server := range map[string]string{"kv": "kvserver", "app": "appserver"} {
		out := filepath.Join(dir, charm, "bin", charm+"-server")
		if b, err := goBuild(static, "-trimpath", "-ldflags=-s -w", "-o", out, "../examples/"+server); err != nil {
			return fmt.Errorf("build %s: %w\n%s", out, err, b)
		}
	}
	return nil
}

// copyCharm copies a charm directory, symlinks as symlinks, but not its
// bin directory (what make charms may have built there).
func copyCharm(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "bin" && d.IsDir() {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm())
		}
		return fmt.Errorf("%s: not a file, directory or symlink", path)
	})
}

// needCharms fails the test when the demo charms could not be built.
func needCharms(t *testing.T) {
	t.Helper()
	if charmsErr != nil {
		t.Fatalf("the demo charms could not be built: %v", charmsErr)
	}
}

// charmPath is the path of a built demo charm; the test fails when the
// charms could not be built.
func charmPath(t *testing.T, name string) string {
	t.Helper()
	needCharms(t)
	return filepath.Join(charmsDir, name)
}

// sandbox is the home of one test's controller: its client config, data
// directory and API port, under a short temporary directory (etcd's unix
// socket path must stay under 107 bytes). Its cleanup stops everything that
// runs there.
type sandbox struct {
	t       *testing.T
	dir     string
	config  string // $LIFELINE_CONFIG of every ctl run
	dataDir string
	port    int // the API's; the metrics port is the next one

	// direct is a controller the test started itself (not ctl bootstrap).
	direct     *exec.Cmd
	directDone chan struct{}
	// afterStop run, last first, once the controller and machines are
	// stopped: the test's own etcd, its clients.
	afterStop []func()
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	s := &sandbox{
		t: t, dir: dir, config: filepath.Join(dir, "client.json"), dataDir: filepath.Join(dir, "data"),
		port: freePorts(t),
	}
	t.Cleanup(s.teardown)
	return s
}

// teardown stops the controller (ctl kill-controller when ctl bootstrap
// started it), its local machines and whatever their units started; then,
// as a backstop, kills any process still mentioning the sandbox, which it
// reports as a failure: nothing may outlive the test.
func (s *sandbox) teardown() {
	t := s.t
	if t.Failed() {
		s.dumpLogs()
	}
	if _, err := os.Stat(strings.TrimSuffix(s.config, ".json") + ".controller.json"); err == nil {
		if r := s.ctl("kill-controller"); r.code != 0 {
			t.Errorf("teardown: %v", r)
		}
	}
	if s.direct != nil {
		s.stopDirect()
	}
	(&provisioner.Local{Dir: filepath.Join(s.dataDir, "machines")}).StopAll()
	for i := len(s.afterStop) - 1; i >= 0; i-- {
		s.afterStop[i]()
	}
	if left := sandboxProcs(s.dir); len(left) > 0 {
		t.Errorf("teardown: processes outlived their controller and machines; killing them:\n%s", procList(left))
		for _, p := range left {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(sandboxProcs(s.dir)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		t.Logf("teardown: %v", err)
	}
}

// dumpLogs logs the end of the controller's and the machine agents' logs,
// for a failed test.
func (s *sandbox) dumpLogs() {
	logs := []string{filepath.Join(s.dataDir, "controller.log")}
	agents, _ := filepath.Glob(filepath.Join(s.dataDir, "machines", "*", "agent.log"))
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

// onStop registers f to run once the controller and its machines are
// stopped.
func (s *sandbox) onStop(f func()) { s.afterStop = append(s.afterStop, f) }

// bootstrap starts the sandbox's controller with ctl bootstrap.
func (s *sandbox) bootstrap(t *testing.T) {
	t.Helper()
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", strconv.Itoa(s.port))
}

// startController runs lifelined controller directly, with the sandbox's
// data directory, API address and client config plus extra flags, in its
// own session, logging to controller.log in the data directory; it waits
// until the controller answers.
func (s *sandbox) startController(t *testing.T, extra ...string) {
	t.Helper()
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(s.dataDir, "controller.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := append([]string{"controller",
		"--data-dir", s.dataDir, "--api-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		"--metrics-addr", "", "--client-config", s.config}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "lifelined"), args...)
	cmd.Dir = s.dataDir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.direct, s.directDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.directDone) }()
	waitFor(t, "the controller to answer", time.Minute, func() (bool, string) {
		select {
		case <-s.directDone:
			t.Fatalf("the controller exited at start: %v", cmd.ProcessState)
		default:
		}
		r := s.ctl("status", "--format", "json")
		return r.code == 0, r.String()
	})
}

// stopDirect stops the controller the test started: SIGTERM to its
// session, SIGKILL after 30 seconds.
func (s *sandbox) stopDirect() {
	pid := s.direct.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-s.directDone:
	case <-time.After(30 * time.Second):
		s.t.Errorf("teardown: the controller (pid %d) did not stop within 30s of SIGTERM: killed it", pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.directDone
	}
}

// result is how one ctl run ended.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("ctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// ctlCommand is ctl with args, in the sandbox's environment.
func (s *sandbox) ctlCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctl"), args...)
	cmd.Env = append(os.Environ(),
		"LIFELINE_CONFIG="+s.config,
		"XDG_DATA_HOME="+s.dir,
		"XDG_CONFIG_HOME="+s.dir,
	)
	return cmd
}

// ctl runs ctl with args and returns how it ended; code -1 when it could
// not run or ran over 3 minutes.
func (s *sandbox) ctl(args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := s.ctlCommand(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.stderr += fmt.Sprintf("\n(ctl did not finish: %v)", err)
	}
	return r
}

// ok runs ctl, wants exit status 0, and returns its output.
func (s *sandbox) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.ctl(args...)
	if r.code != 0 {
		t.Fatalf("%v\nwant exit status 0", r)
	}
	return r.stdout
}

// fails runs ctl and wants exit status code with stderr holding msg.
func (s *sandbox) fails(t *testing.T, code int, msg string, args ...string) {
	t.Helper()
	r := s.ctl(args...)
	if r.code != code || !strings.Contains(r.stderr, msg) {
		t.Errorf("%v\nwant exit status %d and %q on stderr", r, code, msg)
	}
}

// The shape of ctl status --format json.
type statusDoc struct {
	Machines  map[string]machineDoc `json:"machines"`
	Services  map[string]serviceDoc `json:"services"`
	Relations []relationDoc         `json:"relations"`
}

type machineDoc struct {
	Life     string   `json:"life"`
	Instance string   `json:"instance"`
	Address  string   `json:"address"`
	Agent    string   `json:"agent"`
	Units    []string `json:"units"`
	Message  string   `json:"message"`
}

type serviceDoc struct {
	Charm    string             `json:"charm"`
	Revision int64              `json:"revision"`
	Life     string             `json:"life"`
	Status   string             `json:"status"`
	Units    map[string]unitDoc `json:"units"`
}

type unitDoc struct {
	Life      string `json:"life"`
	Machine   string `json:"machine"`
	Principal string `json:"principal"`
	Agent     string `json:"agent"`
	State     string `json:"state"`
	Workload  string `json:"workload"`
	Message   string `json:"message"`
	Address   string `json:"address"`
}

type relationDoc struct {
	ID    int64  `json:"id"`
	Key   string `json:"key"`
	Life  string `json:"life"`
	Scope string `json:"scope"`
}

// unit finds a unit of any service.
func (d *statusDoc) unit(name string) (unitDoc, bool) {
	svc, _, _ := strings.Cut(name, "/")
	u, ok := d.Services[svc].Units[name]
	return u, ok
}

// units lists every unit's name, sorted.
func (d *statusDoc) units() []string {
	var out []string
	for _, svc := range d.Services {
		for name := range svc.Units {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (d *statusDoc) empty() bool {
	return len(d.Machines) == 0 && len(d.Services) == 0 && len(d.Relations) == 0
}

func (d *statusDoc) String() string {
	data, _ := json.MarshalIndent(d, "", "  ")
	return string(data)
}

// tryStatus runs ctl status --format json and decodes it.
func (s *sandbox) tryStatus() (*statusDoc, error) {
	r := s.ctl("status", "--format", "json")
	if r.code != 0 {
		return nil, errors.New(r.String())
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		return nil, fmt.Errorf("ctl status --format json: %v\n%s", err, r.stdout)
	}
	return &doc, nil
}

// status is tryStatus, failing the test on an error.
func (s *sandbox) status(t *testing.T) *statusDoc {
	t.Helper()
	doc, err := s.tryStatus()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// waitStatus polls the status until cond holds, failing the test after
// timeout with the last status seen.
func (s *sandbox) waitStatus(t *testing.T, what string, timeout time.Duration, cond func(*statusDoc) bool) *statusDoc {
	t.Helper()
	var last *statusDoc
	waitFor(t, what, timeout, func() (bool, string) {
		doc, err := s.tryStatus()
		if err != nil {
			return false, err.Error()
		}
		last = doc
		return cond(doc), doc.String()
	})
	return last
}

// waitFor polls cond until it holds; after timeout it fails the test with
// what cond said last.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last:\n%s", timeout, what, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// httpGet fetches url and returns the status code and body.
func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// freePorts returns a free port whose next port is free too (the
// controller's metrics port).
func freePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		l.Close()
		if err == nil {
			l2.Close()
			return port
		}
	}
	t.Fatal("no two free consecutive ports")
	return 0
}

// proc is a live process.
type proc struct {
	pid  int
	args []string
	cwd  string
}

func (p proc) String() string { return fmt.Sprintf("%d %s", p.pid, strings.Join(p.args, " ")) }

func procList(ps []proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %v\n", p)
	}
	return b.String()
}

// procs lists the live processes (zombies are not) that match.
func procs(match func(proc) bool) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 || !pidAlive(pid) {
			continue
		}
		p := proc{pid: pid, args: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")}
		p.cwd, _ = os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if match(p) {
			out = append(out, p)
		}
	}
	return out
}

// sandboxProcs lists the processes that mention dir in their command line
// or run in it.
func sandboxProcs(dir string) []proc {
	return procs(func(p proc) bool {
		return strings.Contains(strings.Join(p.args, " "), dir+"/") || p.cwd == dir || strings.HasPrefix(p.cwd, dir+"/")
	})
}

// machineAgents maps machine ids to the pids of the machine-agent
// processes running with a data directory under dataDir/machines.
func machineAgents(dataDir string) map[string][]int {
	prefix := filepath.Join(dataDir, "machines") + "/"
	out := map[string][]int{}
	for _, p := range procs(func(p proc) bool { return slices.Contains(p.args, "machine-agent") }) {
		for i, a := range p.args {
			if a == "--data-dir" && i+1 < len(p.args) && strings.HasPrefix(p.args[i+1], prefix) {
				id := strings.TrimPrefix(p.args[i+1], prefix)
				out[id] = append(out[id], p.pid)
			}
		}
	}
	return out
}

// machineProcs lists the processes of machine id: its agent, its hooks and
// its units' servers, which all name the machine's directory.
func machineProcs(dataDir, id string) []proc {
	dir := filepath.Join(dataDir, "machines", id)
	return procs(func(p proc) bool {
		cmdline := strings.Join(p.args, " ") + " "
		return strings.Contains(cmdline, dir+" ") || strings.Contains(cmdline, dir+"/") ||
			p.cwd == dir || strings.HasPrefix(p.cwd, dir+"/")
	})
}

// pidAlive says whether pid is a process that has not exited (a zombie has).
func pidAlive(pid int) bool {
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

// readPID reads a pid file.
func readPID(t *testing.T, path string) int {
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
