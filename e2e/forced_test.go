package e2e

import (
	"encoding/json"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// spawnerCharm writes a subordinate charm whose start hook leaves two
// processes behind the ways a charm may: a daemon under nohup (in the
// hook's process group) and one under setsid (in a session of its own),
// each writing its pid into the unit's directory. Its stop hook does not
// end, as a stuck charm's may: its principal's agent, which waits for it,
// cannot finish the way out, and forced removal does not wait for it. It
// returns the charm's directory.
func spawnerCharm(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spawner")
	files := map[string]string{
		"metadata.yaml": "name: spawner\nsummary: leaves processes behind\ndescription: for tests\nsubordinate: true\n" +
			"requires:\n  host:\n    interface: lifeline-info\n    scope: container\n",
		"hooks/start": `#!/bin/sh
set -eu
dir=$(dirname "$LIFELINE_CHARM_DIR")
nohup sleep 3601 </dev/null >/dev/null 2>&1 &
echo $! >"$dir/nohup.pid"
setsid sh -c 'echo $$ >"$0/setsid.pid.tmp" && mv "$0/setsid.pid.tmp" "$0/setsid.pid"; exec sleep 3602' "$dir" </dev/null >/dev/null 2>&1 &
`,
		"hooks/stop": "#!/bin/sh\nexec sleep 3600\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// unitDir is a unit's directory on local machine m.
func unitDir(s *e2etest.Sandbox, m, unit string) string {
	return filepath.Join(s.MachinesDir(), m, "units", strings.ReplaceAll(unit, "/", "-"))
}

// waitPID waits for a pid file and reads it.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	poll.Within(t, path, time.Minute, func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, fmt.Sprint(err)
	})
	return e2etest.ReadPID(t, path)
}

// hostDaemonPID waits until unit's host report (ctl show-unit) has its
// daemon name running, and returns its pid.
func hostDaemonPID(t *testing.T, s *e2etest.Sandbox, unit, name string) int {
	t.Helper()
	var doc map[string]struct {
		Host struct {
			Daemons []struct {
				Name  string `json:"name"`
				State string `json:"state"`
				Pid   int    `json:"pid"`
			} `json:"daemons"`
		} `json:"host"`
	}
	pid := 0
	poll.Within(t, unit+"'s daemon "+name+" running", time.Minute, func() (bool, string) {
		out := s.OK(t, "show-unit", unit, "--format", "json")
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("ctl show-unit %s --format json: %v\n%s", unit, err, out)
		}
		for _, d := range doc[unit].Host.Daemons {
			if d.Name == name && d.State == "running" && d.Pid > 0 {
				pid = d.Pid
				return true, ""
			}
		}
		return false, out
	})
	return pid
}

// forced is what forcedSetup made.
type forced struct {
	machine string
	// url is app/0's server's
	url string
	// pids are of app/0's server, of what the spawner left running and of
	// kv/0's server, by name.
	pids map[string]int
}

// forcedSetup deploys app with one unit, the spawner beside it and kv on
// the same machine. The processes it names are killed when the test ends,
// should they outlive it.
func forcedSetup(t *testing.T, s *e2etest.Sandbox) forced {
	t.Helper()
	s.OK(t, "deploy", charmPath(t, "app"))
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("app/0")
	if !ok || u.Machine == "" {
		t.Fatalf("app/0 = %+v (found %v), want it on a machine", u, ok)
	}
	m := u.Machine
	s.OK(t, "deploy", charmPath(t, "kv"), "--to", m)
	s.OK(t, "deploy", spawnerCharm(t))
	s.OK(t, "add-relation", "app", "spawner")
	s.OK(t, "wait", "--timeout", "2m")
	pids := map[string]int{
		"app-server":     hostDaemonPID(t, s, "app/0", "app-server"),
		"nohup daemon":   waitPID(t, filepath.Join(unitDir(s, m, "spawner/0"), "nohup.pid")),
		"setsid daemon":  waitPID(t, filepath.Join(unitDir(s, m, "spawner/0"), "setsid.pid")),
		"kv's kv-server": hostDaemonPID(t, s, "kv/0", "kv-server"),
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for name, pid := range pids {
		if !e2etest.PIDAlive(pid) {
			t.Fatalf("%s (pid %d) does not run", name, pid)
		}
	}
	f := forced{machine: m, url: "http://" + u.Address + ":8080/health", pids: pids}
	if _, _, err := e2etest.HTTPGet(f.url); err != nil {
		t.Fatalf("app/0's server does not answer: %v", err)
	}
	return f
}

// checkForcedOut waits until app/0 and its subordinate are gone with
// their processes, their server no longer answering, their files gone;
// kv/0 on the same machine runs on, untouched.
func checkForcedOut(t *testing.T, s *e2etest.Sandbox, f forced) {
	t.Helper()
	m, pids, url := f.machine, f.pids, f.url
	s.WaitStatus(t, "app/0 and spawner/0 to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, app := doc.Unit("app/0")
		_, sp := doc.Unit("spawner/0")
		return !app && !sp
	})
	poll.Within(t, "app/0's and spawner/0's processes to end", 30*time.Second, func() (bool, string) {
		var left []string
		for _, name := range []string{"app-server", "nohup daemon", "setsid daemon"} {
			if e2etest.PIDAlive(pids[name]) {
				left = append(left, fmt.Sprintf("%s (pid %d)", name, pids[name]))
			}
		}
		if code, _, err := e2etest.HTTPGet(url); err == nil {
			left = append(left, fmt.Sprintf("GET %s answers %d", url, code))
		}
		return len(left) == 0, strings.Join(left, "\n")
	})
	for _, unit := range []string{"app/0", "spawner/0"} {
		poll.Within(t, unit+"'s files to be removed", 30*time.Second, func() (bool, string) {
			_, err := os.Stat(unitDir(s, m, unit))
			return os.IsNotExist(err), fmt.Sprint(err)
		})
	}
	if pid := pids["kv's kv-server"]; !e2etest.PIDAlive(pid) {
		t.Errorf("kv/0's server (pid %d), on the same machine, is gone: want it running", pid)
	}
	if u, _ := s.Status(t).Unit("kv/0"); u.Life != "alive" || u.Agent != "idle" || u.State != "running" {
		t.Errorf("kv/0 = %+v, want alive, idle, running", u)
	}
}

