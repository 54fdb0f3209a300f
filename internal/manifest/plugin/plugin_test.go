package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// script writes a POSIX shell plugin into dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer is an Output safe to read while a run writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// goodPlugin is a plugin whose resource is VALID once its "make" action
// ran: it keeps a marker in its writable plug "data", records what each
// run read on stdin and its environment there.
const goodPlugin = `
case "$1" in
"")
  cat > /dev/null
  echo '{"config_schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
         "plugs": {"data": {"container_path": "/data", "optional": false, "writable": true}},
         "state_action": {"args": ["state"]}}' ;;
state)
  cat > "$LIFELINE_PLUG_DATA/state-stdin.json"
  env > "$LIFELINE_PLUG_DATA/state-env"
  echo "state run" >&2
  if [ -f "$LIFELINE_PLUG_DATA/done" ]; then
    echo '{"status": "VALID", "state": {"done": true, "n": 1}}'
  else
    echo '{"status": "STALE", "staleState": {"done": false},
           "actions": [{"name": "make", "description": "make it", "args": ["make", "x y"]}]}'
  fi ;;
make)
  cat > "$LIFELINE_PLUG_DATA/done"
  echo "made $2"
  echo "to stderr" >&2 ;;
*) echo "unknown $1" >&2; exit 2 ;;
esac
`

func TestGoodPluginStaleActionValid(t *testing.T) {
	t.Setenv("LIFELINE_TEST_SECRET", "leak")
	dir, data := t.TempDir(), t.TempDir()
	var out syncBuffer
	p := &Program{
		Path:    script(t, dir, "good", goodPlugin),
		Plugs:   map[string]Plug{"data": {Path: data, Writable: true}},
		Version: "v9.9.9",
		Output:  &out,
	}
	ctx := context.Background()
	r, err := p.Init(ctx, "res", "exec:./good")
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if got, want := r.Plugs["data"], (PlugSpec{ContainerPath: "/data", Writable: true}); got != want {
		t.Errorf("Init plugs[data] = %+v, want %+v", got, want)
	}
	if r.StateAction != "good state" || r.StateActionSpec.Name != "state" || len(r.StateActionSpec.Args) != 1 {
		t.Errorf("Init state action = %q %+v, want \"good state\"", r.StateAction, r.StateActionSpec)
	}
	config := map[string]any{"n": 1}
	s, err := p.State(ctx, "res", "exec:./good", config)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if s.Status != StatusStale || len(s.Actions) != 1 || s.StaleState["done"] != false {
		t.Fatalf("State = %+v, want STALE with one action and a staleState", s)
	}
	want := Action{Name: "make", Description: "make it", Args: []string{"make", "x y"}}
	if a := s.Actions[0]; a.Name != want.Name || a.Description != want.Description || strings.Join(a.Args, "|") != "make|x y" {
		t.Errorf("State action = %+v, want %+v", a, want)
	}
	var in map[string]any
	b, _ := os.ReadFile(filepath.Join(data, "state-stdin.json"))
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatalf("state stdin %q: %v", b, err)
	}
	if in["name"] != "res" || in["type"] != "exec:./good" || in["version"] != "v9.9.9" || in["verbose"] != false || in["config"].(map[string]any)["n"] != 1.0 {
		t.Errorf("state stdin = %v", in)
	}
	env, _ := os.ReadFile(filepath.Join(data, "state-env"))
	if strings.Contains(string(env), "LIFELINE_TEST_SECRET") || !strings.Contains(string(env), "LIFELINE_PLUG_DATA="+data) || !strings.Contains(string(env), "PATH=") {
		t.Errorf("state env = %q, want PATH, HOME and the plug only", env)
	}
	if strings.Contains(out.String(), "state run") {
		t.Errorf("Output = %q: state stderr shown without Verbose", out.String())
	}
	if err := p.Do(ctx, "res", "exec:./good", config, s.Actions[0]); err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got := out.String(); !strings.Contains(got, "made x y") || !strings.Contains(got, "to stderr") {
		t.Errorf("Output = %q, want the action's stdout and stderr", got)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "done")); !bytes.Contains(b, []byte(`"config":{"n":1}`)) {
		t.Errorf("action stdin = %q, want the state action's message", b)
	}
	s, err = p.State(ctx, "res", "exec:./good", config)
	if err != nil || s.Status != StatusValid || s.State["done"] != true || s.Actions != nil {
		t.Fatalf("State after the action = %+v, %v; want VALID", s, err)
	}
}

