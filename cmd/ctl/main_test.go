package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// binDir holds the ctl and lifelined binaries TestMain builds; the tests
// run them as an operator would.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ll-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", e2etest.StampFlag(), "-o", dir+string(filepath.Separator),
		"github.com/lifelinehq/lifeline/cmd/ctl", "github.com/lifelinehq/lifeline/cmd/lifelined")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build ctl and lifelined: %v\n%s", err, out)
		return 1
	}
	binDir = dir
	return m.Run()
}

// sandbox is a home for one controller: its client config and data
// directory, under a short temporary directory (etcd's unix socket path
// must stay under 107 bytes).
type sandbox struct {
	dir     string
	config  string
	dataDir string
	port    int
	// store has ctl use its client store under dir (no $LIFELINE_CONFIG).
	store bool
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-")
	if err != nil {
		t.Fatal(err)
	}
	s := &sandbox{dir: dir, config: filepath.Join(dir, "client.json"), dataDir: filepath.Join(dir, "data")}
	t.Cleanup(func() {
		// Whatever a failed test left running goes.
		if pid, ok := runningController(s.dataDir); ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		os.RemoveAll(dir)
	})
	return s
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

func (s *sandbox) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "ctl"), args...)
	cmd.Env = append(os.Environ(),
		"LIFELINE_CONFIG="+s.config,
		"XDG_DATA_HOME="+s.dir,
		"XDG_CONFIG_HOME="+s.dir,
	)
	if s.store {
		cmd.Env = append(os.Environ(), "LIFELINE_CONFIG=", "XDG_DATA_HOME="+s.dir, "XDG_CONFIG_HOME="+s.dir)
	}
	return cmd
}

// ctl runs ctl with args and returns how it ended.
func (s *sandbox) ctl(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := s.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("ctl %s: %v", strings.Join(args, " "), err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// ok runs ctl, wants exit status 0, and returns its output.
func (s *sandbox) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.ctl(t, args...)
	if r.code != 0 {
		t.Fatalf("%v\nwant exit status 0", r)
	}
	return r.stdout
}

// fails runs ctl and wants exit status code with stderr holding every
// one of msgs.
func (s *sandbox) fails(t *testing.T, code int, msgs []string, args ...string) result {
	t.Helper()
	r := s.ctl(t, args...)
	if r.code != code {
		t.Errorf("%v\nwant exit status %d", r, code)
		return r
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("%v\nwant stderr to say %q", r, m)
		}
	}
	return r
}

// freePorts returns a port that is free, and the next one too (the
// controller's metrics port).
func freePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1))
		l.Close()
		if err == nil {
			l2.Close()
			return port
		}
	}
	t.Fatal("no two free consecutive ports")
	return 0
}

func TestUsageErrorsExit2(t *testing.T) {
	s := newSandbox(t) // no controller: usage is checked first
	tests := [][]string{
		{"no-such-command"},
		{"status", "--format", "xml"},
		{"status", "Not/a-selector"},
		{"status", "--no-such-flag"},
		{"deploy"},
		{"deploy", "a", "b", "c"},
		{"deploy", "testdata/kv", "-n", "-1"},
		{"deploy", "testdata/kv", "--service-config", "no-equals-sign"},
		{"deploy", "testdata/kv", "--config", "port=9000"},
		{"add-unit"},
		{"add-unit", "kv", "-n", "0"},
		{"add-machine", "-n", "x"},
		{"add-machine", "extra"},
		{"add-relation", "app"},
		{"destroy-relation", "app", "kv", "logger"},
		{"destroy-unit"},
		{"destroy-unit", "kv/0", "--no-wait"},
		{"destroy-unit", "kv/0", "--max-wait", "1s"},
		{"destroy-machine", "0", "--force", "--max-wait", "1s", "--no-wait"},
		{"destroy-machine", "0", "--max-wait", "soon"},
		{"destroy-service"},
		{"resolved"},
		{"resolved", "kv/0", "--all"},
		{"resolved", "--no-retry"},
		{"config"},
		{"config", "kv", "port", "debug=true"},
		{"config", "kv", "port", "debug"},
		{"config", "kv", "port", "--reset", "debug"},
		{"config", "kv", "1Port=1"},
		{"wait", "--timeout", "-1s"},
		{"apply"},
		{"apply", "demo.yaml", "--parallelism", "0"},
		{"apply", "demo.yaml", "--var", "no-equals-sign"},
		{"export", "extra"},
		{"bootstrap", "--provider", "lxd"},
		{"bootstrap", "--api-port", "0"},
		{"bootstrap", "--local-network", "127.256"},
		{"bootstrap", "--provider", "manual", "--local-network", "127.2"},
		{"kill-controller", "a", "b"},
		{"kill-controller", "Not_a_name"},
		{"switch"},
		{"switch", "Not_a_name"},
		{"controllers", "--format", "xml"},
		{"bootstrap", "--name", "Not_a_name"},
		{"add-controller"},
		{"add-controller", "extra", "--token-file", "t"},
		{"add-controller", "--token-file", "t", "--expires", "25h"},
		{"set-rollout"},
		{"set-rollout", "kv", "--canary", "-1"},
		{"set-rollout", "kv", "--deadline", "-1m"},
		{"set-rollout", "kv", "--deadline", "soon"},
		{"rollout", "status"},
		{"rollout", "undo", "kv"},
		{"rollout", "pause", "kv", "--watch"},
		{"rollout", "status", "kv", "--format", "xml"},
		{"rollout", "status", "Bad Name"},
		{"debug-log", "--format", "yaml"},
	}
	for _, args := range tests {
		r := s.ctl(t, args...)
		if r.code != 2 {
			t.Errorf("%v\nwant exit status 2", r)
			continue
		}
		if !strings.Contains(r.stderr, "usage: ctl") || strings.Count(r.stderr, "\n") > 3 {
			t.Errorf("%v\nwant the problem and a usage line", r)
		}
	}
}

