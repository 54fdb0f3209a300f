package examples

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// The example charms' actions run here as their unit agent would run
// them, with fake tools (testdata/fake-tool): params/KEY answers
// action-get KEY, checkpoint/KEY holds the checkpoint.

func TestCharmsActions(t *testing.T) {
	want := map[string][]string{"kv": {"backup", "keys", "reindex"}, "app": nil, "logger": nil,
		"token-source": {"token"}, "token-sink": nil}
	for name, actions := range want {
		c, err := charm.ReadDir(filepath.Join("charms", name))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Actions.Names(); !slices.Equal(got, actions) {
			t.Errorf("%s's actions = %q, want %q", name, got, actions)
		}
	}
	c, err := charm.ReadDir("charms/kv")
	if err != nil {
		t.Fatal(err)
	}
	specs := c.Actions.Specs
	if s := specs["keys"]; !s.Safe || len(s.Approvers) != 0 {
		t.Errorf("keys = %+v, want a safe action", s)
	}
	if s := specs["backup"]; s.Safe || !slices.Equal(s.Approvers, []string{charm.ApproverAdmin}) {
		t.Errorf("backup = %+v, want an unsafe action any admin approves", s)
	}
	if s := specs["reindex"]; !s.Safe || s.MaxParallel != 2 || s.PauseGrace != 5*time.Second {
		t.Errorf("reindex = %+v, want a safe action, max-parallel 2, pause-grace 5s", s)
	}
	for _, tt := range []struct {
		action string
		params map[string]any
		want   string // the completed parameters as JSON, or the error
	}{
		{"keys", nil, `{}`},
		{"keys", map[string]any{"x": 1}, `keys: parameter "x" is not allowed`},
		{"backup", map[string]any{"name": "nightly"}, `{"compress":false,"name":"nightly"}`},
		{"backup", map[string]any{"name": "../x", "compress": "yes"}, `backup: parameter "compress": want boolean, got string; parameter "name": want text matching ^[a-z0-9-]+$, got "../x"`},
		{"backup", nil, `backup: parameter "name" is required`},
		{"reindex", nil, `{"step-ms":200,"steps":20}`},
		{"reindex", map[string]any{"steps": 0, "step-ms": 1.5}, `reindex: parameter "step-ms": want integer, got number; parameter "steps": minimum: got 0, want 1`},
	} {
		got := ""
		params, err := c.Actions.Validate(tt.action, tt.params)
		if err != nil {
			got = err.Error()
		} else {
			b, _ := charm.CanonicalJSON(params)
			got = string(b)
		}
		if got != tt.want {
			t.Errorf("Validate(%s, %v) = %s, want %s", tt.action, tt.params, got, tt.want)
		}
	}
}

