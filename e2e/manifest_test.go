package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/manifest/plugin/plugintest"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// demoManifest is the demo as a manifest: kv, app with its port templated
// from kv's and a variable, the logger, their relations, and a file (the
// example plugin) holding kv's unit's address, templated from kv's state
// once it is applied. extra is appended under resources.
func demoManifest(t *testing.T, dir, plugins string, offset int, extra string) string {
	t.Helper()
	src := fmt.Sprintf(`name: demo
variables: {offset: %d}
resources:
  kv:
    type: service
    config: {charm: %s, units: 1, config: {port: 7070}}
  app:
    type: service
    dependencies: {kv: kv}
    config:
      charm: %s
      units: 1
      config: {port: "{{ kv.state.config.port + offset }}"}
  logger:
    type: service
    config: {charm: %s}
  app-kv:
    type: relation
    config: {endpoints: ["app:db", "kv:server"]}
  app-logger:
    type: relation
    config: {endpoints: ["app", "logger"]}
  kv-address:
    type: exec:%s/file
    dependencies: {kv: kv}
    config:
      path: %s/kv-address
      content: "{{ kv.state.units[0].address }}:{{ kv.state.config.port }}"
%s`, offset, charmPath(t, "kv"), charmPath(t, "app"), charmPath(t, "logger"), plugins, dir, extra)
	path := filepath.Join(dir, fmt.Sprintf("demo-%d-%d.yaml", offset, len(extra)))
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestManifestApply: the demo manifest applied from empty converges, its
// plugin resource STALE → write → VALID with kv's address; a second plan
// has no changes; a variable's change plans one action and applies as a
// revision; saved plans whose inputs changed (one made against the empty
// model, one whose manifest was edited) are refused; a viewer's apply is
// refused before any change; a failed apply prunes nothing; prune destroys
// only what the manifest owns, a service's units before their machine;
// export round-trips to no actions; a plugin whose state stays STALE
// halts apply naming it.
func TestManifestApply(t *testing.T) {
	t.Parallel()
	needCharms(t)
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := plugintest.Build(plugins, plugintest.File); err != nil {
		t.Fatal(err)
	}
	if _, err := plugintest.WriteStuck(plugins, "stuck"); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	s.Bootstrap(t)
	demo := demoManifest(t, dir, plugins, 1010, "")
	emptyPlan := filepath.Join(dir, "empty.plan")
	s.OK(t, "plan", demo, "-o", emptyPlan)

	t.Run("a viewer is refused before any change", func(t *testing.T) {
		vic := newUser(t, s, "vic", "viewer")
		oneLine(t, s.Ctl("--config", vic, "apply", demo), 1,
			"ctl: user vic (viewer) may not apply a manifest: applying changes the model, which needs the operator role; nothing was changed")
		if st := s.Status(t); len(st.Services) != 0 {
			t.Errorf("after a viewer's apply the model has services %v, want none", st.Services)
		}
	})
	t.Run("apply from empty", func(t *testing.T) {
		out := s.OK(t, "apply", demo)
		for _, want := range []string{
			"kv (service): applying: + create service kv",
			"kv (service): VALID after its actions",
			"app (service): VALID after its actions",
			"app-kv (relation): VALID after its actions",
			"kv-address (exec:" + plugins + "/file): applying: * write",
			"kv-address (exec:" + plugins + "/file): VALID after its actions",
			"Apply complete: 6 resources VALID",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl apply:\n%s\nwant %q", out, want)
			}
		}
		st := s.Status(t)
		addr := st.Machines[st.Services["kv"].Units["kv/0"].Machine].Address
		got, err := os.ReadFile(filepath.Join(dir, "kv-address"))
		if err != nil || addr == "" || string(got) != addr+":7070" {
			t.Errorf("kv-address holds %q (%v), want kv/0's address %q and :7070", got, err, addr)
		}
	})
	t.Run("second plan has no changes", func(t *testing.T) {
		out := s.OK(t, "plan", demo, "--detailed-exitcode")
		if !strings.Contains(out, "No changes") {
			t.Errorf("ctl plan after apply:\n%s\nwant no changes", out)
		}
	})
	t.Run("stale plans refused", func(t *testing.T) {
		s.Fails(t, 1, "is stale: changed since it was made: ", "apply", emptyPlan)
		edited := filepath.Join(dir, "edited.yaml")
		src, err := os.ReadFile(demo)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(edited, src, 0o644); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "edited.plan")
		s.OK(t, "plan", edited, "-o", p)
		if err := os.WriteFile(edited, append(src, "# edited\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Fails(t, 1, "changed since it was made: the manifest", "apply", p)
	})
	t.Run("one change, one action, one revision", func(t *testing.T) {
		changed := demoManifest(t, dir, plugins, 1011, "")
		r := s.Ctl("plan", changed, "--detailed-exitcode")
		var acts []string
		for _, l := range strings.Split(r.Stdout, "\n") {
			if strings.HasPrefix(l, "  ") {
				acts = append(acts, strings.TrimSpace(l))
			}
		}
		if r.Code != 2 || len(acts) != 1 || acts[0] != "~ set config of app: port: 8080 → 8081" {
			t.Errorf("%v\nwant exit 2 and one action, app's port 8080 → 8081", r)
		}
		p := filepath.Join(dir, "one.plan")
		s.OK(t, "plan", changed, "-o", p)
		s.OK(t, "apply", p)
		if out := s.OK(t, "revisions", "app"); !strings.Contains(out, "port 8080→8081") {
			t.Errorf("ctl revisions app:\n%s\nwant the change as a revision", out)
		}
		s.OK(t, "plan", changed, "--detailed-exitcode")
	})
	// cache is a service of one unit on a machine of the manifest's own.
	withCache := demoManifest(t, dir, plugins, 1011, "  box:\n    type: machine\n    config: {count: 1}\n"+
		"  cache:\n    type: service\n    dependencies: {box: box}\n"+
		"    config: {charm: "+charmPath(t, "kv")+", units: 1, to: \"{{ box.state.machines[0] }}\"}\n")
	t.Run("no prune after a failure", func(t *testing.T) {
		s.OK(t, "apply", withCache)
		stuck := demoManifest(t, dir, plugins, 1011, "  stuck:\n    type: exec:"+plugins+"/stuck\n    config: {}\n")
		r := s.Ctl("apply", stuck, "--prune", "--keep-going")
		if r.Code != 1 || !strings.Contains(r.Stdout, "Prune skipped: the apply did not fully succeed, so nothing was destroyed.") ||
			strings.Contains(r.Stdout, "prune: -") {
			t.Errorf("%v\nwant exit status 1, the prune skipped and nothing destroyed", r)
		}
		if _, ok := s.Status(t).Services["cache"]; !ok {
			t.Error("cache went: a failed apply pruned")
		}
	})
	t.Run("prune destroys only what it owns, units before machines", func(t *testing.T) {
		s.OK(t, "deploy", charmPath(t, "logger"), "hand")
		s.OK(t, "apply", withCache)
		st := s.Status(t)
		box := st.Services["cache"].Units["cache/0"].Machine
		without := demoManifest(t, dir, plugins, 1011, "")
		out := s.OK(t, "plan", without, "--prune")
		for _, want := range []string{"- destroy service cache\n", "- destroy machine " + box + "\n", "Plan: 0 to create, 0 to change, 2 to destroy."} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl plan --prune:\n%s\nwant %q", out, want)
			}
		}
		if strings.Contains(out, "hand") {
			t.Errorf("ctl plan --prune:\n%s\nwant nothing of the service deployed by hand", out)
		}
		out = s.OK(t, "apply", without, "--prune")
		i, j := strings.Index(out, "prune: - destroy service cache"), strings.Index(out, "prune: - destroy machine "+box)
		if i < 0 || j < i {
			t.Errorf("ctl apply --prune:\n%s\nwant the service destroyed, then the machine", out)
		}
		s.WaitStatus(t, "cache and its machine gone", 2*time.Minute, func(d *e2etest.StatusDoc) bool {
			_, cache := d.Services["cache"]
			_, hand := d.Services["hand"]
			_, m := d.Machines[box]
			return !cache && hand && !m
		})
	})
	t.Run("export round-trips", func(t *testing.T) {
		s.OK(t, "destroy-service", "hand")
		s.OK(t, "wait", "--timeout", "2m")
		exported := filepath.Join(dir, "export.yaml")
		s.OK(t, "export", "-o", exported, "--charm-dir", filepath.Dir(charmPath(t, "kv")), "--name", "demo")
		if out := s.OK(t, "plan", exported, "--detailed-exitcode"); !strings.Contains(out, "No changes") {
			data, _ := os.ReadFile(exported)
			t.Errorf("ctl plan of the export:\n%s\nwant no changes; export:\n%s", out, data)
		}
	})
	t.Run("a plugin still STALE halts apply", func(t *testing.T) {
		stuck := demoManifest(t, dir, plugins, 1011, "  stuck:\n    type: exec:"+plugins+"/stuck\n    config: {}\n")
		s.Fails(t, 1, "resource stuck is still STALE after fix", "apply", stuck)
	})
}