func TestHelp(t *testing.T) {
	s := newSandbox(t)
	out := s.ok(t, "deploy", "--help")
	for _, want := range []string{"ctl deploy CHARM_DIR [SERVICE]", "Example:", "--service-config", "-n, --num-units"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl deploy --help says:\n%s\nwant %q in it", out, want)
		}
	}
}

func TestMissingClientConfig(t *testing.T) {
	s := newSandbox(t)
	for _, args := range [][]string{{"status"}, {"deploy", "testdata/kv"}, {"wait"}} {
		s.fails(t, 1, []string{"no client config at " + s.config, "ctl bootstrap"}, args...)
	}
	s.fails(t, 1, []string{"no controller started by `ctl bootstrap`"}, "kill-controller")
}

func TestUnreachableController(t *testing.T) {
	s := newSandbox(t)
	port := freePorts(t)
	writeConfig(t, s.config, fmt.Sprintf("127.0.0.1:%d", port))
	r := s.fails(t, 1, []string{fmt.Sprintf("ctl: cannot reach the controller at 127.0.0.1:%d: ", port), "connection refused"}, "status")
	if n := strings.Count(r.stderr, "\n"); n != 1 {
		t.Errorf("%v\nwant one line", r)
	}
	s.fails(t, 1, []string{"cannot reach the controller"}, "destroy-unit", "kv/0", "kv/1")
}

func TestBootstrapSurfacesAControllerThatDiesAtStart(t *testing.T) {
	s := newSandbox(t)
	port := freePorts(t)
	// Something else holds the API port: the controller cannot listen.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := s.fails(t, 1, []string{"the controller exited", "controller.log", "address already in use"},
		"bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(port), "--provider", "manual")
	if strings.Contains(r.stdout, "controller started") {
		t.Errorf("%v\nwant no claim that it started", r)
	}
	if _, err := os.Stat(s.config); err == nil {
		t.Errorf("a client config was written for a controller that did not start")
	}
}

func TestBootstrapOverAStaleClientConfig(t *testing.T) {
	s := newSandbox(t)
	writeConfig(t, s.config, "127.0.0.1:1") // nobody answers there
	port := freePorts(t)
	r := s.ctl(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(port))
	if r.code != 0 || !strings.Contains(r.stderr, "moved that client config to "+s.config+".old") {
		t.Fatalf("%v\nwant it started, the stale client config moved aside", r)
	}
	if _, err := os.Stat(s.config + ".old"); err != nil {
		t.Errorf("stale client config: %v", err)
	}
	s.ok(t, "status")
	pid := s.pid(t)
	s.ok(t, "kill-controller")
	if processAlive(pid) {
		t.Errorf("controller %d still runs after kill-controller", pid)
	}
}

// TestJujuAliases: Juju 3's names of the verbs run the same commands, and
// --help lists them.
func TestJujuAliases(t *testing.T) {
	s := newSandbox(t)
	for alias, verb := range map[string]string{
		"integrate": "add-relation", "relate": "add-relation", "remove-relation": "destroy-relation",
		"remove-unit": "destroy-unit", "remove-machine": "destroy-machine", "remove-application": "destroy-service",
		"resolve": "resolved",
	} {
		out := s.ok(t, alias, "--help")
		if !strings.Contains(out, "ctl "+verb+" ") || !strings.Contains(out, "Aliases:") || !strings.Contains(out, alias) {
			t.Errorf("ctl %s --help says:\n%s\nwant %s's usage and its aliases", alias, out, verb)
		}
	}
}

// TestDeployStrict: deploy --strict refuses a charm declaring what
// Lifeline does not use, before reaching a controller, naming each thing.
func TestDeployStrict(t *testing.T) {
	s := newSandbox(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte("name: kv\nmaintainer: me\nprovides:\n  server: {interface: kv, optional: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.fails(t, 1, []string{"--strict: charm " + dir + " declares what Lifeline does not use: metadata.yaml: maintainer: descriptive, ignored; metadata.yaml: provides.server.optional: not supported, ignored"},
		"deploy", "--strict", dir)
}
