package faults

import (
	"context"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestMachineAgentsKilled kills a random machine agent with SIGKILL every
// few seconds, restarting each as systemd would, while fsrv and fnode
// units are deployed (fnode's hooks also failing on purpose), related
// (fnode to fsrv, and to the subordinate fsub), and destroyed. The model
// converges at each step (every fnode unit sees every fsrv unit and the
// other way round, each fnode unit has its fsub), every hook failure is
// retried to success or shown as an error state (and then resolved, as an
// operator would), nothing dying goes without a reported blocker, and at
// the end nothing is left and the invariants held at every revision.
func TestMachineAgentsKilled(t *testing.T) {
	skipWhenSoaking(t)
	runMachineAgentsKilled(t, currentSizes())
}

func runMachineAgentsKilled(t *testing.T, sz sizes) {
	r := newRun(t, "machine agents killed during deploy, relate and destroy", sz)
	srv, cli := sz.chaosServers, sz.chaosClients
	r.size("units", srv+2*cli)
	r.size("machines", srv+cli)
	r.size("kill every (ms)", int(sz.chaosEvery.Milliseconds()))
	r.size("hook fail-percent (fnode)", sz.chaosFailPercent)
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce()})
	c := f.startController(t)
	obs := startObserver(t, f.st, r)
	resolver := &errorResolver{f: f, r: r}

	start := time.Now()
	f.OK(t, "deploy", testCharm("fsrv"), "-n", strconv.Itoa(srv))
	chaos := startAgentChaos(f.Sandbox, c.MachinesDir(), r, sz, obs)
	f.abort = chaos.err
	stopped := false
	defer func() {
		if !stopped {
			chaos.stop(t)
		}
	}()
	f.OK(t, "deploy", testCharm("fnode"), "-n", strconv.Itoa(cli), "--service-config", "fail-percent="+strconv.Itoa(sz.chaosFailPercent))
	f.OK(t, "deploy", testCharm("fsub"))
	f.waitModel(t, "every unit running", 20*time.Minute, func(doc *e2etest.StatusDoc) bool {
		resolver.resolve(t, doc)
		return len(doc.Units()) == srv+cli && convergedFor(doc, func(name string, u e2etest.UnitDoc) bool {
			return u.Message == "marker=initial"
		})
	})
	r.recovered("deploy under agent kills: to every unit running", time.Since(start))

	start = time.Now()
	f.OK(t, "add-relation", "fnode", "fsrv")
	f.OK(t, "add-relation", "fnode", "fsub")
	want := map[string]string{"fnode": "db: " + strconv.Itoa(srv), "fsrv": "db: " + strconv.Itoa(cli), "fsub": "host: 1"}
	related := func(name string, u e2etest.UnitDoc) bool {
		svc, _, _ := strings.Cut(name, "/")
		return u.Message == want[svc]
	}
	doc := f.waitModel(t, "every unit related", 30*time.Minute, func(doc *e2etest.StatusDoc) bool {
		resolver.resolve(t, doc)
		return len(doc.Units()) == srv+2*cli && convergedFor(doc, related)
	})
	r.recovered("relate under agent kills: to every unit seeing all its related units", time.Since(start))
	var names []string
	names = append(names, unitNames("fsrv", 0, srv)...)
	names = append(names, unitNames("fnode", 0, cli)...)
	subs := map[string][]string{} // principal → its fsub units
	for _, name := range doc.Units() {
		if strings.HasPrefix(name, "fsub/") {
			names = append(names, name)
			u, _ := doc.Unit(name)
			subs[u.Principal] = append(subs[u.Principal], name)
			if p, ok := doc.Unit(u.Principal); !ok || !strings.HasPrefix(u.Principal, "fnode/") || p.Machine != u.Machine {
				t.Errorf("subordinate %s has principal %q (found %v) on machine %s: want an fnode unit on its machine", name, u.Principal, ok, u.Machine)
			}
		}
	}
	for _, p := range unitNames("fnode", 0, cli) {
		if len(subs[p]) != 1 {
			t.Errorf("%s has subordinates %v, want one fsub unit", p, subs[p])
		}
	}
	sort.Strings(names)
	if got := doc.Units(); strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("units %s, want %s", compact(got), compact(names))
	}
	r.checked("deploy and relate: exactly the units deployed (and a subordinate each), each seeing every unit it is related to")

	// Once the kills pause, every agent reports idle with the same
	// picture.
	chaos.pause()
	doc = f.waitModel(t, "every unit idle and related", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		resolver.resolve(t, doc)
		return settled(doc) && len(doc.Units()) == srv+2*cli && convergedFor(doc, related)
	})
	checkOneAgentPerMachine(t, doc, c.MachinesDir())
	chaos.resume()

	start = time.Now()
	f.OK(t, "destroy-service", "fnode", "fsrv", "fsub")
	f.waitModel(t, "the services gone", 30*time.Minute, func(doc *e2etest.StatusDoc) bool {
		resolver.resolve(t, doc)
		return len(doc.Services) == 0 && len(doc.Relations) == 0 && settled(doc)
	})
	r.recovered("destroy under agent kills: to every service gone", time.Since(start))
	chaos.stop(t)
	stopped = true
	r.checked("no dying entity without a reported blocker at any status poll")

	// Every agent back: one each; then the machines go.
	doc = f.waitModel(t, "every machine agent back", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		for _, m := range doc.Machines {
			if m.Agent != "started" {
				return false
			}
		}
		return len(doc.Machines) == srv+cli
	})
	checkOneAgentPerMachine(t, doc, c.MachinesDir())
	var ids []string
	for id := range doc.Machines {
		ids = append(ids, id)
	}
	f.OK(t, append([]string{"destroy-machine"}, ids...)...)
	f.waitModel(t, "an empty model", 10*time.Minute, (*e2etest.StatusDoc).Empty)
	poll.Within(t, "no process of the machines", time.Minute, func() (bool, string) {
		var left []e2etest.Proc
		for _, m := range ids {
			left = append(left, e2etest.MachineProcs(c.MachinesDir(), m)...)
		}
		return len(left) == 0, e2etest.ProcList(left)
	})
	f.waitNoEntities(t)
	r.checked("after the destroy: one agent per machine; then no entity left in etcd and no process of any machine")
	obs.report(t, nil)
	if !t.Failed() {
		r.checked("every hook failure retried to success or shown as an error state")
	}
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// convergedFor says whether nothing is dying and every unit runs with
// its agent idle, or lost (its machine's agent killed a moment ago: its
// last report stands), and ok holds for it.
func convergedFor(doc *e2etest.StatusDoc, ok func(name string, u e2etest.UnitDoc) bool) bool {
	if len(doc.Stranded()) > 0 || !noneDying(doc) {
		return false
	}
	for _, name := range doc.Units() {
		u, _ := doc.Unit(name)
		if u.State != "running" || u.Agent != "idle" && u.Agent != "lost" || !ok(name, u) {
			return false
		}
	}
	return true
}