// TestForcedUnitEndsOnItsHost: a unit forced out with its subordinate,
// while its machine agent runs, leaves nothing running on the host: its
// server stops answering on its port, and what its subordinate's hooks
// started under nohup and setsid ends too. Another unit of the machine runs
// on, and so does the machine agent.
func TestForcedUnitEndsOnItsHost(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	f := forcedSetup(t, s)
	agent := e2etest.ReadPID(t, filepath.Join(s.MachinesDir(), f.machine, "pid"))

	s.OK(t, "destroy-unit", "app/0", "--force", "--no-wait")
	checkForcedOut(t, s, f)
	if !e2etest.PIDAlive(agent) {
		t.Errorf("machine %s's agent (pid %d) stopped, want it running", f.machine, agent)
	}
}

// TestForcedUnitEndsAfterItsAgentRestarts: a unit forced out while its
// machine agent is down (killed with SIGKILL) is ended on the host when
// the agent is back: the agent finds the unit's directory, whose unit is
// gone, and ends its processes before it removes it.
func TestForcedUnitEndsAfterItsAgentRestarts(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	f := forcedSetup(t, s)
	m := f.machine
	agent := e2etest.ReadPID(t, filepath.Join(s.MachinesDir(), m, "pid"))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agent))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")

	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.OK(t, "destroy-unit", "app/0", "--force", "--no-wait")
	s.WaitStatus(t, "app/0 and spawner/0 to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, app := doc.Unit("app/0")
		_, sp := doc.Unit("spawner/0")
		return !app && !sp
	})
	for name, pid := range f.pids {
		if !e2etest.PIDAlive(pid) {
			t.Fatalf("%s (pid %d) is gone with its machine agent down: want it running until the agent is back", name, pid)
		}
	}

	// The agent started again as its provider started it, in a session
	// of its own (the teardown stops it by its command line).
	cmd := restartAgent(t, s, m, args)
	checkForcedOut(t, s, f)
	if !e2etest.PIDAlive(cmd.Process.Pid) {
		t.Errorf("machine %s's agent started again (pid %d) stopped, want it running", m, cmd.Process.Pid)
	}
}

// TestForcedOutMachineGoesPlainly: a machine whose unit was forced out
// (its subordinate with it) is destroyed without --force, and its agent
// sets it dead at once: it is removed, with nothing of it left running.
func TestForcedOutMachineGoesPlainly(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "app"))
	s.OK(t, "deploy", charmPath(t, "logger"))
	s.OK(t, "add-relation", "app", "logger")
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("app/0")
	if !ok || len(u.Subordinates) != 1 {
		t.Fatalf("app/0 = %+v (found %v), want it with a logger unit", u, ok)
	}
	m := u.Machine

	s.OK(t, "destroy-unit", "app/0", "--force", "--no-wait")
	s.WaitStatus(t, "app/0 and its logger unit to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		return len(doc.Units()) == 0
	})
	s.OK(t, "destroy-machine", m)
	s.WaitStatus(t, "machine "+m+" to be removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Machines[m]
		return !ok
	})
	poll.Within(t, "no process of machine "+m, 30*time.Second, func() (bool, string) {
		left := e2etest.MachineProcs(s.MachinesDir(), m)
		return len(left) == 0, e2etest.ProcList(left)
	})
}

// TestManualMachineNeverJoinedGoesAtOnce: a manual machine whose agent
// never joined is destroyed without --force, and is gone at once: there
// is no agent to wait for. One whose agent joined waits for it.
func TestManualMachineNeverJoinedGoesAtOnce(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port), "--provider", "manual")
	out := s.OK(t, "add-machine", "--manual")
	id := regexp.MustCompile(`machine (\d+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("add-machine --manual named no machine:\n%s", out)
	}
	if m, ok := s.Status(t).Machines[id[1]]; !ok || m.Life != "alive" || m.Agent != "pending" {
		t.Fatalf("machine %s = %+v (found %v), want alive, its agent pending", id[1], m, ok)
	}
	s.OK(t, "destroy-machine", id[1])
	if doc := s.Status(t); len(doc.Machines) != 0 {
		t.Errorf("right after destroy-machine of a manual machine that never joined, status shows:\n%v\nwant no machine", doc)
	}
	s.Fails(t, 1, "machine "+id[1]+" not found", "destroy-machine", id[1])
}
