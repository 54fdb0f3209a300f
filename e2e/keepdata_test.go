package e2e

import (
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestKillControllerKeepDataThenBootstrap: after ctl kill-controller
// --keep-data, the plain ctl bootstrap that kill-controller names starts
// that controller again on its data (not a new one in the default data
// directory): its model, its address, its machine agents taken back. A
// bootstrap with another data directory is refused and makes nothing.
func TestKillControllerKeepDataThenBootstrap(t *testing.T) {
	t.Parallel()
	kv := charmPath(t, "kv")
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", kv)
	s.OK(t, "wait", "--timeout", "2m")
	before := e2etest.MachineAgents(s.MachinesDir())
	if len(before["0"]) != 1 {
		t.Fatalf("machine agents %v, want one for machine 0", before)
	}
	controller := e2etest.ReadPID(t, filepath.Join(s.DataDir, "controller.pid"))

	out := s.OK(t, "kill-controller", "--keep-data")
	for _, want := range []string{
		"kept its data directory " + s.DataDir, "the client config " + s.Config, "its local machines keep running",
		"`ctl bootstrap` with this client config starts this controller again on its data",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl kill-controller --keep-data said:\n%s\nwant %q in it", out, want)
		}
	}
	poll.Within(t, "the controller to exit", 10*time.Second, func() (bool, string) {
		return !e2etest.PIDAlive(controller), ""
	})

	other := filepath.Join(s.Dir, "other")
	s.Fails(t, 1, "ctl: the controller of "+s.Config+" was stopped with its data kept in "+s.DataDir, "bootstrap", "--data-dir", other)
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a refused bootstrap made %s (%v)", other, err)
	}

	out = s.OK(t, "bootstrap")
	addr := fmt.Sprintf("127.0.0.1:%d", s.Port)
	for _, want := range []string{
		"the controller of " + s.Config + " was stopped with its data kept in " + s.DataDir + ": restarting it there",
		"controller restarted on its data", "API at " + addr + ", provider local", "data directory: " + s.DataDir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl bootstrap after kill-controller --keep-data said:\n%s\nwant %q in it", out, want)
		}
	}
	if def := filepath.Join(s.Dir, "lifeline", "controller"); exists(def) {
		t.Errorf("ctl bootstrap made the default data directory %s: want the kept controller restarted on its own", def)
	}
	restarted := e2etest.ReadPID(t, filepath.Join(s.DataDir, "controller.pid"))
	if !e2etest.PIDAlive(restarted) || restarted == controller {
		t.Errorf("the controller of %s is pid %d (alive %v), before the kill %d: want a new process there", s.DataDir, restarted, e2etest.PIDAlive(restarted), controller)
	}

	s.OK(t, "wait", "--timeout", "2m")
	doc := s.Status(t)
	if u, ok := doc.Unit("kv/0"); !ok || u.Life != "alive" || u.Agent != "idle" || u.State != "running" || u.Workload != "active" {
		t.Errorf("kv/0 = %+v (found %v) after the restart, want alive, idle, running, active", u, ok)
	}
	if after := e2etest.MachineAgents(s.MachinesDir()); !slices.Equal(after["0"], before["0"]) || len(after) != 1 {
		t.Errorf("machine agents %v after the restart, %v before: want machine 0's taken back, none started", after, before)
	}
}

// exists says whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