// noneDying says whether every entity is alive.
func noneDying(doc *e2etest.StatusDoc) bool {
	for _, m := range doc.Machines {
		if m.Life != "alive" {
			return false
		}
	}
	for _, svc := range doc.Services {
		if svc.Life != "alive" {
			return false
		}
		for _, u := range svc.Units {
			if u.Life != "alive" {
				return false
			}
		}
	}
	for _, r := range doc.Relations {
		if r.Life != "alive" {
			return false
		}
	}
	return true
}

// errorResolver answers units in an error state as an operator would,
// with ctl resolved, once it has seen the error shown in ctl status.
type errorResolver struct {
	f        *fixture
	r        *run
	resolved map[string]time.Time
}

func (e *errorResolver) resolve(t *testing.T, doc *e2etest.StatusDoc) {
	if e.resolved == nil {
		e.resolved = map[string]time.Time{}
	}
	for _, name := range doc.Units() {
		u, _ := doc.Unit(name)
		if u.Agent != "error" || !strings.HasSuffix(u.State, "-error") || time.Since(e.resolved[name]) < 10*time.Second {
			continue // not in an error state: its hook is retried
		}
		if !strings.HasPrefix(u.Message, "hook failed: ") {
			t.Errorf("unit %s is in error with message %q, want hook failed: \"HOOK\"", name, u.Message)
		}
		t.Logf("unit %s shows %q (%s): ctl resolved", name, u.Message, u.State)
		e.r.inject("ctl resolved of a unit in an error state")
		e.resolved[name] = time.Now()
		_ = e.f.Ctl("resolved", name)
	}
}

// waitNoEntities waits until etcd holds no entity key: cleanup items may
// outlive the entities they were for by a pass of the cleaner.
func (f *fixture) waitNoEntities(t *testing.T) {
	t.Helper()
	poll.Within(t, "no entity keys in etcd", time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		snap, err := f.st.Snapshot(ctx)
		if err != nil {
			return false, err.Error()
		}
		keys := snap.EntityKeys()
		return len(keys) == 0, compact(keys)
	})
}
