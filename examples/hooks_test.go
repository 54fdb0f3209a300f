package examples

import (
	"bytes"
	"context"
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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the charms' hooks for real, with the servers built, but
// with fake hook tools (testdata/fake-tool) in place of a unit agent: the
// end-to-end tests run them under real agents.

var (
	buildOnce sync.Once
	binDir    string // the built servers, kv-server and app-server
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// servers builds kv-server and app-server once per test binary and
// returns their directory.
func servers(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the servers and runs their hooks")
	}
	buildOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "lifeline-examples-"); buildErr != nil {
			return
		}
		for bin, pkg := range map[string]string{"kv-server": "./kvserver", "app-server": "./appserver"} {
			out, err := exec.Command(gobin, "build", "-o", filepath.Join(binDir, bin), pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// unit is a unit of an example charm: a directory laid out as the unit
// agent lays it out (the charm in charm/), and the fake tools' files.
type unit struct {
	t     *testing.T
	name  string // "kv/0"
	dir   string
	fake  string // FAKE_DIR
	tools string
}

func newUnit(t *testing.T, charmName, name string) *unit {
	t.Helper()
	bins := servers(t)
	root := t.TempDir()
	u := &unit{t: t, name: name, dir: filepath.Join(root, "unit"), fake: filepath.Join(root, "fake"), tools: filepath.Join(root, "tools")}
	charmDir := filepath.Join(u.dir, "charm")
	if err := copyTree(filepath.Join("charms", charmName), charmDir); err != nil {
		t.Fatal(err)
	}
	if bin := charmName + "-server"; charmName == "kv" || charmName == "app" {
		if err := copyFile(filepath.Join(bins, bin), filepath.Join(charmDir, "bin", bin), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeTool, err := filepath.Abs("testdata/fake-tool")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{u.fake, u.tools} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"relation-get", "relation-set", "relation-list", "relation-ids",
		"config-get", "unit-get", "status-set", "status-get", "log",
		"open-port", "close-port", "opened-ports",
		"action-get", "action-set", "action-log", "action-fail", "checkpoint-get", "checkpoint-set"} {
		if err := os.Symlink(fakeTool, filepath.Join(u.tools, tool)); err != nil {
			t.Fatal(err)
		}
	}
	u.set("address", "127.0.0.1")
	return u
}

// set writes a fake tool's answer (see testdata/fake-tool); "" removes it.
func (u *unit) set(name, content string) {
	u.t.Helper()
	p := filepath.Join(u.fake, name)
	if content == "" {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			u.t.Fatal(err)
		}
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		u.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		u.t.Fatal(err)
	}
}

// run runs a hook as the unit agent would (hooks.Run): in the charm
// directory, stdin /dev/null, the LIFELINE_* environment plus env
// ("KEY=VALUE"), the tools first on PATH. It fails the test if the hook
// left processes holding its output open.
func (u *unit) run(hook string, env ...string) (string, error) {
	u.t.Helper()
	charmDir := filepath.Join(u.dir, "charm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(charmDir, "hooks", hook))
	cmd.Dir = charmDir
	cmd.Env = append([]string{
		"PATH=" + u.tools + string(filepath.ListSeparator) + os.Getenv("PATH"),
		"HOME=" + charmDir,
		"LANG=C.UTF-8",
		"LIFELINE_UNIT_NAME=" + u.name,
		"LIFELINE_SERVICE=" + strings.Split(u.name, "/")[0],
		"LIFELINE_MACHINE_ID=0",
		"LIFELINE_HOOK_NAME=" + hook,
		"LIFELINE_CHARM_DIR=" + charmDir,
		"FAKE_DIR=" + u.fake,
	}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		u.t.Errorf("hook %s of %s left processes holding its output open", hook, u.name)
		err = nil
	}
	return out.String(), err
}

func (u *unit) mustRun(hook string, env ...string) {
	u.t.Helper()
	if out, err := u.run(hook, env...); err != nil {
		u.t.Fatalf("hook %s of %s: %v\n%s", hook, u.name, err, out)
	}
}

// relationEnv is the environment of a relation hook.
func relationEnv(id, remote string) []string {
	endpoint, _, _ := strings.Cut(id, ":")
	env := []string{"LIFELINE_RELATION=" + endpoint, "LIFELINE_RELATION_ID=" + id}
	if remote != "" {
		env = append(env, "LIFELINE_REMOTE_UNIT="+remote)
	}
	return env
}

// lines returns the lines of a file in the fake dir.
func (u *unit) lines(name string) []string {
	u.t.Helper()
	b, err := os.ReadFile(filepath.Join(u.fake, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		u.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// status returns the last status-set, "active serving on ...".
func (u *unit) status() string {
	u.t.Helper()
	l := u.lines("status.log")
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

func (u *unit) wantStatus(want string) {
	u.t.Helper()
	if got := u.status(); got != want {
		u.t.Errorf("%s's status = %q, want %q", u.name, got, want)
	}
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	s := string(b)
	rest := s[strings.LastIndexByte(s, ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

// freePort returns a port nothing listens on at 127.0.0.1, for now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

var client = &http.Client{Timeout: 5 * time.Second}

// call makes a request and returns the status code and body; code 0 when
// the request failed (nothing listening).
func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func wantCall(t *testing.T, method, url, body string, wantCode int, wantBody string) {
	t.Helper()
	code, got := call(t, method, url, body)
	if code != wantCode || (wantBody != "" && got != wantBody) {
		t.Errorf("%s %s = %d %q, want %d %q", method, url, code, got, wantCode, wantBody)
	}
}

// ports returns the unit's opened ports (open-port, close-port).
func (u *unit) ports() []string { return u.lines("ports") }

func TestKVHooks(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	h := newHost(kv)
	p1, p2 := freePort(t), freePort(t)
	url1, url2 := "http://127.0.0.1:"+p1, "http://127.0.0.1:"+p2
	kv.set("config/port", p1)
	kv.set("relation-ids/server", "server:1")

	h.deploy()
	kv.wantStatus("active serving on 127.0.0.1:" + p1)
	if got := kv.lines("status.log"); !slices.Contains(got, "maintenance waiting for kv-server on 127.0.0.1:"+p1) {
		t.Errorf("statuses %q: no maintenance status while starting", got)
	}
	if got, want := kv.lines("relation-set.log"), []string{"server:1 host=127.0.0.1 port=" + p1}; !slices.Equal(got, want) {
		t.Errorf("config-changed: relation-set calls %q, want %q", got, want)
	}
	if got, want := kv.ports(), []string{p1 + "/tcp"}; !slices.Equal(got, want) {
		t.Errorf("opened ports %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(kv.dir, "kv", "addr")); err != nil || string(b) != "127.0.0.1:"+p1+"\n" {
		t.Errorf("kv/addr holds %q (%v), want the address", b, err)
	}
	pid := h.pid("kv-server")
	wantCall(t, "GET", url1+"/health", "", 200, "ok\n")
	wantCall(t, "PUT", url1+"/keys/greeting", "hello", 204, "")

	// Idempotent: the same config changes nothing.
	h.change()
	kv.mustRun("start")
	if got := h.pid("kv-server"); got != pid || !alive(pid) {
		t.Errorf("config-changed and start again: pid %d (alive %v), want %d running", got, alive(pid), pid)
	}

	// A new port: the port claim moves, and the server with it, its data
	// kept.
	kv.set("config/port", p2)
	h.change()
	kv.wantStatus("active serving on 127.0.0.1:" + p2)
	if got, want := kv.ports(), []string{p2 + "/tcp"}; !slices.Equal(got, want) {
		t.Errorf("opened ports %q, want %q", got, want)
	}
	if alive(pid) {
		t.Errorf("the server on the old port (pid %d) still runs", pid)
	}
	if code, _ := call(t, "GET", url1+"/health", ""); code != 0 {
		t.Errorf("the old port still answers: %d", code)
	}
	if err := probe(kv, url2+"/health"); err != nil {
		t.Fatal(err)
	}
	wantCall(t, "GET", url2+"/keys/greeting", "", 200, "hello")
	if got, want := kv.lines("relation-set.log"), "server:1 host=127.0.0.1 port="+p2; got[len(got)-1] != want {
		t.Errorf("config-changed: relation-set calls %q, want the last %q", got, want)
	}

	// A port the server cannot listen on fails config-changed.
	kv.set("config/port", "70000")
	if out, err := kv.run("config-changed"); err == nil || !strings.Contains(out, `port "70000" is not a TCP port`) {
		t.Errorf("config-changed with port 70000: %v, %q; want it failed, saying why", err, out)
	}
	kv.set("config/port", p2)

	kv.mustRun("server-relation-joined", relationEnv("server:1", "app/0")...)
	kv.mustRun("server-relation-changed", relationEnv("server:1", "app/0")...)
	if got, want := kv.lines("relation-set.log"), "server:1 host=127.0.0.1 port="+p2; got[len(got)-1] != want || got[len(got)-2] != want {
		t.Errorf("server-relation-joined and -changed: relation-set calls %q, want the last two %q", got, want)
	}

	pid = h.pid("kv-server")
	kv.mustRun("stop")
	kv.wantStatus("maintenance stopping kv-server")
	h.shutdown()
	if alive(pid) {
		t.Errorf("shut down, the server (pid %d) runs", pid)
	}
	if code, _ := call(t, "GET", url2+"/health", ""); code != 0 {
		t.Errorf("shut down, the server still answers: %d", code)
	}
}

// probe waits until url answers, through the unit's kv-server.
func probe(u *unit, url string) error {
	out, err := exec.Command(filepath.Join(u.dir, "charm", "bin", "kv-server"), "probe", "-timeout", "10s", url).CombinedOutput()
	if err != nil {
		return fmt.Errorf("probe %s: %v\n%s", url, err, out)
	}
	return nil
}

func TestKVStartFailsWhenPortTaken(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	h := newHost(kv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	kv.set("config/port", port)
	h.files()
	kv.mustRun("install")
	kv.mustRun("config-changed")
	h.daemons()
	out, err := kv.run("start")
	if err == nil {
		t.Fatalf("start with the port taken succeeded:\n%s", out)
	}
	if !strings.Contains(out, "does not answer") || !strings.Contains(out, "address already in use") {
		t.Errorf("start with the port taken: output %q, want the reason from the server's log", out)
	}
}

func TestAppHooks(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	kh := newHost(kv)
	kvPort := freePort(t)
	kv.set("config/port", kvPort)
	kh.deploy()
	kvAddr := "127.0.0.1:" + kvPort

	app := newUnit(t, "app", "app/0")
	h := newHost(app)
	port := freePort(t)
	url := "http://127.0.0.1:" + port + "/"
	app.set("config/port", port)
	h.files()
	app.mustRun("install")
	app.wantStatus("blocked waiting for a kv relation")
	app.mustRun("config-changed")
	h.daemons()
	app.mustRun("start")
	app.wantStatus("blocked waiting for a kv relation")
	if got, want := app.ports(), []string{port + "/tcp"}; !slices.Equal(got, want) {
		t.Errorf("opened ports %q, want %q", got, want)
	}
	wantCall(t, "GET", url, "", 503, "waiting for kv\n")

	// Related, before kv has published its address.
	app.set("relation-ids/db", "db:2")
	app.set("members/db:2", "kv/0")
	app.mustRun("db-relation-changed", relationEnv("db:2", "kv/0")...)
	app.wantStatus("blocked waiting for a kv relation")

	app.set("settings/db:2/kv_0/host", "127.0.0.1")
	app.set("settings/db:2/kv_0/port", kvPort)
	app.mustRun("db-relation-changed", relationEnv("db:2", "kv/0")...)
	app.wantStatus("active counter in kv at " + kvAddr)
	page := func(n string) string {
		return "app/0 says: this page was seen " + n + " (counter kept in kv at " + kvAddr + ")\n"
	}
	wantCall(t, "GET", url, "", 200, page("1 time"))
	wantCall(t, "GET", url, "", 200, page("2 times"))

	// The counter survives kv's restart.
	kh.shutdown()
	wantCall(t, "GET", url, "", 502, "")
	kh.daemons()
	if err := probe(kv, "http://"+kvAddr+"/health"); err != nil {
		t.Fatal(err)
	}
	wantCall(t, "GET", url, "", 200, page("3 times"))

	// A crashed app-server is started again by its supervisor.
	pid := h.pid("app-server")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := probe(kv, url+"health"); err != nil {
		t.Fatal(err)
	}
	if got := h.pid("app-server"); got == pid || !alive(got) {
		t.Errorf("after a crash, the supervisor runs pid %d (alive %v), want a new server", got, alive(got))
	}
	wantCall(t, "GET", url, "", 200, page("4 times"))

	// A new port: the server moves.
	port2 := freePort(t)
	app.set("config/port", port2)
	h.change()
	app.wantStatus("active counter in kv at " + kvAddr)
	url = "http://127.0.0.1:" + port2 + "/"
	if err := probe(kv, url+"health"); err != nil {
		t.Fatal(err)
	}
	wantCall(t, "GET", url, "", 200, page("5 times"))

	app.set("members/db:2", "")
	app.mustRun("db-relation-departed", append(relationEnv("db:2", "kv/0"), "LIFELINE_DEPARTING_UNIT=kv/0")...)
	app.wantStatus("blocked waiting for a kv relation")
	wantCall(t, "GET", url, "", 503, "waiting for kv\n")
	app.mustRun("db-relation-broken", relationEnv("db:2", "")...)
	app.wantStatus("blocked waiting for a kv relation")

	app.mustRun("stop")
	app.wantStatus("maintenance stopping app-server")
}

func TestLoggerHooks(t *testing.T) {
	lg := newUnit(t, "logger", "logger/0")
	steps := []struct {
		hook       string
		env        []string
		wantStatus string
	}{
		{"install", nil, "waiting waiting for a principal"},
		{"host-relation-created", relationEnv("host:3", ""), "waiting waiting for a principal"},
		{"config-changed", nil, "waiting waiting for a principal"},
		{"start", nil, "waiting waiting for a principal"},
		{"host-relation-joined", relationEnv("host:3", "kv/0"), "active logging kv/0"},
		{"host-relation-changed", relationEnv("host:3", "kv/0"), "active logging kv/0"},
		{"host-relation-departed", append(relationEnv("host:3", "kv/0"), "LIFELINE_DEPARTING_UNIT=kv/0"), "waiting waiting for a principal"},
		{"host-relation-broken", relationEnv("host:3", ""), "waiting waiting for a principal"},
		{"stop", nil, "waiting waiting for a principal"},
		{"remove", nil, "waiting waiting for a principal"},
	}
	var want []string
	for _, s := range steps {
		lg.mustRun(s.hook, s.env...)
		lg.wantStatus(s.wantStatus)
		remote, rel := "-", "-"
		for _, e := range s.env {
			if v, ok := strings.CutPrefix(e, "LIFELINE_REMOTE_UNIT="); ok {
				remote = v
			}
			if v, ok := strings.CutPrefix(e, "LIFELINE_RELATION_ID="); ok {
				rel = v
			}
		}
		want = append(want, s.hook+" "+remote+" "+rel)
	}
	b, err := os.ReadFile(filepath.Join(lg.dir, "logger", "hooks.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("hooks.log has %d lines, want %d:\n%s", len(lines), len(want), b)
	}
	for i, l := range lines {
		ts, rest, _ := strings.Cut(l, " ")
		if _, err := time.Parse(time.RFC3339, ts); err != nil || rest != want[i] {
			t.Errorf("hooks.log line %d = %q, want a time then %q", i+1, l, want[i])
		}
	}
}

// copyTree copies the charm in src to dst: directories, regular files
// (with their modes) and symlinks; dst/bin's servers are not copied.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && rel == "bin":
			return fs.SkipDir
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		default:
			info, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(path, target, info.Mode().Perm())
		}
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
