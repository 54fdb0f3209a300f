package e2e

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
)

// background is a ctl run the test does not wait for at once.
type background struct {
	args           []string
	stdout, stderr syncbuf.Buffer
	done           chan struct{}
	err            error
}

// startCtl runs ctl with args in the background; it is killed when the
// test ends, if it has not ended before.
func startCtl(t *testing.T, s *e2etest.Sandbox, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{args: args, done: make(chan struct{})}
	cmd := s.CtlCommand(ctx, "", args...)
	cmd.Stdout, cmd.Stderr = &b.stdout, &b.stderr
	if err := s.Start(cmd); err != nil {
		cancel()
		t.Fatalf("ctl %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		b.err = cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	return b
}

func (b *background) String() string {
	return fmt.Sprintf("ctl %s\nstdout:\n%s\nstderr:\n%s", strings.Join(b.args, " "), b.stdout.String(), b.stderr.String())
}

// running fails the test if the command has ended.
func (b *background) running(t *testing.T) {
	t.Helper()
	select {
	case <-b.done:
		t.Fatalf("%v\nended (%v), want it still waiting", b, b.err)
	default:
	}
}

// end waits for the command to end and returns its exit status.
func (b *background) end(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		t.Fatalf("%v\nstill running after %s", b, timeout)
	}
	var ee *exec.ExitError
	switch {
	case b.err == nil:
		return 0
	case errors.As(b.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("%v\n%v", b, b.err)
	return -1
}

// unitAddress is the named unit's address, from ctl status.
func unitAddress(t *testing.T, s *e2etest.Sandbox, name string) string {
	t.Helper()
	u, ok := s.Status(t).Unit(name)
	if !ok || u.Address == "" {
		t.Fatalf("unit %s = %+v (found %v), want it with an address", name, u, ok)
	}
	return u.Address
}

// answers checks that url answers 200 with a body holding want, now.
func answers(t *testing.T, url, want string) {
	t.Helper()
	code, body, err := e2etest.HTTPGet(url)
	if err != nil || code != 200 || !strings.Contains(body, want) {
		t.Errorf("GET %s = %d %q, %v; want 200 with %q", url, code, body, err, want)
	}
}

// TestWaitIsABarrier: ctl config && ctl wait returns only once the
// change has been acted on everywhere: kv's server answers on its new
// port, and the app related to it has been told (its page names the new
// address), as soon as wait returns. --since-revision waits for the model
// as of a revision.
func TestWaitIsABarrier(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "deploy", charmPath(t, "app"))
	s.OK(t, "add-relation", "app", "kv")
	s.OK(t, "wait", "--timeout", "2m")
	kv, app := unitAddress(t, s, "kv/0"), unitAddress(t, s, "app/0")
	answers(t, "http://"+app+":8080/", "counter kept in kv at "+kv+":7070")

	s.OK(t, "config", "kv", "port=7071")
	out := s.OK(t, "wait", "--timeout", "2m")
	if !strings.Contains(out, "settled") {
		t.Errorf("ctl wait said %q, want settled", out)
	}
	answers(t, "http://"+kv+":7071/health", "ok")
	answers(t, "http://"+app+":8080/", "counter kept in kv at "+kv+":7071")

	// The model as of a revision: the change before it acted on.
	s.OK(t, "config", "kv", "port=7072")
	rev := s.Status(t).Revision
	if rev == 0 {
		t.Fatalf("ctl status --format json gave no revision")
	}
	s.OK(t, "wait", "--since-revision", fmt.Sprint(rev), "--timeout", "2m")
	answers(t, "http://"+kv+":7072/health", "ok")
	answers(t, "http://"+app+":8080/", "counter kept in kv at "+kv+":7072")
	s.Fails(t, 1, "the model is at revision", "wait", "--since-revision", fmt.Sprint(rev+1_000_000))
	s.Fails(t, 2, "--since-revision -1", "wait", "--since-revision", "-1")
}

// TestFailingHookShowsAtOnce: a config-changed that fails shows at once as
// agent error, with when it runs again, and ctl wait names it in its
// progress line while it waits for the retry; once the cause is gone the
// retry succeeds and wait ends. An error that holds up a dying unit ends
// ctl wait at once, unless --tolerate-errors, which waits it out.
func TestFailingHookShowsAtOnce(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "wait", "--timeout", "2m")
	kv := unitAddress(t, s, "kv/0")

	// kv-server cannot listen on port 70000: config-changed fails (and,
	// without auto-revert, the unit stays in error).
	s.OK(t, "set-rollout", "kv", "--auto-revert=false")
	s.OK(t, "config", "kv", "port=70000")
	const retrying = `hook failed: "config-changed" (retry `
	doc := s.WaitStatus(t, "kv/0 shown in error", time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit("kv/0")
		return u.Agent != "idle" && u.Agent != "executing"
	})
	if u, _ := doc.Unit("kv/0"); u.Agent != "error" || !strings.HasPrefix(u.Message, retrying) || !strings.Contains(u.Message, " of 5 in ") || u.State != "running" {
		t.Fatalf("kv/0 after config-changed failed = %+v, want agent error %q..., of 5 in ..., state running", u, retrying)
	}
	w := startCtl(t, s, "wait", "--timeout", "5m")
	poll.Within(t, "ctl wait to name kv/0 in error", time.Minute, func() (bool, string) {
		w.running(t)
		return w.stderr.Has("in error: kv/0 (" + retrying), w.String()
	})
	s.OK(t, "config", "kv", "port=7075")
	s.Ctl("resolved", "kv/0") // run it at once (unless its retry ran already)
	if code := w.end(t, 3*time.Minute); code != 0 || !strings.Contains(w.stdout.String(), "settled") {
		t.Fatalf("%v\nexit %d, want 0 and settled once the retry succeeded", w, code)
	}
	answers(t, "http://"+kv+":7075/health", "ok")

	// A unit in error that is dying holds up its own death.
	s.OK(t, "config", "kv", "port=70000")
	s.WaitStatus(t, "kv/0 shown in error again", time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit("kv/0")
		return u.Agent == "error"
	})
	s.OK(t, "destroy-unit", "kv/0")
	s.Fails(t, 1, "holds up unit kv/0 (dying)", "wait", "--timeout", "5m")
	w = startCtl(t, s, "wait", "--tolerate-errors", "--timeout", "5m")
	poll.Within(t, "ctl wait --tolerate-errors to name kv/0 in error", time.Minute, func() (bool, string) {
		w.running(t)
		return w.stderr.Has("in error: kv/0 (" + retrying), w.String()
	})
	s.OK(t, "config", "kv", "port=7076")
	s.Ctl("resolved", "kv/0")
	if code := w.end(t, 3*time.Minute); code != 0 {
		t.Fatalf("%v\nexit %d, want 0 once the retry succeeded and kv/0 went", w, code)
	}
	if _, ok := s.Status(t).Unit("kv/0"); ok {
		t.Errorf("kv/0 is still there after ctl wait --tolerate-errors settled")
	}
}

