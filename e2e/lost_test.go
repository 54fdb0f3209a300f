package e2e

import (
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// presenceTimeout is the controller's --presence-timeout in
// TestLostMachineAgentAndForce.
const presenceTimeout = 3 * time.Second

// TestLostMachineAgentAndForce kills a machine agent with SIGKILL: status
// shows it and its unit lost; destroy-unit leaves the unit dying, waiting for
// the agent that will not come; --force has the controller remove it, and
// then the machine; nothing of the machine keeps running.
func TestLostMachineAgentAndForce(t *testing.T) {
	needCharms(t)
	s := newSandbox(t)
	s.startController(t, "--presence-timeout", presenceTimeout.String())
	s.ok(t, "deploy", charmPath(t, "kv"), "-n", "1")
	s.ok(t, "wait", "--timeout", "2m")
	u, ok := s.status(t).unit("kv/0")
	if !ok || u.Machine == "" {
		t.Fatalf("kv/0 = %+v (found %v), want it on a machine", u, ok)
	}
	m := u.Machine
	agent := readPID(t, filepath.Join(s.dataDir, "machines", m, "pid"))
	if got := machineAgents(s.dataDir)[m]; !slices.Equal(got, []int{agent}) {
		t.Fatalf("machine %s's agent processes are %v, want the pid file's %d", m, got, agent)
	}

	hasServer := slices.ContainsFunc(machineProcs(s.dataDir, m), func(p proc) bool { return filepath.Base(p.args[0]) == "kv-server" })
	if !hasServer {
		t.Fatalf("machine %s's processes:\n%s\nwant kv/0's kv-server among them", m, procList(machineProcs(s.dataDir, m)))
	}

	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitStatus(t, "machine "+m+" and kv/0 lost", presenceTimeout+30*time.Second, func(doc *statusDoc) bool {
		u, _ := doc.unit("kv/0")
		return doc.Machines[m].Agent == "lost" && u.Agent == "lost"
	})
	t.Logf("lost after %s (presence timeout %s)", time.Since(start).Round(100*time.Millisecond), presenceTimeout)

	// Without its agent, a dying unit waits.
	s.ok(t, "destroy-unit", "kv/0")
	time.Sleep(5 * time.Second) // for what must not happen
	doc := s.status(t)
	if u, ok := doc.unit("kv/0"); !ok || u.Life != "dying" {
		t.Fatalf("5s after destroy-unit of a unit whose agent is gone, kv/0 = %+v (there: %v), want it there, dying", u, ok)
	}
	if doc.Machines[m].Life != "alive" {
		t.Errorf("machine %s = %+v, want alive", m, doc.Machines[m])
	}

	s.ok(t, "destroy-unit", "kv/0", "--force", "--no-wait")
	s.waitStatus(t, "kv/0 to be removed", time.Minute, func(doc *statusDoc) bool {
		_, ok := doc.unit("kv/0")
		return !ok
	})
	s.ok(t, "destroy-machine", m, "--force", "--no-wait")
	s.waitStatus(t, "machine "+m+" to be removed", time.Minute, func(doc *statusDoc) bool {
		_, ok := doc.Machines[m]
		return !ok
	})
	waitFor(t, "no process of machine "+m, 20*time.Second, func() (bool, string) {
		left := machineProcs(s.dataDir, m)
		return len(left) == 0, procList(left)
	})
}
