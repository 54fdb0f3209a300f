package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRevisionsAndRollback: with real agents, two configuration changes
// make revisions 2 and 3, listed with what changed and by whom; a
// rollback restores the configuration before (the kv server moves back
// to that port, through config-changed), a rollback --to 1 the deployed
// one; a rollback to the spec the service has, to a revision never
// made, and by a viewer are refused and change nothing. A refresh to
// another charm with another port, rolled back, brings back both the
// unit's charm directory and its port.
func TestRevisionsAndRollback(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "wait", "--timeout", "2m")
	kv := unitAddress(t, s, "kv/0")
	answers(t, "http://"+kv+":7070/health", "ok")

	s.OK(t, "config", "kv", "port=7071")
	s.OK(t, "config", "kv", "port=7072")
	s.OK(t, "wait", "--timeout", "2m")
	answers(t, "http://"+kv+":7072/health", "ok")

	table := s.OK(t, "revisions", "kv")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "Rev") {
		t.Fatalf("ctl revisions kv:\n%s\nwant a header and 3 revisions", table)
	}
	for i, want := range [][]string{{"3 ", "config", "admin", "port 7071→7072"}, {"2 ", "config", "admin", "port 7070→7071"}, {"1 ", "deploy", "kv-"}} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("ctl revisions kv row %d = %q, want it to say %q", i+1, lines[i+1], w)
			}
		}
	}
	var doc struct {
		Head      int64 `json:"head"`
		Revisions []struct {
			Number int64  `json:"number"`
			By     string `json:"by"`
		} `json:"revisions"`
	}
	if err := json.Unmarshal([]byte(s.OK(t, "revisions", "kv", "--format", "json")), &doc); err != nil || doc.Head != 3 || len(doc.Revisions) != 3 {
		t.Errorf("ctl revisions kv --format json = %+v, %v; want head 3 and 3 revisions", doc, err)
	}
	if show := s.OK(t, "revisions", "kv", "--show", "2"); !strings.Contains(show, "port  7071") || !strings.Contains(show, "port 7070→7071") {
		t.Errorf("ctl revisions kv --show 2:\n%s\nwant port 7071 and its change from 7070", show)
	}

	// Back to the previous revision: its port, through config-changed.
	if out := s.OK(t, "rollback", "kv"); !strings.Contains(out, "rolled kv back to revision 2: revision 4 (port 7072→7071)") {
		t.Errorf("ctl rollback kv said %q", out)
	}
	s.OK(t, "wait", "--timeout", "2m")
	answers(t, "http://"+kv+":7071/health", "ok")
	s.OK(t, "rollback", "kv", "--to", "1")
	s.OK(t, "wait", "--timeout", "2m")
	answers(t, "http://"+kv+":7070/health", "ok")
	if got := s.OK(t, "config", "kv", "port"); strings.TrimSpace(got) != "7070" {
		t.Errorf("ctl config kv port after the rollback to 1 = %q, want 7070", got)
	}

	// Refusals.
	s.Fails(t, 1, "ctl: service kv is already at that spec (revision 5)", "rollback", "kv", "--to", "1")
	s.Fails(t, 1, "ctl: service kv has no revision 42: it keeps revisions 1 to 5", "rollback", "kv", "--to", "42")
	s.Fails(t, 1, "ctl: service kv has no revision 42", "revisions", "kv", "--show", "42")
	s.Fails(t, 1, "service nope not found", "revisions", "nope")
	s.Fails(t, 2, "--to -1", "rollback", "kv", "--to", "-1")
	newUser(t, s, "vic", "viewer")
	vic := filepath.Join(s.Dir, "vic.json")
	if out := s.OK(t, "--config", vic, "revisions", "kv"); !strings.Contains(out, "rollback to 1") {
		t.Errorf("a viewer's ctl revisions kv:\n%s\nwant the rollback listed", out)
	}
	s.Fails(t, 1, "may not call", "--config", vic, "rollback", "kv")
	if n := strings.Count(s.OK(t, "revisions", "kv"), "\n"); n != 6 {
		t.Errorf("after the refusals ctl revisions kv has %d lines, want a header and 5 revisions", n)
	}
	answers(t, "http://"+kv+":7070/health", "ok")

	// Another charm and another port in one refresh; the rollback brings
	// both back on the unit's host: the charm directory and the port.
	older := olderCharm(t, "kv")
	charmConfig := filepath.Join(unitDir(s, s.Status(t).Services["kv"].Units["kv/0"].Machine, "kv/0"), "charm", "config.yaml")
	legacy := func() bool {
		b, err := os.ReadFile(charmConfig)
		if err != nil {
			t.Fatalf("the unit's charm: %v", err)
		}
		return strings.Contains(string(b), "legacy:")
	}
	s.OK(t, "refresh", "kv", "--path", older, "--service-config", "port=7073")
	s.OK(t, "wait", "--timeout", "2m")
	answers(t, "http://"+kv+":7073/health", "ok")
	if !legacy() {
		t.Errorf("after the refresh %s is the old charm's, want the refreshed one (its legacy option)", charmConfig)
	}
	s.OK(t, "rollback", "kv")
	s.OK(t, "wait", "--timeout", "2m")
	answers(t, "http://"+kv+":7070/health", "ok")
	if legacy() {
		t.Errorf("after the rollback %s still has the refreshed charm's legacy option", charmConfig)
	}
	// The agent's "running upgrade-charm hook" can be folded into the
	// next status when the hook is quick; the hook's own workload status
	// is logged every time.
	if log := s.OK(t, "show-status-log", "kv/0"); strings.Count(log, "upgraded the charm") < 2 {
		t.Errorf("ctl show-status-log kv/0:\n%s\nwant upgrade-charm run for the refresh and the rollback", log)
	}
}
