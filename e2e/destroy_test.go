package e2e

import (
	"context"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/state"
)

// TestDestroyMachineRefusedWhileUnitsAssigned: destroy-machine is refused
// (M2) while a unit is assigned and alive, and accepted once the unit is
// dying; the machine's agent then removes the unit, sets the machine dead
// and exits, and the provisioner removes the machine.
func TestDestroyMachineRefusedWhileUnitsAssigned(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "1")
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("kv/0")
	if !ok || u.Machine == "" {
		t.Fatalf("kv/0 = %+v (found %v), want it on a machine", u, ok)
	}
	m := u.Machine
	agent := e2etest.ReadPID(t, filepath.Join(s.DataDir, "machines", m, "pid"))
	if !e2etest.PIDAlive(agent) {
		t.Fatalf("machine %s's agent (pid %d) does not run", m, agent)
	}

	s.Fails(t, 1, "machine "+m+" has unit kv/0 assigned", "destroy-machine", m)
	if doc := s.Status(t); doc.Machines[m].Life != "alive" {
		t.Errorf("after a refused destroy-machine, machine %s = %+v, want alive", m, doc.Machines[m])
	}

	s.OK(t, "destroy-unit", "kv/0")
	s.OK(t, "destroy-machine", m)
	s.WaitStatus(t, "machine "+m+" and kv/0 to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, unit := doc.Unit("kv/0")
		_, machine := doc.Machines[m]
		return !unit && !machine
	})
	poll.Within(t, "machine "+m+"'s agent to exit", 30*time.Second, func() (bool, string) {
		left := e2etest.MachineProcs(s.MachinesDir(), m)
		return !e2etest.PIDAlive(agent) && len(left) == 0, e2etest.ProcList(left)
	})
}

// TestDestroyRelatedServicesLeavesNothing destroys the related demo
// services and their machines with a monitor on the whole keyspace: every
// life rule and invariant (docs/DESIGN.md) holds at every committed revision (so
// things went in the order the rules allow), and nothing is left.
func TestDestroyRelatedServicesLeavesNothing(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)

	// The model lives in an etcd the test runs, so that it can watch it.
	srv, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(s.Dir, "etcd"), TickMs: 10, NoFsync: true, CompactionRetention: "0"})
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(srv.Close)
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(func() { client.Close() })
	const ns = "/lifeline/"
	st, err := state.New(client, state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	mon := statetest.Start(t, st)
	s.OnStop(mon.Halt)

	s.StartController(t, "--etcd-endpoints", srv.Endpoint(), "--namespace", ns)
	deployDemo(t, s)
	doc := s.Status(t)
	checkDemoSettled(t, doc)
	if len(doc.Relations) != 2 {
		t.Errorf("relations %v, want app-kv and app-logger", doc.Relations)
	}

	s.OK(t, "destroy-service", "app", "kv", "logger")
	s.OK(t, "wait", "--timeout", "2m")
	doc = s.Status(t)
	if len(doc.Services) != 0 || len(doc.Relations) != 0 {
		t.Fatalf("after destroy-service and wait, want no services and relations:\n%v", doc)
	}
	var ids []string
	for id := range doc.Machines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s.OK(t, append([]string{"destroy-machine"}, ids...)...)
	s.WaitStatus(t, "an empty model", time.Minute, (*e2etest.StatusDoc).Empty)

	// Cleanup items may outlive the entities they were for by a pass of
	// the cleaner.
	var snap *state.Snapshot
	poll.Within(t, "no entity keys in etcd", 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		snap, err = st.Snapshot(ctx)
		if err != nil {
			return false, err.Error()
		}
		keys := snap.EntityKeys()
		return len(keys) == 0, strings.Join(keys, "\n")
	})
	mon.StopAt(t, snap)
	t.Logf("the monitor checked %d revisions with changes", mon.Revisions())
}
