package e2e

import (
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// deployDemo deploys the demo: kv (one unit), app (two) related to kv, and
// logger related to app, then waits for the model to settle.
func deployDemo(t *testing.T, s *e2etest.Sandbox) {
	t.Helper()
	s.OK(t, "deploy", charmPath(t, "kv"))
	s.OK(t, "deploy", charmPath(t, "app"), "-n", "2")
	s.OK(t, "add-relation", "app", "kv")
	s.OK(t, "deploy", charmPath(t, "logger"))
	s.OK(t, "add-relation", "app", "logger")
	s.OK(t, "wait", "--timeout", "2m")
}

// checkDemoSettled checks the settled demo: three machines started, kv/0,
// app/0 and app/1 running, idle and active, and a logger unit running
// beside each app unit.
func checkDemoSettled(t *testing.T, doc *e2etest.StatusDoc) {
	t.Helper()
	if len(doc.Machines) != 3 {
		t.Errorf("%d machines, want 3:\n%v", len(doc.Machines), doc)
	}
	for id, m := range doc.Machines {
		if m.Life != "alive" || m.Agent != "started" || m.Instance == "" || m.Address == "" {
			t.Errorf("machine %s = %+v, want alive, agent started, with an instance and an address", id, m)
		}
	}
	if got, want := strings.Join(doc.Units(), " "), "app/0 app/1 kv/0 logger/0 logger/1"; got != want {
		t.Fatalf("units %s, want %s:\n%v", got, want, doc)
	}
	for _, name := range doc.Units() {
		u, _ := doc.Unit(name)
		if u.Life != "alive" || u.Agent != "idle" || u.State != "running" || u.Workload != "active" {
			t.Errorf("unit %s = %+v, want alive, agent idle, running, workload active", name, u)
		}
		if _, ok := doc.Machines[u.Machine]; !ok {
			t.Errorf("unit %s is on machine %q, which status does not list", name, u.Machine)
		}
	}
	principals := map[string]bool{}
	for _, name := range []string{"logger/0", "logger/1"} {
		u, _ := doc.Unit(name)
		p, ok := doc.Unit(u.Principal)
		switch {
		case !ok || !strings.HasPrefix(u.Principal, "app/"):
			t.Errorf("%s has principal %q, want an app unit", name, u.Principal)
		case p.Machine != u.Machine:
			t.Errorf("%s is on machine %s, its principal %s on %s: want the same", name, u.Machine, u.Principal, p.Machine)
		}
		principals[u.Principal] = true
	}
	if len(principals) != 2 {
		t.Errorf("the logger units' principals are %v, want app/0 and app/1", principals)
	}
	var kvMachine string
	if u, ok := doc.Unit("kv/0"); ok {
		kvMachine = u.Machine
	}
	for _, name := range []string{"app/0", "app/1"} {
		if u, _ := doc.Unit(name); u.Machine == kvMachine {
			t.Errorf("%s shares machine %s with kv/0: want a machine each", name, kvMachine)
		}
	}
}

var seenRE = regexp.MustCompile(`^(app/\d+) says: this page was seen (\d+) times? \(counter kept in kv at [0-9.:]+\)`)

// TestDemoFlow is make demo's flow, with the real binaries and the local
// provider: deploy and relate the demo charms, use the app, then tear it
// all down and check nothing is left running.
func TestDemoFlow(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	deployDemo(t, s)
	doc := s.Status(t)
	checkDemoSettled(t, doc)
	if t.Failed() {
		t.FailNow()
	}

	// The page's counter lives in kv: it goes up whichever app unit
	// serves it.
	last := 0
	for round := range 2 {
		for _, name := range []string{"app/0", "app/1"} {
			u, _ := doc.Unit(name)
			if !strings.HasPrefix(u.Address, s.Network+".") {
				t.Fatalf("%s is at %q, want an address of the sandbox's network %s", name, u.Address, s.Network)
			}
			url := "http://" + u.Address + ":8080/"
			code, body, err := e2etest.HTTPGet(url)
			if err != nil || code != 200 {
				t.Fatalf("round %d: GET %s = %d %q, %v; want 200", round, url, code, body, err)
			}
			m := seenRE.FindStringSubmatch(body)
			if m == nil || m[1] != name {
				t.Fatalf("round %d: GET %s = %q, want %q with the counter", round, url, body, name+" says: this page was seen N times")
			}
			n, _ := strconv.Atoi(m[2])
			if n <= last {
				t.Errorf("round %d: %s says the counter is %d after %d: want it to go up", round, name, n, last)
			}
			last = n
		}
	}

	// Tear down: the services (in the life rules' order, by the agents),
	// then the empty machines, which the provisioner releases.
	s.OK(t, "destroy-service", "app", "kv", "logger")
	s.OK(t, "wait", "--timeout", "2m")
	doc = s.Status(t)
	if len(doc.Services) != 0 || len(doc.Relations) != 0 || len(doc.Machines) != 3 {
		t.Fatalf("after destroy-service and wait, want no services and relations and 3 machines:\n%v", doc)
	}
	var ids []string
	for id, m := range doc.Machines {
		if len(m.Units) != 0 {
			t.Errorf("machine %s still has units %v", id, m.Units)
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s.OK(t, append([]string{"destroy-machine"}, ids...)...)
	s.WaitStatus(t, "an empty model", time.Minute, (*e2etest.StatusDoc).Empty)
	poll.Within(t, "the machine agents and the servers to exit", 30*time.Second, func() (bool, string) {
		left := e2etest.Procs(func(p e2etest.Proc) bool {
			cmd := strings.Join(p.Args, " ")
			return strings.Contains(cmd, s.Dir+"/") && !strings.Contains(cmd, "lifelined controller")
		})
		return len(left) == 0, e2etest.ProcList(left)
	})

	s.OK(t, "kill-controller")
	if left := e2etest.SandboxProcs(s.Dir); len(left) > 0 {
		t.Errorf("after kill-controller, processes of the sandbox still run:\n%s", e2etest.ProcList(left))
	}
}
