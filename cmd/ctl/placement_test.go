package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestPlacementClaims places units whose charm claims port 8080/tcp on a
// machine that has one already: ctl add-unit --to and ctl deploy --to
// say why they are refused and exit 1; --force places them.
func TestPlacementClaims(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
	defer s.ok(t, "kill-controller")
	if out := s.ok(t, "deploy", "testdata/web"); !strings.Contains(out, "web/0 on machine 0") {
		t.Fatalf("ctl deploy web said:\n%s\nwant web/0 on machine 0", out)
	}

	r := s.fails(t, 1, []string{"ctl: cannot place web/1 on machine 0: port 8080/tcp is claimed by web/0 there\n"}, "add-unit", "web", "--to", "0")
	if strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("ctl add-unit web --to 0 said %q, want one line", r.stderr)
	}
	s.fails(t, 1, []string{"ctl: cannot place web2/0 on machine 0: port 8080/tcp is claimed by web/0 there\n"}, "deploy", "testdata/web", "web2", "--to", "0")
	if doc := s.statusJSON(t); len(object(t, doc, "services")) != 1 {
		t.Errorf("after a refused deploy, status has services %v, want web alone", object(t, doc, "services"))
	}
	s.fails(t, 2, []string{"--force places units on machine --to"}, "add-unit", "web", "--force")

	if out := s.ok(t, "add-unit", "web", "--to", "0", "--force"); !strings.Contains(out, "on machine 0") {
		t.Errorf("ctl add-unit web --to 0 --force said %q, want a unit on machine 0", out)
	}
	if out := s.ok(t, "deploy", "testdata/web", "web2", "--to", "0", "--force"); !strings.Contains(out, "web2/") || !strings.Contains(out, "on machine 0") {
		t.Errorf("ctl deploy web web2 --to 0 --force said %q, want its unit on machine 0", out)
	}
}
