package e2e

import (
	"bytes"
	"context"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestControllerRestartMidDeploy kills the controller with SIGKILL while
// it provisions the machines of a deploy, and starts it again: what it had
// committed completes, the machine agents already running are adopted, not
// started again, and nothing is duplicated.
func TestControllerRestartMidDeploy(t *testing.T) {
	// Not parallel: it kills the controller at a moment it watches for
	// in a busy loop.
	kv := charmPath(t, "kv")
	s := newSandbox(t)
	s.Bootstrap(t)
	controller := e2etest.ReadPID(t, filepath.Join(s.DataDir, "controller.pid"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deploy := s.CtlCommand(ctx, "", "deploy", kv, "-n", "5")
	var stdout, stderr bytes.Buffer
	deploy.Stdout, deploy.Stderr = &stdout, &stderr
	if err := s.Start(deploy); err != nil {
		t.Fatal(err)
	}
	deployDone, waited := make(chan error, 1), make(chan struct{})
	go func() { defer close(waited); deployDone <- deploy.Wait() }()
	t.Cleanup(func() { cancel(); <-waited }) // ctl killed with ctx, if still running

	// Kill the controller the moment it has started the first machine's
	// agent (the local provider writes the agent's pid file right after
	// starting it), most often before it has recorded the instance, with
	// the other machines still to start. Should ctl deploy fail, kill it
	// then.
	var deployErr error
	ended, when := false, ""
	first := filepath.Join(s.DataDir, "machines", "0", "pid")
	for when == "" {
		if _, err := os.Stat(first); err == nil {
			when = "the moment it had started machine 0's agent"
			break
		}
		select {
		case deployErr = <-deployDone:
			ended = true
			if deployErr != nil {
				when = "after ctl deploy failed"
			}
		case <-ctx.Done():
			t.Fatal("machine 0's agent did not start within 3 minutes")
		default:
		}
	}
	if err := syscall.Kill(controller, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !ended {
		deployErr = <-deployDone
	}
	t.Logf("killed the controller %s; ctl deploy: %v\n%s%s", when, deployErr, stdout.String(), stderr.String())
	poll.Within(t, "the killed controller to exit", 10*time.Second, func() (bool, string) {
		return !e2etest.PIDAlive(controller), ""
	})
	adopted := e2etest.MachineAgents(s.MachinesDir())
	t.Logf("machine agents running while the controller is down: %v", adopted)

	out := s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port))
	if !strings.Contains(out, "restarting the controller") {
		t.Errorf("ctl bootstrap of the kept data directory said:\n%s\nwant it restarting the controller", out)
	}
	s.OK(t, "wait", "--timeout", "2m")
	doc := s.Status(t)

	// What the controller committed: all five units when ctl deploy said
	// so; otherwise whatever it had, numbered from 0 without gaps.
	units := doc.Units()
	if deployErr == nil && len(units) != 5 {
		t.Errorf("ctl deploy -n 5 succeeded, but the units are %v: want kv/0 to kv/4", units)
	}
	if len(units) > 5 {
		t.Errorf("%d units, want at most 5: %v", len(units), units)
	}
	sort.Slice(units, func(i, j int) bool { return unitNum(units[i]) < unitNum(units[j]) })
	for i, name := range units {
		if name != "kv/"+strconv.Itoa(i) {
			t.Errorf("units %v, want kv/0 to kv/%d", units, len(units)-1)
			break
		}
	}
	t.Logf("%d units after the restart", len(units))

	// One machine each, every one started, with one agent process.
	machineOf := map[string]string{}
	for _, name := range units {
		u, _ := doc.Unit(name)
		if u.Life != "alive" || u.Agent != "idle" || u.State != "running" || u.Workload != "active" {
			t.Errorf("unit %s = %+v, want alive, agent idle, running, workload active", name, u)
		}
		if other, ok := machineOf[u.Machine]; ok {
			t.Errorf("units %s and %s share machine %s: want a machine each", other, name, u.Machine)
		}
		machineOf[u.Machine] = name
	}
	if len(doc.Machines) != len(units) {
		t.Errorf("%d machines for %d units, want one each:\n%v", len(doc.Machines), len(units), doc)
	}
	agents := e2etest.MachineAgents(s.MachinesDir())
	for id, m := range doc.Machines {
		if m.Life != "alive" || m.Agent != "started" || m.Instance != "local:"+id {
			t.Errorf("machine %s = %+v, want alive, agent started, instance local:%s", id, m, id)
		}
		if got := agents[id]; len(got) != 1 {
			t.Errorf("machine %s has %d agent processes %v, want 1", id, len(got), got)
		} else if before := adopted[id]; len(before) == 1 && before[0] != got[0] {
			t.Errorf("machine %s's agent ran as pid %d before the restart and as %d after: want it adopted, not restarted", id, before[0], got[0])
		}
	}
	for id, pids := range agents {
		if _, ok := doc.Machines[id]; !ok {
			t.Errorf("agent processes %v run for machine %s, which the model does not have", pids, id)
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.DataDir, "machines"))
	if err != nil && len(units) > 0 {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // the network file
		}
		if _, ok := doc.Machines[e.Name()]; !ok {
			t.Errorf("machine directory %s is left for a machine the model does not have", e.Name())
		}
	}

	// One kv-server per unit.
	for _, name := range units {
		u, _ := doc.Unit(name)
		dir := filepath.Join(s.DataDir, "machines", u.Machine, "units", strings.ReplaceAll(name, "/", "-")) + "/"
		servers := e2etest.Procs(func(p e2etest.Proc) bool {
			return filepath.Base(p.Args[0]) == "kv-server" && strings.Contains(strings.Join(p.Args, " "), dir)
		})
		if len(servers) != 1 {
			t.Errorf("unit %s has %d kv-server processes, want 1:\n%s", name, len(servers), e2etest.ProcList(servers))
		}
	}
	if t.Failed() {
		t.Logf("processes of the sandbox:\n%s", e2etest.ProcList(e2etest.SandboxProcs(s.Dir)))
	}
}

func unitNum(name string) int {
	_, n, _ := strings.Cut(name, "/")
	i, _ := strconv.Atoi(n)
	return i
}