// TestWaitSelectors: ctl wait SERVICE|UNIT waits for those alone: kv
// settles while app, unrelated, has a hook failing; a name the model does
// not hold counts as gone; a name that is no name is a usage error.
func TestWaitSelectors(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "deploy", charmPath(t, "app"))
	s.OK(t, "wait", "--timeout", "2m")

	// app-server cannot listen on port 70000: config-changed fails (and,
	// without auto-revert, the unit stays in error).
	s.OK(t, "set-rollout", "app", "--auto-revert=false")
	s.OK(t, "config", "app", "port=70000")
	s.OK(t, "config", "kv", "port=7071")
	out := s.OK(t, "wait", "kv", "--timeout", "2m")
	if !strings.Contains(out, "settled: 1 unit idle") {
		t.Errorf("ctl wait kv said %q, want settled with its one unit", out)
	}
	answers(t, "http://"+unitAddress(t, s, "kv/0")+":7071/health", "ok")
	out = s.OK(t, "wait", "kv/0", "nothing", "--timeout", "2m")
	if !strings.Contains(out, "not in the model: nothing") {
		t.Errorf("ctl wait kv/0 nothing said %q, want nothing named not in the model", out)
	}
	s.Fails(t, 1, `in error: app/0 (hook failed: "config-changed"`, "wait", "app", "--timeout", "10s")
	s.Fails(t, 2, `"Bad/x" is neither a service nor a unit name`, "wait", "Bad/x")
}