func TestVerboseCopiesStderr(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	var out syncBuffer
	p := &Program{Path: script(t, dir, "good", goodPlugin), Plugs: map[string]Plug{"data": {Path: data, Writable: true}}, Verbose: true, Output: &out}
	if _, err := p.State(context.Background(), "res", "t", map[string]any{"n": 2}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "state run") {
		t.Errorf("Output = %q, want the state run's stderr", out.String())
	}
	b, _ := os.ReadFile(filepath.Join(data, "state-stdin.json"))
	if !bytes.Contains(b, []byte(`"verbose":true`)) {
		t.Errorf("stdin = %s, want verbose true", b)
	}
}

// stateAnswer is a plugin whose init is good and whose state answer is the
// file "answer" next to it.
func stateAnswer(t *testing.T, answer string) *Program {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "answer"), []byte(answer), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Program{Path: script(t, dir, "p", `
if [ "$1" = state ]; then cat answer; else echo '{"state_action": {"args": ["state"]}}'; fi
`)}
}

func TestStateProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name, answer, field string
	}{
		{"malformed JSON", `{"status": "VALID", "state": {}`, ""},
		{"not JSON", `all good`, ""},
		{"nothing", ``, ""},
		{"an array", `[]`, ""},
		{"two values", `{"status": "VALID", "state": {}} {}`, ""},
		{"missing status", `{"state": {}}`, "status"},
		{"unknown status", `{"status": "valid", "state": {}}`, "status"},
		{"status not a string", `{"status": 1, "state": {}}`, "status"},
		{"actions with VALID", `{"status": "VALID", "state": {}, "actions": []}`, "actions"},
		{"staleState with VALID", `{"status": "VALID", "state": {}, "staleState": {}}`, "staleState"},
		{"VALID without state", `{"status": "VALID"}`, "state"},
		{"state not an object", `{"status": "VALID", "state": [1]}`, "state"},
		{"STALE without actions", `{"status": "STALE"}`, "actions"},
		{"STALE with no actions", `{"status": "STALE", "actions": []}`, "actions"},
		{"STALE with state", `{"status": "STALE", "state": {}, "actions": [{"name": "a"}]}`, "state"},
		{"actions not an array", `{"status": "STALE", "actions": {"name": "a"}}`, "actions"},
		{"action without name", `{"status": "STALE", "actions": [{"name": "a"}, {"description": "b"}]}`, "actions[1].name"},
		{"action unknown field", `{"status": "STALE", "actions": [{"name": "a", "argv": []}]}`, "actions[0].argv"},
		{"args not strings", `{"status": "STALE", "actions": [{"name": "a", "args": ["x", 2]}]}`, "actions[0].args[1]"},
		{"entrypoint not a string", `{"status": "STALE", "actions": [{"name": "a", "entrypoint": ["x"]}]}`, "actions[0].entrypoint"},
		{"staleState not an object", `{"status": "STALE", "staleState": "x", "actions": [{"name": "a"}]}`, "staleState"},
		{"unknown field", `{"status": "VALID", "state": {}, "stale_state": {}}`, "stale_state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := stateAnswer(t, tc.answer)
			_, err := p.State(context.Background(), "res", "t", nil)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("State = %v, want a protocol error", err)
			}
			if e.Field != tc.field || e.Plugin != p.Path || e.Resource != "res" || e.Step != "state" {
				t.Errorf("State error = %+v, want field %q, plugin, resource and step named", e, tc.field)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, p.Path) {
				t.Errorf("State error %q: want one line naming the plugin", msg)
			}
		})
	}
}

func TestInitProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name, answer, field string
	}{
		{"no state action", `{}`, "state_action"},
		{"unknown field", `{"state_action": {}, "label": "x"}`, "label"},
		{"state action not an object", `{"state_action": "state"}`, "state_action"},
		{"plug writable not a boolean", `{"state_action": {}, "plugs": {"p": {"writable": "yes"}}}`, "plugs.p.writable"},
		{"plug unknown field", `{"state_action": {}, "plugs": {"p": {"mode": "rw"}}}`, "plugs.p.mode"},
		{"plug bad name", `{"state_action": {}, "plugs": {"1p": {}}}`, "plugs.1p"},
		{"plugs sharing a variable", `{"state_action": {}, "plugs": {"a-b": {}, "a_b": {}}}`, "plugs.a_b"},
		{"schema not a schema", `{"state_action": {}, "config_schema": "object"}`, "config_schema"},
		{"schema does not compile", `{"state_action": {}, "config_schema": {"type": "objekt"}}`, "config_schema"},
		{"schema refers outside", `{"state_action": {}, "config_schema": {"$ref": "http://example.com/s.json"}}`, "config_schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := &Program{Path: script(t, dir, "p", "echo '"+tc.answer+"'\n")}
			_, err := p.Init(context.Background(), "res", "t")
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrProtocol) || e.Field != tc.field || e.Step != "init" {
				t.Fatalf("Init = %v (%+v), want a protocol error at %q", err, e, tc.field)
			}
		})
	}
}

func TestNonZeroExitKeepsStderrTail(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `
i=0; while [ $i -lt 500 ]; do echo "noise line $i" >&2; i=$((i+1)); done
echo "no credentials for zone example.com" >&2
exit 3
`)}
	_, err := p.Init(context.Background(), "res", "t")
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrFailed) {
		t.Fatalf("Init = %v, want ErrFailed", err)
	}
	if !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "no credentials for zone example.com") {
		t.Errorf("Init error = %q, want the status and stderr's last line", err)
	}
	if len(e.Stderr) > MaxStderrTail || !strings.HasSuffix(e.Stderr, "example.com\n") {
		t.Errorf("Stderr = %d bytes ending %q, want at most %d ending with the last line", len(e.Stderr), lastLine(e.Stderr), MaxStderrTail)
	}
}

func TestActionFailure(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `
case "$1" in
"") echo '{"state_action": {"args": ["state"]}}' ;;
fail) echo "disk full" >&2; exit 1 ;;
esac
`)}
	err := p.Do(context.Background(), "res", "t", nil, Action{Name: "write", Args: []string{"fail"}})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrFailed) || e.Step != "action write" || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Do = %v, want ErrFailed at action write with the stderr tail", err)
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting for its reaper has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	poll.UntilSays(t, fmt.Sprintf("process %d gone", pid), func() (bool, string) {
		return !alive(pid), "it still runs: left as an orphan"
	})
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// hangTimeouts are the timeouts the hang tests try in turn: a run that
// timed out before its script wrote what the test checks (a loaded
// machine) is tried again with a longer one.
var hangTimeouts = []time.Duration{300 * time.Millisecond, 2 * time.Second, 10 * time.Second}

func TestHangTimesOutAndLeavesNoOrphan(t *testing.T) {
	for _, timeout := range hangTimeouts {
		dir := t.TempDir()
		p := &Program{Path: script(t, dir, "p", `
sleep 1000 &
echo $! > child.pid
echo $$ > self.pid
sleep 1000
`), Timeout: timeout}
		_, err := p.Init(context.Background(), "res", "t")
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "process group was killed") {
			t.Fatalf("Init = %v, want ErrTimeout", err)
		}
		if !fileExists(filepath.Join(dir, "self.pid")) {
			continue
		}
		waitGone(t, readPid(t, filepath.Join(dir, "child.pid")))
		waitGone(t, readPid(t, filepath.Join(dir, "self.pid")))
		return
	}
	t.Fatalf("the plugin never started its child within %v", hangTimeouts[len(hangTimeouts)-1])
}

func TestCanceledContextKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `echo $$ > self.pid; sleep 1000`)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !fileExists(filepath.Join(dir, "self.pid")) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_, err := p.Init(ctx, "res", "t")
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Init = %v, want ErrTimeout wrapping context.Canceled", err)
	}
	waitGone(t, readPid(t, filepath.Join(dir, "self.pid")))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestBackgroundChildDoesNotHoldTheRun(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `
sleep 1000 &
echo $! > child.pid
echo '{"state_action": {"args": ["state"]}}'
`)}
	if _, err := p.Init(context.Background(), "res", "t"); err != nil {
		t.Fatalf("Init: %v", err)
	}
	waitGone(t, readPid(t, filepath.Join(dir, "child.pid")))
}