// action returns the command that runs action name of u as its unit agent
// would: in the charm directory, in a process group of its own, the
// action's environment plus env.
func (u *unit) action(name string, out io.Writer, env ...string) *exec.Cmd {
	charmDir := filepath.Join(u.dir, "charm")
	cmd := exec.Command(filepath.Join(charmDir, "actions", name))
	cmd.Dir = charmDir
	cmd.Env = append([]string{
		"PATH=" + u.tools + string(filepath.ListSeparator) + os.Getenv("PATH"),
		"HOME=" + charmDir,
		"LANG=C.UTF-8",
		"LIFELINE_UNIT_NAME=" + u.name,
		"LIFELINE_SERVICE=" + strings.Split(u.name, "/")[0],
		"LIFELINE_MACHINE_ID=0",
		"LIFELINE_CHARM_DIR=" + charmDir,
		"LIFELINE_ACTION_NAME=" + name,
		"LIFELINE_OPERATION_ID=1",
		"FAKE_DIR=" + u.fake,
	}, env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// runAction runs action name to its end, failing the test if it takes
// over a minute.
func (u *unit) runAction(name string, env ...string) (string, error) {
	u.t.Helper()
	var out bytes.Buffer
	cmd := u.action(name, &out, env...)
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	// A bound for an action that hangs: the resumed reindex forks a few
	// hundred tool processes, which took over a minute at load 30.
	timer := time.AfterFunc(3*time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err := cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		u.t.Errorf("action %s of %s left processes holding its output open", name, u.name)
		err = nil
	}
	return out.String(), err
}

// params sets what action-get answers; an empty value removes the key.
func (u *unit) params(kv map[string]string) {
	u.t.Helper()
	for k, v := range kv {
		u.set("params/"+k, v)
	}
}

// checkpoint returns the step checkpoint-set last stored, -1 if none.
func (u *unit) checkpoint() int {
	u.t.Helper()
	b, err := os.ReadFile(filepath.Join(u.fake, "checkpoint", "step"))
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		u.t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		u.t.Fatalf("checkpoint step %q: %v", b, err)
	}
	return n
}

func TestKVActions(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	h := newHost(kv)
	port := freePort(t)
	url := "http://127.0.0.1:" + port
	kv.set("config/port", port)

	// Before the server runs, keys fails, saying why.
	kv.mustRun("install")
	if out, err := kv.runAction("keys"); err != nil {
		t.Fatalf("keys: %v\n%s", err, out)
	}
	if got, want := kv.lines("action-fail.log"), []string{"kv-server is not running"}; !slices.Equal(got, want) {
		t.Errorf("keys before start: action-fail %q, want %q", got, want)
	}

	h.files()
	kv.mustRun("config-changed")
	h.daemons()
	kv.mustRun("start")
	if out, err := kv.runAction("keys"); err != nil {
		t.Fatalf("keys: %v\n%s", err, out)
	}
	wantCall(t, "PUT", url+"/keys/b", "two", 204, "")
	wantCall(t, "PUT", url+"/keys/a", "one", 204, "")
	if out, err := kv.runAction("keys"); err != nil {
		t.Fatalf("keys: %v\n%s", err, out)
	}
	if got, want := kv.lines("action-set.log"), []string{"count=0 keys=", "count=2 keys=a,b"}; !slices.Equal(got, want) {
		t.Errorf("keys: action-set %q, want %q", got, want)
	}

	data, err := os.ReadFile(filepath.Join(kv.dir, "kv", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	backups := filepath.Join(kv.dir, "kv", "backups")
	kv.params(map[string]string{"name": "b1", "compress": "false"})
	if out, err := kv.runAction("backup"); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if got, err := os.ReadFile(filepath.Join(backups, "b1.json")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("backup b1 holds %q, %v, want the data file, %q", got, err, data)
	}
	kv.params(map[string]string{"name": "b2", "compress": "true"})
	if out, err := kv.runAction("backup"); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if got := gunzip(t, filepath.Join(backups, "b2.json.gz")); !bytes.Equal(got, data) {
		t.Errorf("backup b2 unzips to %q, want the data file, %q", got, data)
	}
	if got, want := kv.lines("action-set.log")[2:], []string{"path=" + filepath.Join(backups, "b1.json"), "path=" + filepath.Join(backups, "b2.json.gz")}; !slices.Equal(got, want) {
		t.Errorf("backup: action-set %q, want %q", got, want)
	}
	// A backup is never overwritten.
	wantCall(t, "PUT", url+"/keys/c", "three", 204, "")
	if out, err := kv.runAction("backup"); err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	if got := gunzip(t, filepath.Join(backups, "b2.json.gz")); !bytes.Equal(got, data) {
		t.Errorf("backup b2 again: it unzips to %q, want the first backup, %q", got, data)
	}
	if got, want := kv.lines("action-fail.log")[1:], []string{"backup b2 exists: " + filepath.Join(backups, "b2.json.gz")}; !slices.Equal(got, want) {
		t.Errorf("backup b2 again: action-fail %q, want %q", got, want)
	}
	entries, err := os.ReadDir(backups)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"b1.json", "b2.json.gz"}; !slices.Equal(names, want) {
		t.Errorf("backups/ holds %q, want %q (no temporary files)", names, want)
	}
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func TestKVReindex(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	kv.params(map[string]string{"steps": "25", "step-ms": "0"})
	if out, err := kv.runAction("reindex"); err != nil {
		t.Fatalf("reindex: %v\n%s", err, out)
	}
	if got, want := kv.lines("action-set.log"), []string{"steps-done=25 resumed-from=0"}; !slices.Equal(got, want) {
		t.Errorf("reindex: action-set %q, want %q", got, want)
	}
	if got, want := kv.lines("action-log.log"), []string{"step 10 of 25", "step 20 of 25"}; !slices.Equal(got, want) {
		t.Errorf("reindex: action-log %q, want %q", got, want)
	}
	if got := kv.checkpoint(); got != 25 {
		t.Errorf("reindex: checkpoint step %d, want 25", got)
	}
}

// TestKVReindexPauseAndResume pauses reindex as the agent does, SIGTERM to
// its process group, and resumes it from its checkpoint.
func TestKVReindexPauseAndResume(t *testing.T) {
	kv := newUnit(t, "kv", "kv/0")
	const steps = 200
	kv.params(map[string]string{"steps": strconv.Itoa(steps), "step-ms": "20"})
	var out bytes.Buffer
	cmd := kv.action("reindex", &out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for kv.checkpoint() < 12 {
		select {
		case err := <-done:
			t.Fatalf("reindex ended before it was paused: %v\n%s", err, out.String())
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Fatalf("reindex made no checkpoint past step 11 within a minute\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("reindex did not end on SIGTERM\n%s", out.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 {
		t.Errorf("reindex ended by SIGTERM: %v, want exit status 143\n%s", err, out.String())
	}
	paused := kv.checkpoint()
	if paused < 12 || paused >= steps {
		t.Fatalf("paused at checkpoint step %d, want between 12 and %d", paused, steps)
	}
	if got := kv.lines("action-set.log"); got != nil {
		t.Errorf("paused reindex set results %q", got)
	}

	// Resumed, it goes on after its checkpoint (faster: the parameters
	// are the test's to change).
	kv.params(map[string]string{"step-ms": "0"})
	if out, err := kv.runAction("reindex", "LIFELINE_ACTION_RESUMED=1"); err != nil {
		t.Fatalf("resumed reindex: %v\n%s", err, out)
	}
	if got, want := kv.lines("action-set.log"), []string{fmt.Sprintf("steps-done=%d resumed-from=%d", steps, paused)}; !slices.Equal(got, want) {
		t.Errorf("resumed reindex: action-set %q, want %q", got, want)
	}
	if got := kv.checkpoint(); got != steps {
		t.Errorf("resumed reindex: checkpoint step %d, want %d", got, steps)
	}
	// Every tenth step was logged once, across both runs: the first up to
	// its checkpoint (its last line may be lost, if SIGTERM ended
	// action-log), the resumed one after it.
	var before, after []string
	for s := 10; s <= steps; s += 10 {
		line := fmt.Sprintf("step %d of %d", s, steps)
		if s <= paused {
			before = append(before, line)
		} else {
			after = append(after, line)
		}
	}
	logs := kv.lines("action-log.log")
	i := slices.Index(logs, fmt.Sprintf("resuming after step %d of %d", paused, steps))
	if i < 0 || !slices.Equal(logs[:i], before[:min(i, len(before))]) || i < len(before)-1 || !slices.Equal(logs[i+1:], after) {
		t.Errorf("action-log across the pause = %q, want %q, the resuming line, then %q", logs, before, after)
	}
}