// TestWaitAcrossControllers: with two controllers of one model, ctl wait
// through the one the agents are not connected to (they follow the
// leader's address first) still waits for them: the barrier it writes
// reaches their watches through the other controller's hub.
func TestWaitAcrossControllers(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	srv, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(s.Dir, "etcd"), TickMs: 10, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(srv.Close)
	// The test's etcd is the controllers': its socket is in the
	// directory a controller's data directory would hold it in.
	machines := filepath.Join(s.Dir, "machines")
	s.AddMachinesDir(machines)
	flags := []string{"--etcd-endpoints", srv.Endpoint(), "--namespace", "/lifeline/", "--machines-dir", machines}
	ctrls := []*e2etest.Controller{s.StartController(t, flags...), s.StartController(t, flags...)}
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "deploy", charmPath(t, "app"))
	s.OK(t, "add-relation", "app", "kv")
	s.OK(t, "wait", "--timeout", "2m")
	doc := s.WaitStatus(t, "two controllers, one leading", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, _, led := doc.Leader()
		return len(doc.Controllers) == 2 && led
	})
	_, addrs, _ := doc.Leader()
	other := ctrls[0]
	if slices.Contains(addrs, other.Addr()) {
		other = ctrls[1]
	}
	kv, app := unitAddress(t, s, "kv/0"), unitAddress(t, s, "app/0")
	if r := s.CtlVia(other.ClientConfig(), "config", "kv", "port=7071"); r.Code != 0 {
		t.Fatal(r)
	}
	if r := s.CtlVia(other.ClientConfig(), "wait", "--timeout", "2m"); r.Code != 0 || !strings.Contains(r.Stdout, "settled") {
		t.Fatalf("%v\nwant settled", r)
	}
	answers(t, "http://"+kv+":7071/health", "ok")
	answers(t, "http://"+app+":8080/", "counter kept in kv at "+kv+":7071")
}

// heldKV is a copy of the built kv charm whose config-changed, once the
// port is set to port, waits until the file gate exists: a hook that runs
// for as long as the test wants.
func heldKV(t *testing.T, gate string, port int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kv")
	src := charmPath(t, "kv")
	if err := e2etest.CopyCharm(src, dir); err != nil {
		t.Fatal(err)
	}
	server, err := os.ReadFile(filepath.Join(src, "bin", "kv-server"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "kv-server"), server, 0o755); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(dir, "hooks", "config-changed")
	data, err := os.ReadFile(hook)
	if err != nil {
		t.Fatal(err)
	}
	held := fmt.Sprintf("set -eu\nif [ \"$(config-get port)\" = %d ]; then\n\twhile [ ! -e %q ]; do sleep 0.1; done\nfi\n", port, gate)
	text, ok := strings.CutPrefix(string(data), "#!/bin/sh\n")
	if !ok {
		t.Fatalf("%s does not start with #!/bin/sh", hook)
	}
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"+held+text), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHookShowsExecuting: a hook that runs shows its unit's agent
// executing, for as long as it runs, and so does a hook queued behind it
// for the machine's hook lock; ctl wait names both while it waits, and
// settles once they have run.
func TestHookShowsExecuting(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	gate := filepath.Join(t.TempDir(), "gate")
	s.OK(t, "deploy", heldKV(t, gate, 7079))
	s.OK(t, "wait", "--timeout", "2m")
	kvDoc, _ := s.Status(t).Unit("kv/0")
	s.OK(t, "deploy", charmPath(t, "app"), "--to", kvDoc.Machine)
	s.OK(t, "wait", "--timeout", "2m")

	executing := func(unit string) func(*e2etest.StatusDoc) bool {
		return func(doc *e2etest.StatusDoc) bool {
			u, _ := doc.Unit(unit)
			return u.Agent == "executing"
		}
	}
	s.OK(t, "config", "kv", "port=7079")
	s.WaitStatus(t, "kv/0 executing its held config-changed", time.Minute, executing("kv/0"))
	w := startCtl(t, s, "wait", "--timeout", "5m")
	s.OK(t, "config", "app", "port=8081")
	doc := s.WaitStatus(t, "app/0 executing, its config-changed queued behind kv/0's", time.Minute, executing("app/0"))
	if u, _ := doc.Unit("kv/0"); u.Agent != "executing" {
		t.Fatalf("kv/0 = %+v while its config-changed is held, want agent executing", u)
	}
	poll.Within(t, "ctl wait to name both hooks", time.Minute, func() (bool, string) {
		w.running(t)
		return w.stderr.Has("kv/0 (running config-changed hook)") && w.stderr.Has("app/0 (waiting to run config-changed hook)"), w.String()
	})
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := w.end(t, 3*time.Minute); code != 0 || !strings.Contains(w.stdout.String(), "settled: 2 units idle") {
		t.Fatalf("%v\nexit %d, want 0 and both units settled once the hooks ran", w, code)
	}
	answers(t, "http://"+kvDoc.Address+":7079/health", "ok")
	answers(t, "http://"+kvDoc.Address+":8081/health", "ok")
}
