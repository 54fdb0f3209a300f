package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planManifest is the demo with app's port templated from kv's and a
// variable, its charms the repository's demo charms.
func planManifest(t *testing.T) string {
	t.Helper()
	charms, err := filepath.Abs("../../examples/charms")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "demo.yaml")
	src := fmt.Sprintf(`
name: demo
variables: {replicas: 1, offset: 1010}
resources:
  kv:
    type: service
    config: {charm: %[1]s/kv, units: 1, config: {port: 7070}}
  app:
    type: service
    dependencies: {kv: kv}
    config:
      charm: %[1]s/app
      units: "{{ replicas }}"
      config: {port: "{{ kv.state.config.port + offset }}"}
  logger:
    type: service
    config: {charm: %[1]s/logger}
  app-kv:
    type: relation
    config: {endpoints: ["app:db", "kv:server"]}
  app-logger:
    type: relation
    config: {endpoints: ["app", "logger"]}
`, charms)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// actionLines are the lines of a plan's output that are actions.
func actionLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// TestPlanAgainstAController plans the demo against a real controller:
// from empty, after deploying the same by hand, and with one change.
func TestPlanAgainstAController(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
	defer s.ctl(t, "kill-controller")
	path := planManifest(t)
	charms, _ := filepath.Abs("../../examples/charms")

	t.Run("from empty", func(t *testing.T) {
		out := s.ok(t, "plan", path)
		for _, want := range []string{
			"kv (service): STALE\n  + create service kv: charm " + charms + "/kv (sha256 ",
			"1 unit, config port=7070\n",
			"app (service): STALE\n  + create service app: charm " + charms + "/app",
			"1 unit, config port=8080\n",
			"app-kv (relation): STALE\n  + add relation \"app:db\" \"kv:server\"\n",
			"Plan: 5 to create, 0 to change, 0 to destroy.\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl plan said:\n%s\nwant %q in it", out, want)
			}
		}
		r := s.ctl(t, "plan", path, "--detailed-exitcode")
		if r.code != 2 || r.stderr != "" {
			t.Errorf("%v\nwant exit status 2 and nothing on stderr", r)
		}
	})
	t.Run("saved", func(t *testing.T) {
		saved := filepath.Join(t.TempDir(), "demo.plan")
		s.ok(t, "plan", path, "-o", saved, "--var", "replicas=3")
		data, err := os.ReadFile(saved)
		if err != nil {
			t.Fatal(err)
		}
		var pf struct {
			Version        int               `json:"version"`
			ManifestPath   string            `json:"manifest_path"`
			ManifestSHA256 string            `json:"manifest_sha256"`
			Vars           map[string]any    `json:"variables"`
			ModelRevision  int64             `json:"model_revision"`
			Inputs         map[string]string `json:"inputs"`
			Resources      []struct {
				Name    string `json:"name"`
				Status  string `json:"status"`
				Actions []struct {
					Kind  string `json:"kind"`
					Count any    `json:"count"`
				} `json:"actions"`
			} `json:"resources"`
		}
		if err := json.Unmarshal(data, &pf); err != nil {
			t.Fatalf("plan file: %v\n%s", err, data)
		}
		if pf.Version != 1 || pf.ManifestPath != path || len(pf.ManifestSHA256) != 64 || pf.ModelRevision == 0 ||
			pf.Vars["replicas"] != float64(3) || pf.Inputs["service/kv"] != "absent" || len(pf.Inputs["charm/kv"]) != 64 {
			t.Errorf("plan file:\n%s", data)
		}
		if len(pf.Resources) != 5 || pf.Resources[1].Name != "app" || pf.Resources[1].Actions[0].Count != float64(3) {
			t.Errorf("plan file's resources:\n%s", data)
		}
	})
	t.Run("deployed by hand: no changes", func(t *testing.T) {
		s.ok(t, "deploy", charms+"/kv")
		s.ok(t, "deploy", charms+"/app")
		s.ok(t, "deploy", charms+"/logger")
		s.ok(t, "add-relation", "app:db", "kv:server")
		s.ok(t, "add-relation", "app", "logger")
		out := s.ok(t, "plan", path, "--detailed-exitcode")
		if !strings.Contains(out, "No changes") || !strings.Contains(out, "Plan: 0 to create, 0 to change, 0 to destroy.") {
			t.Errorf("ctl plan said:\n%s\nwant no changes", out)
		}
		for _, name := range []string{"kv (service)", "app (service)", "logger (service)", "app-kv (relation)", "app-logger (relation)"} {
			if !strings.Contains(out, name+": VALID\n") {
				t.Errorf("ctl plan said:\n%s\nwant %s VALID", out, name)
			}
		}
	})
	t.Run("one change, one action", func(t *testing.T) {
		r := s.ctl(t, "plan", path, "--var", "offset=1011", "--detailed-exitcode")
		if r.code != 2 {
			t.Fatalf("%v\nwant exit status 2", r)
		}
		if got, want := actionLines(r.stdout), []string{"~ set config of app: port: 8080 → 8081"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("actions %q, want %q", got, want)
		}
		if !strings.Contains(r.stdout, "Plan: 0 to create, 1 to change, 0 to destroy.") {
			t.Errorf("ctl plan said:\n%s\nwant 1 to change", r.stdout)
		}
		vars := filepath.Join(t.TempDir(), "vars.yaml")
		if err := os.WriteFile(vars, []byte("replicas: 2\noffset: 999\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := s.ok(t, "plan", path, "--var-file", vars, "--var", "offset=1010")
		if got, want := actionLines(out), []string{"+ add 1 unit to app"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("actions %q, want %q", got, want)
		}
	})
	t.Run("problems", func(t *testing.T) {
		dir := t.TempDir()
		cycle := filepath.Join(dir, "cycle.yaml")
		if err := os.WriteFile(cycle, []byte("name: c\nresources:\n  a: {type: machine, dependencies: {x: b}}\n  b: {type: machine, dependencies: {x: a}}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.fails(t, 1, []string{"ctl: " + cycle + ": dependency cycle: a → b → a"}, "plan", cycle)
		bad := filepath.Join(dir, "bad.yaml")
		src := fmt.Sprintf("name: c\nresources:\n  kv:\n    type: service\n    config: {charm: %s/kv, units: many, config: {port: x, colour: red}}\n", charms)
		if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		s.fails(t, 1, []string{"ctl: " + bad + " has 3 problems:\n",
			"  resources.kv.config.config.colour: is not allowed\n",
			"  resources.kv.config.config.port: want integer, got string\n",
			"  resources.kv.config.units: want integer, got string\n"}, "plan", bad)
		s.fails(t, 1, []string{"no such file"}, "plan", filepath.Join(dir, "none.yaml"))
	})
	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"plan"}, {"plan", path, "--var", "novalue"}, {"plan", path, "--var-file", "/no/such/file"}, {"plan", "a", "b"}} {
			if r := s.ctl(t, args...); r.code != 2 || !strings.Contains(r.stderr, "usage: ctl plan FILE") {
				t.Errorf("%v\nwant exit status 2 and the usage", r)
			}
		}
	})
}
