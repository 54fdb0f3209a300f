package faults

import (
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestControllerFailover runs two controllers of one model on the etcd
// cluster, their local machines in one shared directory, and kills
// (SIGKILL) the one running the singleton workers while units run: the
// other must lead within 15 s, the machine agents must reconnect to it,
// and the model must keep working through it — new units get machines
// (the provisioner) and a destroyed unit's machine is removed — with one
// agent per machine throughout. The killed controller, started again,
// joins as a standby.
func TestControllerFailover(t *testing.T) {
	skipWhenSoaking(t)
	runControllerFailover(t, currentSizes())
}

// failoverTakeover bounds the takeover: the survivor leads within it.
const failoverTakeover = 15 * time.Second

func runControllerFailover(t *testing.T, sz sizes) {
	r := newRun(t, "the controller running the singleton workers killed (SIGKILL)", sz)
	n, more := 4, 2
	if sz.form == "full" {
		n, more = 30, 10
	}
	r.size("controllers", 2)
	r.size("units before the kill", n)
	r.size("units added after", more)
	f := newFixture(t, fixtureOptions{monitor: true, presence: 5 * time.Second})
	machines := filepath.Join(f.Dir, "machines")
	f.AddMachinesDir(machines)
	ctrls := []*e2etest.Controller{
		f.startController(t, "--machines-dir", machines),
		f.startController(t, "--machines-dir", machines),
	}
	f.OK(t, "deploy", testCharm("fnode"), "-n", strconv.Itoa(n))
	doc := f.waitModel(t, "every unit running, two controllers", 10*time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, _, led := doc.Leader()
		return settled(doc) && count(doc, "fnode", isRunning) == n && len(doc.Controllers) == 2 && led
	})
	checkOneAgentPerMachine(t, doc, machines)
	_, addrs, _ := doc.Leader()
	var leader, survivor *e2etest.Controller
	for _, c := range ctrls {
		if slices.Contains(addrs, c.Addr()) {
			leader = c
		} else {
			survivor = c
		}
	}
	if leader == nil || survivor == nil {
		t.Fatalf("the leader's addresses %v are not one of the controllers' (%s, %s)", addrs, ctrls[0].Addr(), ctrls[1].Addr())
	}

	killed := time.Now()
	leader.Kill(t)
	r.inject("the leading controller killed (SIGKILL)")
	t.Logf("killed controller %d (%s), the leader", leader.Index, leader.Addr())
	viaSurvivor := func(what string, timeout time.Duration, cond func(*e2etest.StatusDoc) bool) *e2etest.StatusDoc {
		var last *e2etest.StatusDoc
		poll.Within(t, what, timeout, func() (bool, string) {
			doc, err := f.TryStatusVia(survivor.ClientConfig())
			if err != nil {
				return false, err.Error()
			}
			last = doc
			return cond(doc), ""
		})
		return last
	}
	viaSurvivor("the survivor leading, alone", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, addrs, led := doc.Leader()
		return led && len(doc.Controllers) == 1 && slices.Contains(addrs, survivor.Addr())
	})
	took := time.Since(killed)
	r.recovered("failover: from the kill to the survivor leading", took)
	if took > failoverTakeover {
		t.Errorf("the survivor took %s to lead, want at most %s", took.Round(100*time.Millisecond), failoverTakeover)
	} else {
		r.checked("the survivor led within 15 s of the kill")
	}
	// The agents' presence, held by the killed controller, lapses within
	// the presence timeout; they show started again once connected to the
	// survivor.
	time.Sleep(time.Until(killed.Add(f.opts.presence + time.Second)))
	viaSurvivor("every machine agent back, through the survivor", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
		for _, m := range doc.Machines {
			if m.Agent != "started" {
				return false
			}
		}
		return true
	})
	r.recovered("failover: from the kill to every machine agent present through the survivor", time.Since(killed))
	r.checked("every machine agent reconnected to the survivor")

	// The model keeps working: the provisioner (now the survivor's) gives
	// new units machines, and removes a destroyed unit's machine.
	doomed := "fnode/0"
	u, _ := doc.Unit(doomed)
	f.OK(t, "add-unit", "fnode", "-n", strconv.Itoa(more))
	f.OK(t, "destroy-unit", doomed)
	f.waitModel(t, "the destroyed unit gone", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit(doomed)
		return !ok
	})
	f.OK(t, "destroy-machine", u.Machine)
	doc = f.waitModel(t, "the new units running, the destroyed unit's machine removed", 10*time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, gone := doc.Machines[u.Machine]
		return settled(doc) && count(doc, "fnode", isRunning) == n+more-1 && !gone
	})
	checkOneAgentPerMachine(t, doc, machines)
	r.checked("after the failover: new units got machines and ran, a destroyed unit's machine was removed, one agent per machine")

	// The killed controller comes back as a standby.
	leader.Start(t)
	viaSurvivor("the restarted controller back, as a standby", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, addrs, led := doc.Leader()
		return led && len(doc.Controllers) == 2 && slices.Contains(addrs, survivor.Addr())
	})
	r.checked("the killed controller, restarted, rejoined as a standby")
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}
