package hooks_test

import (
	"context"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
)

// fakeAction is an in-memory hooks.ActionContext: a fakeContext running
// an action with parameters params.
type fakeAction struct {
	*fakeContext
	params     map[string]any
	results    []map[string]string
	failed     []string
	actionLogs []string
	checkpoint map[string]string
}

func newFakeAction() *fakeAction {
	return &fakeAction{
		fakeContext: newFakeContext(),
		params: map[string]any{
			"name":     "nightly",
			"compress": true,
			"steps":    float64(20),
			"target":   map[string]any{"host": "10.0.0.9", "port": float64(22)},
			"tags":     []any{"a", "b"},
		},
		checkpoint: map[string]string{"step": "7", "phase": "copy"},
	}
}

func (f *fakeAction) ActionParams(context.Context) (map[string]any, error) {
	defer f.enter()()
	return f.params, nil
}

func (f *fakeAction) SetActionResults(_ context.Context, results map[string]string) error {
	defer f.enter()()
	f.results = append(f.results, results)
	return nil
}

func (f *fakeAction) FailAction(_ context.Context, message string) error {
	defer f.enter()()
	f.failed = append(f.failed, message)
	return nil
}

func (f *fakeAction) ActionLog(_ context.Context, message string) error {
	defer f.enter()()
	f.actionLogs = append(f.actionLogs, message)
	return nil
}

func (f *fakeAction) Checkpoint(context.Context) (map[string]string, error) {
	defer f.enter()()
	return maps.Clone(f.checkpoint), nil
}

func (f *fakeAction) SetCheckpoint(_ context.Context, values map[string]string) error {
	defer f.enter()()
	maps.Copy(f.checkpoint, values)
	return nil
}

