package faults

import (
	"context"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestEtcdLeaderLoss, under two controllers of the model, kills the etcd
// cluster's leader (SIGKILL) twice during a deploy (within two seconds of it, while the provisioner starts
// the machines, and once a third to two thirds of the units run), and twice
// during a destroy of half the units (at random points of it), bringing
// each killed member back after a few seconds. Everything completes: the units are exactly
// those deployed and not destroyed, each on a machine of its own with one
// agent process, each hook of theirs that must run once ran once, the
// destroyed units' machines can be destroyed and leave no process, and the
// invariants held at every revision.
func TestEtcdLeaderLoss(t *testing.T) {
	skipWhenSoaking(t)
	runEtcdLeaderLoss(t, currentSizes())
}

// etcdDownFor is how long a killed etcd member stays down.
const etcdDownFor = 3 * time.Second

func runEtcdLeaderLoss(t *testing.T, sz sizes) {
	r := newRun(t, "etcd leader killed during deploy and destroy", sz)
	n, d := sz.leaderDeploy, sz.leaderDestroy
	r.size("units deployed", n)
	r.size("units destroyed", d)
	r.size("etcd members", 3)
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce()})
	// Two controllers, their local machines in one
	// directory: either may lead (run the provisioner) after a kill.
	machinesDir := filepath.Join(f.Dir, "machines")
	f.AddMachinesDir(machinesDir)
	f.startController(t, "--machines-dir", machinesDir)
	f.startController(t, "--machines-dir", machinesDir)
	r.size("controllers", 2)

	f.OK(t, "deploy", testCharm("fnode"), "-n", strconv.Itoa(n))
	start := time.Now()
	time.Sleep(rand.N(2 * time.Second))
	f.killEtcdLeader(t, r, "deploy")
	// The second kill once a third to two thirds of the units run.
	at := n/3 + rand.IntN(n/3+1)
	f.waitModel(t, "a part of the units running", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return count(doc, "fnode", isRunning) >= at
	})
	last := f.killEtcdLeader(t, r, "deploy")
	all := unitNames("fnode", 0, n)
	doc := f.waitModel(t, "every unit running", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return settled(doc) && count(doc, "fnode", isRunning) == n
	})
	r.recovered("deploy: from the deploy to every unit running", time.Since(start))
	r.recovered("deploy: from the last kill to every unit running", time.Since(last))
	checkUnitsSettled(t, doc, all, "marker=initial")
	checkOneAgentPerMachine(t, doc, machinesDir)
	f.checkHooksOnce(t, doc, machinesDir, all)
	if t.Failed() {
		t.FailNow()
	}
	r.checked("deploy: exactly the units deployed, each running on a machine of its own with one agent process")
	r.checked("deploy: install, config-changed and start ran once on every unit")

	// Destroy a random half: the first kill before a quarter of them are
	// gone, the second before three quarters.
	perm := rand.Perm(n)
	var victims, kept []string
	machines := map[string]bool{}
	for i, k := range perm {
		name := "fnode/" + strconv.Itoa(k)
		if i < d {
			victims = append(victims, name)
			u, _ := doc.Unit(name)
			machines[u.Machine] = true
		} else {
			kept = append(kept, name)
		}
	}
	f.OK(t, append([]string{"destroy-unit"}, victims...)...)
	start = time.Now()
	first, second := rand.IntN(d/4+1), d/4+rand.IntN(d/2)
	f.waitModel(t, "a few of the destroyed units gone", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return isGone(doc, victims) >= first
	})
	f.killEtcdLeader(t, r, "destroy")
	f.waitModel(t, "more of the destroyed units gone", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return isGone(doc, victims) >= second
	})
	last = f.killEtcdLeader(t, r, "destroy")
	doc = f.waitModel(t, "the destroyed units gone", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return isGone(doc, victims) == d && settled(doc)
	})
	r.recovered("destroy: from the destroy to the units gone", time.Since(start))
	r.recovered("destroy: from the last kill to the units gone", time.Since(last))
	checkUnitsSettled(t, doc, kept, "marker=initial")
	checkOneAgentPerMachine(t, doc, machinesDir)
	f.checkHooksOnce(t, doc, machinesDir, kept)
	for m := range machines {
		if got := doc.Machines[m]; len(got.Units) != 0 {
			t.Errorf("machine %s of a destroyed unit = %+v, want no units", m, got)
		}
	}
	r.checked("destroy: exactly the units not destroyed are left, running, their hooks run once; the destroyed units' machines empty")

	// Their machines go too, and nothing of them keeps running.
	var ids []string
	for m := range machines {
		ids = append(ids, m)
	}
	f.OK(t, append([]string{"destroy-machine"}, ids...)...)
	doc = f.waitModel(t, "the empty machines removed", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
		for _, m := range ids {
			if _, ok := doc.Machines[m]; ok {
				return false
			}
		}
		return true
	})
	if len(doc.Machines) != n-d {
		t.Errorf("%d machines left, want %d", len(doc.Machines), n-d)
	}
	poll.Within(t, "no process of the removed machines", time.Minute, func() (bool, string) {
		var left []e2etest.Proc
		for _, m := range ids {
			left = append(left, e2etest.MachineProcs(machinesDir, m)...)
		}
		return len(left) == 0, e2etest.ProcList(left)
	})
	checkOneAgentPerMachine(t, doc, machinesDir)
	r.checked("the destroyed units' machines removed, none of their processes left")
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// killEtcdLeader kills the etcd leader with SIGKILL, measures how long
// the cluster takes to elect another, to take writes again and to answer
// the API, and brings the killed member back after etcdDownFor. It
// returns when it killed.
func (f *fixture) killEtcdLeader(t *testing.T, r *run, phase string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, err := f.etcd.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	progress := ""
	if doc, err := f.TryStatus(); err == nil {
		progress = fmt.Sprintf(": %d units, %d running, %d machines", len(doc.Units()), count(doc, "", isRunning), len(doc.Machines))
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	r.inject("etcd leader killed (SIGKILL) during " + phase)
	t.Logf("killed etcd leader %s during %s%s", leader.Name, phase, progress)
	if _, err := f.etcd.WaitLeader(ctx, leader); err != nil {
		t.Fatalf("no new leader after killing %s: %v\n%s", leader.Name, err, f.etcd.LogTails(20))
	}
	r.recovered("etcd: a new leader elected", time.Since(killed))
	poll.Within(t, "a write to etcd", time.Minute, func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := f.client.Put(pctx, "/faults/probe", killed.String())
		return err == nil, errString(err)
	})
	r.recovered("etcd: writes succeed again", time.Since(killed))
	poll.Within(t, "ctl status to answer", time.Minute, func() (bool, string) {
		_, err := f.TryStatus()
		return err == nil, errString(err)
	})
	r.recovered("API: ctl status answers", time.Since(killed))
	pause.For(ctx, time.Until(killed.Add(etcdDownFor)))
	back := time.Now()
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Within(t, "the killed member back", time.Minute, func() (bool, string) {
		cli, err := f.etcd.Client()
		if err != nil {
			return false, err.Error()
		}
		defer cli.Close()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := cli.Status(sctx, leader.ClientURL)
		return err == nil && st.Leader != 0, errString(err)
	})
	r.recovered("etcd: the killed member restarted and following", time.Since(back))
	return killed
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkHooksOnce checks that install, config-changed and start ran to
// their end exactly once on each unit.
func (f *fixture) checkHooksOnce(t *testing.T, doc *e2etest.StatusDoc, machinesDir string, units []string) {
	t.Helper()
	bad := 0
	for _, name := range units {
		u, _ := doc.Unit(name)
		counts, err := hookCounts(machinesDir, u.Machine, name)
		if err != nil {
			t.Errorf("unit %s: %v", name, err)
			continue
		}
		if counts["install"] != 1 || counts["config-changed"] != 1 || counts["start"] != 1 {
			if bad++; bad <= 10 {
				t.Errorf("unit %s ran its hooks %v times, want install, config-changed and start once", name, counts)
			}
		}
	}
}
