package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// updateGolden rewrites the expected documents under testdata/status
// from what ctl answers, when set (UPDATE_GOLDEN=1 go test ...): review
// the diff before committing it.
var updateGolden = os.Getenv("UPDATE_GOLDEN") != ""

// golden compares got with testdata/status/name, or writes it there.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "status", name)
	if updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// stableStatus is a status document without what changes from run to
// run: the model's revision, the controllers' addresses, the times.
func stableStatus(t *testing.T, out string) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	delete(doc, "revision")
	delete(doc, "controllers")
	delete(doc, "model_time")
	delete(doc, "controller")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sinceless(doc)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// sinceless drops every "since" of a decoded document, and the other
// times (agent_since, workload_since, time).
func sinceless(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "time" || strings.HasSuffix(k, "since") {
				delete(x, k)
				continue
			}
			x[k] = sinceless(e)
		}
	case []any:
		for i, e := range x {
			x[i] = sinceless(e)
		}
	}
	return v
}

// testStatusSelectors runs ctl status with every form of selector over
// the model TestCommandsAgainstAController built (kv/0 on machine 0,
// kv/1 on 1, app/0 on 2, app/1 on 0, logger with no units, machines 3 to
// 5 empty; app related to kv and to logger) and compares the documents.
func testStatusSelectors(t *testing.T, s *sandbox) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"service.json", []string{"kv"}},
		{"unit.json", []string{"app/1"}},
		{"machine.json", []string{"machine", "0"}},
		{"union.json", []string{"kv/1", "2", "logger"}},
	} {
		out := s.ok(t, append([]string{"status", "--format", "json"}, tt.args...)...)
		golden(t, tt.name, stableStatus(t, out))
	}
	if a, b := s.ok(t, "status", "--format", "json", "3"), s.ok(t, "status", "--format", "json", "machine", "3"); stableStatus(t, a) != stableStatus(t, b) {
		t.Errorf("ctl status 3 and ctl status machine 3 differ:\n%s\n%s", a, b)
	}
	out := s.ok(t, "status", "app/1")
	for _, want := range []string{"app/1 ", "Machine ", "app:db kv:server"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl status app/1 said:\n%s\nwant %q in it", out, want)
		}
	}
	if strings.Contains(out, "kv/0") {
		t.Errorf("ctl status app/1 said:\n%s\nwant no kv/0 in it", out)
	}
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"nope"}, "ctl: service nope not found"},
		{[]string{"kv", "kv/9"}, "ctl: unit kv/9 not found"},
		{[]string{"machine", "42"}, "ctl: machine 42 not found"},
	} {
		r := s.fails(t, 1, []string{tt.msg}, append([]string{"status"}, tt.args...)...)
		if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v\nwant one line on stderr, nothing on stdout", r)
		}
	}
	s.fails(t, 2, []string{`selector "Bad/x"`}, "status", "Bad/x")

	// The formats for scripts, over a selection.
	if out := s.ok(t, "status", "kv", "-o", "jsonpath={.services.kv.units.*.machine}"); out != "0\n1\n" {
		t.Errorf("ctl status kv -o jsonpath={.services.kv.units.*.machine} = %q, want kv/0's and kv/1's machines, 0 and 1", out)
	}
	if out := s.ok(t, "status", "-o", "jsonpath=$.relations[?(@.scope == 'container')].endpoints[*].service"); out != "app\nlogger\n" {
		t.Errorf("jsonpath of the container relation's services = %q, want app and logger", out)
	}
	if out := s.ok(t, "status", "-o", "jsonpath=$.schema_version", "machine", "1"); out != "1\n" {
		t.Errorf("jsonpath $.schema_version = %q, want 1", out)
	}
	s.fails(t, 1, []string{"ctl: jsonpath $.services.nope selects nothing"}, "status", "-o", "jsonpath=$.services.nope")
	s.fails(t, 2, []string{"jsonpath"}, "status", "-o", "jsonpath=$.[")
	s.fails(t, 2, []string{"-o and --format"}, "status", "-o", "json", "--format", "yaml")
	golden(t, "line.txt", s.ok(t, "status", "--format", "line"))
	if a, b := s.ok(t, "status", "-o", "line", "app"), s.ok(t, "status", "--format", "line", "app"); a != b || !strings.HasPrefix(a, "app/0 service=app machine=2 ") {
		t.Errorf("ctl status -o line app = %q, --format line %q; want the same, app/0 first", a, b)
	}

	// The header; no colour on a pipe, whatever says so or not.
	out = s.ok(t, "status")
	if first, _, _ := strings.Cut(out, "\n"); !regexp.MustCompile(`^Controller c-\S+ at 127\.0\.0\.1:\d+, version \S+, model time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, user admin$`).MatchString(first) {
		t.Errorf("ctl status's first line = %q, want the controller, its address and version, the model time and the user", first)
	}
	for _, args := range [][]string{{"status"}, {"status", "--no-color"}} {
		if out := s.ok(t, args...); strings.Contains(out, "\x1b") {
			t.Errorf("ctl %v on a pipe wrote escapes:\n%q", args, out)
		}
	}
}

// testShow runs ctl show-unit and ctl show-machine over the same model
// and compares their documents.
func testShow(t *testing.T, s *sandbox) {
	golden(t, "show-unit.json", stableStatus(t, s.ok(t, "show-unit", "app/1", "--format", "json")))
	golden(t, "show-machine.json", stableStatus(t, s.ok(t, "show-machine", "0", "--format", "json")))
	var doc map[string]any
	out := s.ok(t, "show-unit", "kv/0")
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("show-unit kv/0 (yaml): %v\n%s", err, out)
	}
	if u := object(t, doc, "kv/0"); u["machine"] != "0" || u["service"] != "kv" {
		t.Errorf("show-unit kv/0 = %v, want kv's unit on machine 0", u)
	}
	s.fails(t, 1, []string{"ctl: unit kv/9 not found"}, "show-unit", "kv/9")
	s.fails(t, 1, []string{"ctl: machine 42 not found"}, "show-machine", "42")
	s.fails(t, 2, []string{`--format "tabular"`}, "show-unit", "kv/0", "--format", "tabular")
	s.fails(t, 2, nil, "show-machine")
}