// TestActionTools: the action tools in an action, each rule and message.
func TestActionTools(t *testing.T) {
	a := startAgent(t)
	tests := []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
		check    func(t *testing.T, f *fakeAction)
	}{
		{name: "action-get string", args: []string{"action-get", "name"}, wantOut: "nightly\n"},
		{name: "action-get bool", args: []string{"action-get", "compress"}, wantOut: "true\n"},
		{name: "action-get number", args: []string{"action-get", "steps"}, wantOut: "20\n"},
		{name: "action-get nested", args: []string{"action-get", "target.host"}, wantOut: "10.0.0.9\n"},
		{name: "action-get map as yaml", args: []string{"action-get", "target"}, wantOut: "host: 10.0.0.9\nport: 22\n"},
		{name: "action-get list as yaml", args: []string{"action-get", "tags"}, wantOut: "- a\n- b\n"},
		{name: "action-get missing", args: []string{"action-get", "nothing.here"}},
		{name: "action-get past a value", args: []string{"action-get", "name.more"}},
		{name: "action-get json", args: []string{"action-get", "--format=json", "target"}, wantOut: `{"host":"10.0.0.9","port":22}` + "\n"},
		{name: "action-get json missing", args: []string{"action-get", "--format=json", "nothing"}, wantOut: "null\n"},
		{name: "action-get all json", args: []string{"action-get", "--format=json"},
			wantOut: `{"compress":true,"name":"nightly","steps":20,"tags":["a","b"],"target":{"host":"10.0.0.9","port":22}}` + "\n"},
		{name: "action-get too many", args: []string{"action-get", "a", "b"}, wantErr: `action-get: unexpected argument "b": see action-get --help` + "\n", wantCode: 2},

		{name: "action-set", args: []string{"action-set", "path=/b/n.json", "size.bytes=12", "note=a=b", "path=/b/m.json"},
			check: wantResults(map[string]string{"path": "/b/m.json", "size.bytes": "12", "note": "a=b"})},
		{name: "action-set empty value", args: []string{"action-set", "note="}, check: wantResults(map[string]string{"note": ""})},
		{name: "action-set reserved", args: []string{"action-set", "stdout=x"}, wantErr: `action-set: key "stdout" is reserved for the action's output: use another` + "\n", wantCode: 2, check: wantResults()},
		{name: "action-set reserved nested", args: []string{"action-set", "stderr.x=1"}, wantErr: `action-set: key "stderr.x" is reserved for the action's output: use another` + "\n", wantCode: 2},
		{name: "action-set clash", args: []string{"action-set", "a=1", "a.b=2"}, wantErr: `action-set: keys "a" and "a.b" clash: a cannot hold both a value and keys` + "\n", wantCode: 2, check: wantResults()},
		{name: "action-set bad key", args: []string{"action-set", "Path=1"}, wantErr: `action-set: bad key "Path": lowercase letters, digits and "-", dots between parts` + "\n", wantCode: 2},
		{name: "action-set dash at the end", args: []string{"action-set", "a-.b=1"}, wantErr: `action-set: bad key "a-.b": lowercase letters, digits and "-", dots between parts` + "\n", wantCode: 2},
		{name: "action-set empty part", args: []string{"action-set", "a..b=1"}, wantErr: `action-set: bad key "a..b": lowercase letters, digits and "-", dots between parts` + "\n", wantCode: 2},
		{name: "action-set no equals", args: []string{"action-set", "a"}, wantErr: `action-set: bad argument "a": want KEY=VALUE` + "\n", wantCode: 2},
		{name: "action-set nothing", args: []string{"action-set"}, wantErr: "action-set: nothing to set: give KEY=VALUE...\n", wantCode: 2},

		{name: "action-fail", args: []string{"action-fail", "disk", "full"}, check: wantFailed("disk full")},
		{name: "action-fail without reason", args: []string{"action-fail"}, check: wantFailed("action failed without reason given")},
		{name: "action-log", args: []string{"action-log", "step", "3", "of", "9"}, check: wantActionLogs("step 3 of 9")},
		{name: "action-log nothing", args: []string{"action-log"}, wantErr: "action-log: no message\n", wantCode: 2},

		{name: "checkpoint-get key", args: []string{"checkpoint-get", "step"}, wantOut: "7\n"},
		{name: "checkpoint-get missing", args: []string{"checkpoint-get", "nothing"}},
		{name: "checkpoint-get all", args: []string{"checkpoint-get"}, wantOut: "phase: copy\nstep: 7\n"},
		{name: "checkpoint-get json", args: []string{"checkpoint-get", "--format=json"}, wantOut: `{"phase":"copy","step":"7"}` + "\n"},
		{name: "checkpoint-get json missing", args: []string{"checkpoint-get", "--format=json", "x"}, wantOut: "null\n"},
		{name: "checkpoint-set", args: []string{"checkpoint-set", "step=8", "done.files=100"},
			check: wantCheckpoint(map[string]string{"step": "8", "phase": "copy", "done.files": "100"})},
		{name: "checkpoint-set bad key", args: []string{"checkpoint-set", "STEP=8"}, wantErr: `checkpoint-set: bad key "STEP": lowercase letters, digits and "-", dots between parts` + "\n", wantCode: 2,
			check: wantCheckpoint(map[string]string{"step": "7", "phase": "copy"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAction()
			h := a.begin(t, f)
			out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, tt.args...)
			if out != tt.wantOut || errOut != tt.wantErr || code != tt.wantCode {
				t.Errorf("%s = stdout %q, stderr %q, exit %d; want %q, %q, %d",
					strings.Join(tt.args, " "), out, errOut, code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

// TestActionToolsInAHook: in a hook, every action tool fails with one
// line and changes nothing; the hook tools work in an action.
func TestActionToolsInAHook(t *testing.T) {
	a := startAgent(t)
	f := newFakeContext()
	h := a.begin(t, f)
	for _, args := range [][]string{{"action-get"}, {"action-set", "a=1"}, {"action-fail"}, {"action-log", "x"}, {"checkpoint-get"}, {"checkpoint-set", "a=1"}} {
		out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, args...)
		want := args[0] + ": not running an action: only a charm's actions may call it\n"
		if out != "" || errOut != want || code != 1 {
			t.Errorf("%s in a hook = stdout %q, stderr %q, exit %d; want %q, exit 1", strings.Join(args, " "), out, errOut, code, want)
		}
	}
	if f.calls != 0 {
		t.Errorf("the action tools in a hook called the Context %d times, want 0", f.calls)
	}
	act := newFakeAction()
	h = a.begin(t, act)
	if out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, "config-get", "port"); out != "8080\n" || code != 0 {
		t.Errorf("config-get port in an action = %q, %q, exit %d; want 8080", out, errOut, code)
	}
}

func TestValidActionKey(t *testing.T) {
	for key, want := range map[string]bool{
		"a": true, "path": true, "size.bytes": true, "a-b.c-d.e1": true, "0": true,
		"": false, "A": false, "a_b": false, "-a": false, "a-": false, "a.": false, ".a": false, "a..b": false,
		"é": false, strings.Repeat("a", 256): true, strings.Repeat("a", 257): false,
	} {
		if got := hooks.ValidActionKey(key); got != want {
			t.Errorf("ValidActionKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func wantResults(want ...map[string]string) func(*testing.T, *fakeAction) {
	return func(t *testing.T, f *fakeAction) {
		t.Helper()
		if !reflect.DeepEqual(f.results, want) {
			t.Errorf("SetActionResults calls = %v, want %v", f.results, want)
		}
	}
}

func wantFailed(want ...string) func(*testing.T, *fakeAction) {
	return func(t *testing.T, f *fakeAction) {
		t.Helper()
		if !reflect.DeepEqual(f.failed, want) {
			t.Errorf("FailAction calls = %q, want %q", f.failed, want)
		}
	}
}

func wantActionLogs(want ...string) func(*testing.T, *fakeAction) {
	return func(t *testing.T, f *fakeAction) {
		t.Helper()
		if !reflect.DeepEqual(f.actionLogs, want) {
			t.Errorf("ActionLog calls = %q, want %q", f.actionLogs, want)
		}
	}
}

func wantCheckpoint(want map[string]string) func(*testing.T, *fakeAction) {
	return func(t *testing.T, f *fakeAction) {
		t.Helper()
		if !reflect.DeepEqual(f.checkpoint, want) {
			t.Errorf("checkpoint = %v, want %v", f.checkpoint, want)
		}
	}
}
