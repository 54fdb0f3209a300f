package e2e

import (
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// presenceTimeout is the controller's --presence-timeout in
// TestLostMachineAgentAndForce.
const presenceTimeout = 3 * time.Second

// TestLostMachineAgentAndForce kills a machine agent with SIGKILL: status
// shows it and its unit lost; destroy-unit leaves the unit dying, waiting for
// the agent that will not come; --force has the controller remove it, and
// then the machine; nothing of the machine keeps running.
func TestLostMachineAgentAndForce(t *testing.T) {
	// Not parallel: a 3 s presence timeout, and a wait for what must not
	// happen, want a machine no busier than the test makes it.
	needCharms(t)
	s := newSandbox(t)
	s.StartController(t, "--presence-timeout", presenceTimeout.String())
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "1")
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("kv/0")
	if !ok || u.Machine == "" {
		t.Fatalf("kv/0 = %+v (found %v), want it on a machine", u, ok)
	}
	m := u.Machine
	agent := e2etest.ReadPID(t, filepath.Join(s.DataDir, "machines", m, "pid"))
	if got := e2etest.MachineAgents(s.MachinesDir())[m]; !slices.Equal(got, []int{agent}) {
		t.Fatalf("machine %s's agent processes are %v, want the pid file's %d", m, got, agent)
	}

	hasServer := slices.ContainsFunc(e2etest.MachineProcs(s.MachinesDir(), m), func(p e2etest.Proc) bool { return filepath.Base(p.Args[0]) == "kv-server" })
	if !hasServer {
		t.Fatalf("machine %s's processes:\n%s\nwant kv/0's kv-server among them", m, e2etest.ProcList(e2etest.MachineProcs(s.MachinesDir(), m)))
	}

	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.WaitStatus(t, "machine "+m+" and kv/0 lost", presenceTimeout+30*time.Second, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit("kv/0")
		return doc.Machines[m].Agent == "lost" && u.Agent == "lost"
	})
	t.Logf("lost after %s (presence timeout %s)", time.Since(start).Round(100*time.Millisecond), presenceTimeout)

	// Without its agent, a dying unit waits.
	s.OK(t, "destroy-unit", "kv/0")
	time.Sleep(5 * time.Second) // for what must not happen
	doc := s.Status(t)
	if u, ok := doc.Unit("kv/0"); !ok || u.Life != "dying" {
		t.Fatalf("5s after destroy-unit of a unit whose agent is gone, kv/0 = %+v (there: %v), want it there, dying", u, ok)
	}
	if doc.Machines[m].Life != "alive" {
		t.Errorf("machine %s = %+v, want alive", m, doc.Machines[m])
	}

	s.OK(t, "destroy-unit", "kv/0", "--force", "--no-wait")
	s.WaitStatus(t, "kv/0 to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit("kv/0")
		return !ok
	})
	s.OK(t, "destroy-machine", m, "--force", "--no-wait")
	s.WaitStatus(t, "machine "+m+" to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Machines[m]
		return !ok
	})
	poll.Within(t, "no process of machine "+m, 20*time.Second, func() (bool, string) {
		left := e2etest.MachineProcs(s.MachinesDir(), m)
		return len(left) == 0, e2etest.ProcList(left)
	})
}
