package faults

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// partitionPresence is the controller's --presence-timeout in
// TestPartitionedAgents.
const partitionPresence = 3 * time.Second

// TestPartitionedAgents cuts machine agents off from the controller by
// stopping them (SIGSTOP): status shows them and their units lost, while
// the model moves on without them (a configuration change the others
// follow). Let go again (SIGCONT), the same processes resume from their
// local state: they report, catch up with the change, and their units keep
// their state (no hook that ran runs again, but config-changed for the
// change).
func TestPartitionedAgents(t *testing.T) {
	skipWhenSoaking(t)
	runPartitionedAgents(t, currentSizes())
}

func runPartitionedAgents(t *testing.T, sz sizes) {
	r := newRun(t, "machine agents partitioned (SIGSTOP) and healed (SIGCONT)", sz)
	n, k := sz.partitionUnits, sz.partitioned
	r.size("units", n)
	r.size("agents partitioned", k)
	r.size("presence timeout (s)", int(partitionPresence.Seconds()))
	r.size("partitioned for (s)", int((partitionPresence + sz.partitionFor).Seconds()))
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce(), presence: partitionPresence})
	c := f.startController(t)
	f.OK(t, "deploy", testCharm("fnode"), "-n", strconv.Itoa(n))
	all := unitNames("fnode", 0, n)
	doc := f.waitModel(t, "every unit running", 10*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return settled(doc) && count(doc, "fnode", isRunning) == n
	})
	checkUnitsSettled(t, doc, all, "marker=initial")

	// The partitioned: k units' machines, by their one agent process.
	perm := rand.Perm(n)
	cut := map[string]bool{}     // units
	machines := map[string]int{} // machine → its agent's pid
	agents := e2etest.MachineAgents(c.MachinesDir())
	for _, i := range perm[:k] {
		name := "fnode/" + strconv.Itoa(i)
		u, _ := doc.Unit(name)
		cut[name] = true
		if pids := agents[u.Machine]; len(pids) == 1 {
			machines[u.Machine] = pids[0]
		} else {
			t.Fatalf("machine %s has agent processes %v, want one", u.Machine, pids)
		}
	}
	defer func() { // never leave one stopped
		for _, pid := range machines {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	stopped := time.Now()
	for m, pid := range machines {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		r.inject("machine agent stopped (SIGSTOP)")
		t.Logf("stopped machine %s's agent (pid %d)", m, pid)
	}
	f.waitModel(t, "the partitioned machines and their units lost", partitionPresence+30*time.Second, func(doc *e2etest.StatusDoc) bool {
		for m := range machines {
			if doc.Machines[m].Agent != "lost" {
				return false
			}
		}
		return count(doc, "", func(u e2etest.UnitDoc) bool { return u.Agent == "lost" }) == k
	})
	r.recovered("partition: from SIGSTOP to status lost", time.Since(stopped))
	r.checked("the partitioned machines and their units, and only they, shown lost")

	// The model moves on without them: the rollout worker passes over
	// the units whose machine's agent is not connected.
	f.OK(t, "config", "fnode", "marker=moved-on")
	doc = f.waitModel(t, "the other units configured", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return count(doc, "fnode", func(u e2etest.UnitDoc) bool { return u.Message == "marker=moved-on" }) == n-k
	})
	for name := range cut {
		if u, _ := doc.Unit(name); u.Message != "marker=initial" || u.State != "running" || u.Life != "alive" {
			t.Errorf("partitioned unit %s = %+v, want alive, running, still marker=initial", name, u)
		}
	}
	time.Sleep(time.Until(stopped.Add(partitionPresence + sz.partitionFor)))

	healed := time.Now()
	for m, pid := range machines {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Logf("continued machine %s's agent", m)
	}
	f.waitModel(t, "the partitioned agents present", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
		for m := range machines {
			if doc.Machines[m].Agent != "started" {
				return false
			}
		}
		return true
	})
	r.recovered("partition: from SIGCONT to the machine agent present", time.Since(healed))
	doc = f.waitModel(t, "every unit idle and configured", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return settled(doc) && count(doc, "fnode", func(u e2etest.UnitDoc) bool { return u.Message == "marker=moved-on" }) == n
	})
	r.recovered("partition: from SIGCONT to its units caught up (config-changed run, idle)", time.Since(healed))
	checkUnitsSettled(t, doc, all, "marker=moved-on")
	checkOneAgentPerMachine(t, doc, c.MachinesDir())
	agents = e2etest.MachineAgents(c.MachinesDir())
	for m, pid := range machines {
		if !slices.Equal(agents[m], []int{pid}) {
			t.Errorf("machine %s's agent processes are %v, want the one stopped and continued, %d", m, agents[m], pid)
		}
	}
	for _, name := range all {
		u, _ := doc.Unit(name)
		counts, err := hookCounts(c.MachinesDir(), u.Machine, name)
		if err != nil {
			t.Errorf("unit %s: %v", name, err)
			continue
		}
		if counts["install"] != 1 || counts["start"] != 1 || counts["config-changed"] != 2 {
			t.Errorf("unit %s ran its hooks %v times, want install and start once, config-changed twice", name, counts)
		}
	}
	if !t.Failed() {
		r.checked("after healing: the same agent processes resumed; every unit idle, running and configured; install and start ran once, config-changed once more")
	}
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}