func TestOversizedOutput(t *testing.T) {
	for name, body := range map[string]string{
		"bounded":   `head -c 2000000 /dev/zero | tr '\0' a`,
		"endless":   `yes`,
		"stderr ok": `head -c 2000000 /dev/zero >&2; echo '{"state_action": {}}'`,
	} {
		t.Run(name, func(t *testing.T) {
			p := &Program{Path: script(t, t.TempDir(), "p", body+"\n")}
			_, err := p.Init(context.Background(), "res", "t")
			if name == "stderr ok" {
				if err != nil {
					t.Fatalf("Init = %v; a big stderr is only kept as a tail", err)
				}
				return
			}
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "stdout over") {
				t.Fatalf("Init = %v, want a protocol error for the output's size", err)
			}
		})
	}
}

func TestNotRunnable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope"), "not executable": plain, "a directory": dir, "empty": ""} {
		t.Run(name, func(t *testing.T) {
			_, err := (&Program{Path: path}).Init(context.Background(), "res", "t")
			if !errors.Is(err, ErrNotRunnable) {
				t.Fatalf("Init(%q) = %v, want ErrNotRunnable", path, err)
			}
		})
	}
	t.Run("missing image", func(t *testing.T) {
		p := &Program{Path: script(t, dir, "p", `echo '{"state_action": {"image": "helpers/state"}}'`)}
		_, err := p.State(context.Background(), "res", "t", nil)
		if !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), filepath.Join(dir, "helpers/state")) {
			t.Fatalf("State = %v, want ErrNotRunnable naming the image", err)
		}
	})
}

func TestImageAndEntrypoint(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script(t, filepath.Join(dir, "bin"), "state", `echo "{\"status\": \"VALID\", \"state\": {\"argv\": \"$*\", \"cwd\": \"$(pwd)\"}}"`)
	p := &Program{Path: script(t, dir, "p", `echo '{"state_action": {"image": "bin/state", "entrypoint": "check", "args": ["--all"]}}'`)}
	s, err := p.State(context.Background(), "res", "t", nil)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if s.State["argv"] != "check --all" || s.State["cwd"] != dir {
		t.Errorf("state = %v, want argv \"check --all\" run in %s", s.State, dir)
	}
}

func TestActionTimeout(t *testing.T) {
	for _, timeout := range hangTimeouts {
		dir := t.TempDir()
		p := &Program{Path: script(t, dir, "p", `
case "$1" in
"") echo '{"state_action": {"args": ["state"]}}' ;;
slow) echo "working" >&2; echo $$ > self.pid; sleep 1000 ;;
esac
`), ActionTimeout: timeout}
		err := p.Do(context.Background(), "res", "t", nil, Action{Name: "slow", Args: []string{"slow"}})
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrTimeout) || e.Step != "action slow" {
			t.Fatalf("Do = %v, want ErrTimeout at action slow", err)
		}
		if !fileExists(filepath.Join(dir, "self.pid")) {
			continue
		}
		if !strings.Contains(err.Error(), "(stderr: working)") {
			t.Errorf("Do = %v, want the stderr tail", err)
		}
		waitGone(t, readPid(t, filepath.Join(dir, "self.pid")))
		return
	}
	t.Fatalf("the action never started within %v", hangTimeouts[len(hangTimeouts)-1])
}

func TestCanceledBeforeStart(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `touch ran; echo '{"state_action": {}}'`)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Init(ctx, "res", "t"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Init = %v, want context.Canceled", err)
	}
	if fileExists(filepath.Join(dir, "ran")) {
		t.Errorf("Init ran the plugin with a canceled context")
	}
}

// An escaped process (its own session) holding stdout is beyond the
// group kill; the run still ends, after readerGrace.
func TestEscapedProcessDoesNotHangTheRun(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `
setsid sh -c 'echo $$ > escaped.tmp; mv escaped.tmp escaped.pid; exec sleep 1000' &
while [ ! -f escaped.pid ]; do sleep 0.01; done
echo '{"state_action": {}}'
`)}
	_, err := p.Init(context.Background(), "res", "t")
	pid := readPid(t, filepath.Join(dir, "escaped.pid"))
	escaped := alive(pid)
	if proc, err := os.FindProcess(pid); err == nil {
		_ = proc.Kill()
	}
	if err != nil {
		t.Fatalf("Init = %v", err)
	}
	if !escaped {
		t.Errorf("the process in its own session died with the group: the test tests nothing")
	}
}
