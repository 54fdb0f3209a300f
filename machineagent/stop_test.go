package machineagent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// stuckStart is a start hook that writes its pid to hook.pid in its
// unit's directory and never ends on its own.
const stuckStart = `#!/bin/sh
dir=$(dirname "$LIFELINE_CHARM_DIR")
echo $$ >"$dir/hook.pid.tmp" && mv "$dir/hook.pid.tmp" "$dir/hook.pid"
exec sleep 3600
`

// TestAgentStopEndsHooksNotDaemons: a machine agent told to stop (its
// context ended: SIGTERM or SIGINT in lifelined) ends the hook it runs
// before it returns, and leaves its units' daemons running, in sessions of
// their own; the next agent adopts them rather than starting them twice,
// and runs the hook again. This is what the systemd unit's KillMode=process
// (docs/systemd) relies on: systemd signals the agent alone.
func TestAgentStopEndsHooksNotDaemons(t *testing.T) {
	env := controllertest.New(t, controllertest.Options{})
	op := env.Operator()
	charmDir := filepath.Join(t.TempDir(), "claimer")
	for name, content := range map[string]string{
		"metadata.yaml": fmt.Sprintf(claimerMeta, filepath.Join(t.TempDir(), "claimed.conf")),
		"hooks/start":   stuckStart,
	} {
		p := filepath.Join(charmDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env.Upload(op, charmDir)
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "claimer", NumUnits: 1, To: m}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := newDaemons(t, dir)
	const unit = "claimer/0"
	hookPID := func(not int) int {
		t.Helper()
		pid := 0
		poll.Until(t, unit+"'s start hook", func() bool {
			b, err := os.ReadFile(filepath.Join(d.unitDir(unit), "hook.pid"))
			if err != nil {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid != not && running(pid)
		})
		return pid
	}

	run := startAgent(t, env, m, dir)
	d.started(unit)
	daemon := d.pids[unit]
	hook := hookPID(0)
	stopped := time.Now()
	run.stop()
	took := time.Since(stopped)
	if running(hook) {
		t.Errorf("the start hook (pid %d) runs after its agent stopped", hook)
	}
	d.runs(unit)
	t.Logf("the agent stopped in %s", took.Round(time.Millisecond))

	startAgent(t, env, m, dir)
	hookPID(hook)
	d.started(unit)
	if got := d.pids[unit]; got != daemon {
		t.Errorf("the daemon's pid is %d after the agent's restart, was %d: want it adopted", got, daemon)
	}
	d.runs(unit)
}
