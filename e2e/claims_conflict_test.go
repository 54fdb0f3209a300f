package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// writeClaimsCharm writes a charm of metadata.yaml meta (and config.yaml
// config, when set), without hooks, and returns its directory.
func writeClaimsCharm(t *testing.T, name, meta, config string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"metadata.yaml": meta}
	if config != "" {
		files["config.yaml"] = config
	}
	for file, content := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestClaimsConflictRollsBackTheChangedUnit: two units of two services on
// one machine; a refresh of one to a charm claiming the port the other
// holds is refused on the machine: the refreshed unit keeps its revision
// and reports the conflict, its rollout fails and reverts it, which takes
// it out of error; the other unit is untouched throughout.
func TestClaimsConflictRollsBackTheChangedUnit(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	meta := func(name, port string) string {
		return "name: " + name + "\nsummary: claims a port\ndescription: for tests\nhost:\n  ports: [\"" + port + "\"]\n"
	}
	s.OK(t, "deploy", writeClaimsCharm(t, "holder", meta("holder", "8080/tcp"), ""))
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("holder/0")
	if !ok || u.Machine == "" {
		t.Fatalf("holder/0 = %+v (found %v), want it on a machine", u, ok)
	}
	s.OK(t, "deploy", writeClaimsCharm(t, "web", meta("web", "9000/tcp"), ""), "--to", u.Machine)
	s.OK(t, "wait", "--timeout", "2m")

	s.OK(t, "refresh", "web", "--path", writeClaimsCharm(t, "web2", meta("web", "8080/tcp"), ""))
	const conflict = "conflict: port 8080/tcp is claimed by holder/0: kept revision 1"
	doc := waitRollout(t, s, "web", "the refresh failed and reverted", 3*time.Minute, rolledTo(3))
	if doc.Reverting != 2 {
		t.Errorf("web's rollout = %+v, want revision 3 reverting 2", doc)
	}
	if out := s.OK(t, "revisions", "web", "--show", "3"); !strings.Contains(out, "auto-revert") {
		t.Errorf("ctl revisions web --show 3:\n%s\nwant an auto-revert", out)
	}
	if log := s.OK(t, "show-status-log", "web/0"); !strings.Contains(log, conflict) {
		t.Errorf("ctl show-status-log web/0:\n%s\nwant %q", log, conflict)
	}
	st := s.Status(t)
	if w, _ := st.Unit("web/0"); w.Agent != "idle" || w.State != "running" {
		t.Errorf("web/0 after the revert = %+v, want idle, running (out of error without resolved)", w)
	}
	if h, _ := st.Unit("holder/0"); h.Agent != "idle" || h.State != "running" {
		t.Errorf("holder/0 = %+v, want idle, running", h)
	}
	if log := s.OK(t, "show-status-log", "holder/0"); strings.Contains(log, "conflict") {
		t.Errorf("ctl show-status-log holder/0:\n%s\nwant no conflict", log)
	}
}

// chainMeta claims two files in a shared directory (config dir): of its
// three units, chain/1 writes a path chain/0 writes and a path chain/2
// writes, each with its own content; chain/0 and chain/2 share none.
const chainMeta = `name: chain
summary: claims files in a chain
description: for tests
host:
  files:
    - path: '{{ config.dir }}/{% if unit_name == "chain/0" %}a0{% else %}p1{% endif %}'
      template: "{{ unit_name }}\n"
    - path: '{{ config.dir }}/{% if unit_name == "chain/2" %}a2{% else %}q0{% endif %}'
      template: "{{ unit_name }}\n"
`

// TestClaimsConflictChain: three new units deployed together onto one
// machine in a chain of conflicts are weighed in one pass: the middle
// one, with two conflicts, is not started; the ends, with one each, run
// and write their files.
func TestClaimsConflictChain(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "add-machine")
	var m string
	for id := range s.Status(t).Machines {
		m = id
	}
	if m == "" {
		t.Fatal("ctl add-machine made no machine")
	}
	shared := t.TempDir()
	charm := writeClaimsCharm(t, "chain", chainMeta, "options:\n  dir:\n    type: string\n    default: /nonexistent\n")
	s.OK(t, "deploy", charm, "-n", "3", "--to", m, "--service-config", "dir="+shared)
	s.WaitStatus(t, "chain/0 and chain/2 running, chain/1 not started", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
		a, _ := doc.Unit("chain/0")
		b, _ := doc.Unit("chain/1")
		c, _ := doc.Unit("chain/2")
		return a.Agent == "idle" && a.State == "running" && c.Agent == "idle" && c.State == "running" &&
			b.Agent == "error" && strings.HasPrefix(b.Message, "conflict: file "+shared+"/q0 is claimed by chain/0 with other content") &&
			strings.HasSuffix(b.Message, "(and 1 more): not started")
	})
	for name, want := range map[string]string{"a0": "chain/0\n", "q0": "chain/0\n", "p1": "chain/2\n", "a2": "chain/2\n"} {
		if b, err := os.ReadFile(filepath.Join(shared, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
}
