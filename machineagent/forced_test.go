package machineagent_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// daemonHook is a start hook that leaves a daemon running in a session of
// its own, its pid in daemon.pid in the unit's directory.
const daemonHook = `#!/bin/sh
set -e
dir=$(dirname "$LIFELINE_CHARM_DIR")
setsid sh -c 'echo $$ >"$0/daemon.pid.tmp" && mv "$0/daemon.pid.tmp" "$0/daemon.pid"; exec sleep 3600' "$dir" </dev/null >/dev/null 2>&1 &
`

// hangingStop is a stop hook that does not end, as a stuck charm's may:
// the agent cannot finish its unit's way out, and forced removal does not
// wait for it.
const hangingStop = "#!/bin/sh\nexec sleep 3600\n"

// daemonCharms writes and uploads two charms whose units leave a daemon
// running and cannot stop: front, a principal, and side, its subordinate.
func daemonCharms(t *testing.T, env *controllertest.Env, op pb.OperatorServiceClient) {
	t.Helper()
	dir := t.TempDir()
	for name, meta := range map[string]string{
		"front": "name: front\n",
		"side":  "name: side\nsubordinate: true\nrequires:\n  host:\n    interface: lifeline-info\n    scope: container\n",
	} {
		for file, content := range map[string]string{"metadata.yaml": meta, "hooks/start": daemonHook, "hooks/stop": hangingStop} {
			path := filepath.Join(dir, name, file)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		env.Upload(op, filepath.Join(dir, name))
	}
}

// agentRun is a machine agent run in this process over a data directory
// that outlives it.
type agentRun struct {
	cancel context.CancelFunc
	done   chan error
}

// startAgent runs machine m's agent over dir.
func startAgent(t *testing.T, env *controllertest.Env, m, dir string) *agentRun {
	t.Helper()
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: env.Agent("machine-" + m),
		DialUnit:  dialUnits(env),
		Lifelined: lifelined, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *agentRun) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// daemons follows the daemons of units on a machine agent's data
// directory.
type daemons struct {
	t    *testing.T
	dir  string
	pids map[string]int
}

func newDaemons(t *testing.T, dir string) *daemons {
	d := &daemons{t: t, dir: dir, pids: map[string]int{}}
	t.Cleanup(func() {
		for _, pid := range d.pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return d
}

// unitDir is unit's directory.
func (d *daemons) unitDir(unit string) string {
	return filepath.Join(d.dir, "units", strings.ReplaceAll(unit, "/", "-"))
}

// started waits for unit's daemon to run, and remembers its pid.
func (d *daemons) started(unit string) {
	d.t.Helper()
	poll.Until(d.t, unit+"'s daemon", func() bool {
		b, err := os.ReadFile(filepath.Join(d.unitDir(unit), "daemon.pid"))
		if err != nil {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		d.pids[unit] = pid
		return err == nil && running(pid)
	})
}

// running says whether pid is a process that has not exited.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// ended waits until unit's daemon is gone, and its directory.
func (d *daemons) ended(unit string) {
	d.t.Helper()
	poll.Until(d.t, unit+"'s daemon and files to be gone", func() bool {
		_, err := os.Stat(d.unitDir(unit))
		return !running(d.pids[unit]) && errors.Is(err, os.ErrNotExist)
	})
}

// runs checks that unit's daemon runs, and its directory is there.
func (d *daemons) runs(unit string) {
	d.t.Helper()
	if !running(d.pids[unit]) {
		d.t.Errorf("%s's daemon (pid %d) is gone, want it running", unit, d.pids[unit])
	}
	if _, err := os.Stat(d.unitDir(unit)); err != nil {
		d.t.Errorf("%s's directory: %v, want it there", unit, err)
	}
}

// forceOut forces unit out at once, as destroy --force --no-wait does (of
// a subordinate, only the model can), and waits until the cleaner has
// removed it.
func forceOut(t *testing.T, env *controllertest.Env, unit string) {
	t.Helper()
	if err := env.State.DestroyUnit(env.Ctx, unit, state.DestroyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, unit+" to be removed", func() bool {
		_, err := env.State.Unit(env.Ctx, unit)
		return errors.Is(err, state.ErrNotFound)
	})
}

// TestForcedSubordinateEnds: a subordinate forced out while its principal
// stays has its daemon ended and its files removed by its machine agent;
// its principal's daemon runs on. Its principal forced out in turn, the
// machine is empty: its agent sets it dead once destroyed.
func TestForcedSubordinateEnds(t *testing.T) {
	env, op, m, d, agent := frontWithSide(t)

	forceOut(t, env, "side/0")
	d.ended("side/0")
	d.runs("front/0")

	forceOut(t, env, "front/0")
	d.ended("front/0")
	if _, err := op.DestroyMachine(env.Ctx, &pb.DestroyMachineRequest{Machine: m}); err != nil {
		t.Fatal(err)
	}
	if err := <-agent.done; !errors.Is(err, machineagent.ErrMachineDead) {
		t.Fatalf("Run = %v, want ErrMachineDead", err)
	}
	agent.cancel = nil
}

// TestRestartEndsWhatWentMeanwhile: units forced out while their machine
// agent was stopped (a principal, with its subordinate) are ended when it
// starts again, by the directories they left; a principal that stays and
// its subordinate keep their daemons and files.
func TestRestartEndsWhatWentMeanwhile(t *testing.T) {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	daemonCharms(t, env, op)
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "front", NumUnits: 2, To: m}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "side"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.AddRelation(env.Ctx, &pb.AddRelationRequest{Endpoints: []string{"front", "side"}}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := newDaemons(t, dir)
	agent := startAgent(t, env, m, dir)
	units := []string{"front/0", "front/1", "side/0", "side/1"}
	for _, u := range units {
		d.started(u)
	}
	subOf := map[string]string{}
	for _, s := range []string{"side/0", "side/1"} {
		u, err := env.State.Unit(env.Ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		subOf[u.Principal] = s
	}

	agent.stop()
	forceOut(t, env, "front/0")
	for _, u := range units {
		d.runs(u) // nobody ended them yet
	}
	startAgent(t, env, m, dir)
	d.ended("front/0")
	d.ended(subOf["front/0"])
	d.runs("front/1")
	d.runs(subOf["front/1"])
}

// TestForcedMachineEndsItsUnitsFirst: a machine destroyed with --force,
// no wait, while its agent runs: its units are forced out with it, and
// its agent ends them (their daemons, a subordinate's too) before it
// stops on its dead machine.
func TestForcedMachineEndsItsUnitsFirst(t *testing.T) {
	env, op, m, d, agent := frontWithSide(t)

	zero := int64(0)
	if _, err := op.DestroyMachine(env.Ctx, &pb.DestroyMachineRequest{Machine: m, Force: true, MaxWaitMs: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := <-agent.done; !errors.Is(err, machineagent.ErrMachineDead) {
		t.Fatalf("Run = %v, want ErrMachineDead", err)
	}
	agent.cancel = nil
	for _, u := range []string{"front/0", "side/0"} {
		if running(d.pids[u]) {
			t.Errorf("%s's daemon (pid %d) runs after its machine's agent stopped on its dead machine", u, d.pids[u])
		}
	}
}

// frontWithSide is a machine whose agent runs front/0 with its
// subordinate side/0, each with its daemon started.
func frontWithSide(t *testing.T) (*controllertest.Env, pb.OperatorServiceClient, string, *daemons, *agentRun) {
	t.Helper()
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	daemonCharms(t, env, op)
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "front", NumUnits: 1, To: m}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "side"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.AddRelation(env.Ctx, &pb.AddRelationRequest{Endpoints: []string{"front", "side"}}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := newDaemons(t, dir)
	agent := startAgent(t, env, m, dir)
	d.started("front/0")
	d.started("side/0")
	return env, op, m, d, agent
}
