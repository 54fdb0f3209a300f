package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// jujuCharm copies the example charm name (one of those written as for
// Juju) into dir and returns the copy's path.
func jujuCharm(t *testing.T, dir, name string) string {
	t.Helper()
	root, err := e2etest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, name)
	if err := e2etest.CopyCharm(filepath.Join(root, "examples", "charms", name), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// statusLog is what ctl show-status-log UNIT --format json lists, as
// "TYPE STATUS: MESSAGE" lines.
func statusLog(t *testing.T, s *e2etest.Sandbox, unit string) []string {
	t.Helper()
	var entries []struct {
		Type    string `json:"type"`
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	out := s.OK(t, "show-status-log", unit, "--format", "json")
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("ctl show-status-log %s --format json: %v\n%s", unit, err, out)
	}
	var lines []string
	for _, e := range entries {
		lines = append(lines, e.Type+" "+e.Status+": "+e.Message)
	}
	return lines
}

// logged fails the test unless unit's status log holds the workload
// status want.
func logged(t *testing.T, s *e2etest.Sandbox, unit, want string) {
	t.Helper()
	lines := statusLog(t, s, unit)
	for _, l := range lines {
		if l == "workload "+want {
			return
		}
	}
	t.Errorf("ctl show-status-log %s:\n%s\nwant the workload status %q", unit, strings.Join(lines, "\n"), want)
}

// serviceVersion is the workload version ctl status shows for service.
func serviceVersion(t *testing.T, s *e2etest.Sandbox, service string) string {
	t.Helper()
	var doc struct {
		Services map[string]struct {
			Version string `json:"version"`
		} `json:"services"`
	}
	out := s.OK(t, "status", "--format", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ctl status --format json: %v\n%s", err, out)
	}
	return doc.Services[service].Version
}

// TestJujuCharm runs the charms written as for Juju (examples/charms
// token-source and token-sink: bash hooks with Juju's tools, variables,
// leadership hooks and an action) over the real binaries, one deployment
// through every step: two source units and a sink deploy (with a warning
// for each metadata key Lifeline ignores) and relate; the token flows to
// the sink and its acknowledgement back, each side reading the other's
// unit with relation-get and JUJU_REMOTE_UNIT; one source unit leads,
// marked in ctl status, and names itself in the leader settings, which
// the other reads in leader-settings-changed, and in the relation's
// application data, which the sink reads; its machine agent killed,
// the other unit is elected and runs leader-elected, and once the agent
// is back the old leader follows; a refresh runs upgrade-charm, which
// sets the new workload version; the action runs on both units with its
// parameter; removing everything leaves an empty model.
func TestJujuCharm(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	dir := t.TempDir()
	source, sink := jujuCharm(t, dir, "token-source"), jujuCharm(t, dir, "token-sink")
	units := []string{"token-source/0", "token-source/1"}
	var leader, follower string
	start := time.Now()

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"deploy and relate", func(t *testing.T) {
			r := s.Ctl("deploy", source, "-n", "2")
			if r.Code != 0 || !strings.Contains(r.Stderr, "metadata.yaml: maintainer: descriptive, ignored") ||
				!strings.Contains(r.Stderr, "metadata.yaml: series: ignored") {
				t.Fatalf("%v\nwant token-source deployed with warnings for maintainer and series", r)
			}
			s.OK(t, "deploy", sink)
			s.OK(t, "relate", "token-source", "token-sink")
			doc := s.WaitStatus(t, "the token acknowledged and a leader named on both sides", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
				var leaders []string
				for _, name := range units {
					if u, ok := doc.Unit(name); ok && u.Leader {
						leaders = append(leaders, name)
					}
				}
				if len(leaders) != 1 {
					return false
				}
				l, f := leaders[0], units[0]
				if f == l {
					f = units[1]
				}
				lu, _ := doc.Unit(l)
				fu, _ := doc.Unit(f)
				su, _ := doc.Unit("token-sink/0")
				return lu.Message == "leader, token-sink/0 acked abc" &&
					fu.Message == "follower of "+l+", token-sink/0 acked abc" &&
					su.Message == "tokens: token-source/0=abc token-source/1=abc; leader "+l
			})
			for _, name := range units {
				if u, _ := doc.Unit(name); u.Leader {
					leader = name
				} else {
					follower = name
				}
			}
			if v := serviceVersion(t, s, "token-source"); v != "1.0" {
				t.Errorf("token-source's version = %q, want 1.0 (application-version-set in install)", v)
			}
		}},
		{"leadership", func(t *testing.T) {
			if out := s.OK(t, "status"); !strings.Contains(out, leader+"*") || strings.Contains(out, follower+"*") {
				t.Errorf("ctl status:\n%s\nwant %s marked leader, %s not", out, leader, follower)
			}
			logged(t, s, leader, "maintenance: leader-elected")
			logged(t, s, follower, "maintenance: leader-settings-changed: "+leader+" leads")
		}},
		{"failover", func(t *testing.T) {
			m := s.Status(t).Services["token-source"].Units[leader].Machine
			pid := e2etest.ReadPID(t, filepath.Join(s.MachinesDir(), m, "pid"))
			args := agentArgs(t, pid)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			s.WaitStatus(t, follower+" elected, named by the sink", time.Minute, func(doc *e2etest.StatusDoc) bool {
				fu, _ := doc.Unit(follower)
				su, _ := doc.Unit("token-sink/0")
				return fu.Leader && fu.Message == "leader, token-sink/0 acked abc" &&
					strings.HasSuffix(su.Message, "; leader "+follower)
			})
			t.Logf("leadership moved %s after the kill", time.Since(killed).Round(100*time.Millisecond))
			logged(t, s, follower, "maintenance: leader-elected")

			// Back, the old leader follows: it runs leader-settings-changed
			// and reads the new leader's settings.
			restartAgent(t, s, m, args)
			s.WaitStatus(t, leader+" back as a follower", time.Minute, func(doc *e2etest.StatusDoc) bool {
				lu, _ := doc.Unit(leader)
				return !lu.Leader && lu.Agent == "idle" && lu.Message == "follower of "+follower+", token-sink/0 acked abc"
			})
			logged(t, s, leader, "maintenance: leader-settings-changed: "+follower+" leads")
			leader, follower = follower, leader
		}},
		{"refresh", func(t *testing.T) {
			newer := jujuCharm(t, t.TempDir(), "token-source")
			if err := os.WriteFile(filepath.Join(newer, "release"), []byte("1.1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s.OK(t, "refresh", "token-source", "--path", newer)
			s.OK(t, "wait", "--timeout", "2m")
			for _, name := range units {
				logged(t, s, name, "maintenance: upgrade-charm: release 1.1")
			}
			if v := serviceVersion(t, s, "token-source"); v != "1.1" {
				t.Errorf("token-source's version = %q, want 1.1 (application-version-set in upgrade-charm)", v)
			}
			doc := s.Status(t)
			for _, name := range units {
				want := "follower of " + leader + ", token-sink/0 acked abc"
				if name == leader {
					want = "leader, token-sink/0 acked abc"
				}
				if u, _ := doc.Unit(name); u.Message != want {
					t.Errorf("after the refresh %s says %q, want %q (config-changed after upgrade-charm)", name, u.Message, want)
				}
			}
		}},
		{"action", func(t *testing.T) {
			// Juju's actions.yaml says nothing of safety: here the action
			// awaits an admin's approval, another admin's than the
			// requester's.
			ada := newUser(t, s, "ada", "admin")
			id := runOp(t, s, "token-source", "token", "upper=true")
			s.OK(t, "--config", ada, "approve", id)
			s.OK(t, "execute", id)
			doc := waitOpEnd(t, s, id, time.Minute)
			if doc.State != "done" || len(doc.Tasks) != 2 {
				t.Fatalf("token on token-source ended %+v, want done on both units", doc)
			}
			for _, task := range doc.Tasks {
				want := map[string]string{"token": "ABC", "unit": task.Unit, "leader": leader, "is-leader": "False"}
				if task.Unit == leader {
					want["is-leader"] = "True"
				}
				for k, v := range want {
					if task.Results[k] != v {
						t.Errorf("token on %s: results %v, want %s=%s", task.Unit, task.Results, k, v)
					}
				}
			}
		}},
		{"teardown", func(t *testing.T) {
			s.OK(t, "remove-application", "token-source", "token-sink")
			s.OK(t, "wait", "--timeout", "2m")
			doc := s.Status(t)
			if len(doc.Services) != 0 || len(doc.Relations) != 0 {
				t.Fatalf("after remove-application and wait, want no services and relations:\n%v", doc)
			}
			var ids []string
			for id := range doc.Machines {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			s.OK(t, append([]string{"remove-machine"}, ids...)...)
			s.WaitStatus(t, "an empty model", time.Minute, (*e2etest.StatusDoc).Empty)
			poll.Within(t, "the machine agents to exit", 30*time.Second, func() (bool, string) {
				left := e2etest.Procs(func(p e2etest.Proc) bool {
					cmd := strings.Join(p.Args, " ")
					return strings.Contains(cmd, s.Dir+"/") && !strings.Contains(cmd, "lifelined controller")
				})
				return len(left) == 0, e2etest.ProcList(left)
			})
		}},
	}
	for _, step := range steps {
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
		t.Logf("%s done at %s", step.name, time.Since(start).Round(100*time.Millisecond))
	}
}
