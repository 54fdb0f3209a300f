package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// orderConfig are the options of orderCharm: a and b are in its files
// (a in daemon da's command too), other in no claim.
const orderConfig = "  a: {type: string, default: a1}\n  b: {type: string, default: b1}\n  other: {type: string, default: o1}\n"

// orderCharm claims a package, two files templated on config a and b,
// and two daemons, da (its command templated on a) and db; its hooks log.
func orderCharm(t *testing.T, e *claimsEnv) string {
	host := "  packages:\n    - {name: orderpkg}\n" +
		"  files:\n    - {path: a.conf, template: \"a={{ config.a }}\\n\"}\n    - {path: b.conf, template: \"b={{ config.b }}\\n\"}\n" +
		"  daemons:\n" + daemonClaim("da", e.log, "3601", "{{ config.a }}") + daemonClaim("db", e.log, "3602", "")
	return claimsCharm(t, "order", e.log, host, orderConfig, "install", "config-changed", "start", "stop", "remove")
}

// TestClaimsNewUnitOrder: a new unit's packages, files, install,
// config-changed, daemons and start come in that order (fakepkg, the
// hooks and the daemons log to one file; the files are there before
// install runs).
func TestClaimsNewUnitOrder(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	host := "  packages:\n    - {name: orderpkg}\n" +
		"  files:\n    - {path: a.conf, content: \"a\\n\"}\n" +
		"  daemons:\n" + daemonClaim("da", e.log, "3601", "")
	charm := claimsCharm(t, "order", e.log, host, "", "install", "config-changed", "start")
	// install logs whether the file is in place; start whether the
	// daemon's process runs (its own line in the log may come after
	// start's: it writes it once running).
	hooks := map[string]string{
		"install": "if [ -f \"$(dirname \"$LIFELINE_CHARM_DIR\")/a.conf\" ]; then s=file; else s=nofile; fi\n",
		"start": "dir=$(dirname \"$LIFELINE_CHARM_DIR\"); s=nodaemon\n" +
			"for p in /proc/[0-9]*; do\n" +
			"  if [ \"$(readlink \"$p/cwd\" 2>/dev/null)\" = \"$dir\" ] && tr '\\0' ' ' <\"$p/cmdline\" 2>/dev/null | grep -q 'sleep 360[1]'; then s=daemon; fi\n" +
			"done\n",
	}
	for name, body := range hooks {
		hook := fmt.Sprintf("#!/bin/sh\n%secho \"hook $LIFELINE_UNIT_NAME %s $s\" >>%s\n", body, name, e.log)
		if err := os.WriteFile(filepath.Join(charm, "hooks", name), []byte(hook), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.s.OK(t, "deploy", charm)
	unitOn(t, e.s, "order/0")
	e.waitLine(t, "^hook order/0 start", 1)
	lines := e.waitLine(t, "^daemon order/0 da ", 1)
	var got []string
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "daemon" {
			l = "daemon " + f[1] + " " + f[2]
		}
		got = append(got, l)
	}
	want := []string{
		"install orderpkg 1.0",
		"hook order/0 install file",
		"hook order/0 config-changed",
		"daemon order/0 da",
		"hook order/0 start daemon",
	}
	if len(got) == len(want) && got[3] == want[4] && got[4] == want[3] {
		got[3], got[4] = got[4], got[3] // the daemon started before start, and logged after
	}
	if !slices.Equal(got, want) {
		t.Errorf("the machine's log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pkgs := e.installed(t); pkgs["orderpkg"] != "1.0" {
		t.Errorf("fakepkg's records: %v, want orderpkg 1.0", pkgs)
	}
}

// fileID is what says a file was not written again: its inode and
// modification time.
type fileID struct {
	ino   uint64
	mtime time.Time
}

func statFile(t *testing.T, path string) fileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileID{ino: fi.Sys().(*syscall.Stat_t).Ino, mtime: fi.ModTime()}
}

// hostJobs counts the lines of machine m's agent log of unit's host jobs
// that ran tasks.
func hostJobs(t *testing.T, s *e2etest.Sandbox, m, unit string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.MachinesDir(), m, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "host job done") && strings.Contains(l, unit) {
			n++
		}
	}
	return n
}

// TestClaimsPrunedAndChanged: a config change of an option no claim uses
// runs no task (no job logged, no package installed, no file written) and
// restarts no daemon; one of option a rewrites a.conf alone and restarts
// da alone, whose command holds a.
func TestClaimsPrunedAndChanged(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.s.OK(t, "deploy", orderCharm(t, e))
	m := unitOn(t, e.s, "order/0")
	dir := unitDir(e.s, m, "order/0")
	e.waitLine(t, "^hook order/0 start$", 1)
	lines := e.waitLine(t, "^daemon order/0 d[ab] ", 2)
	da, db := daemonPID(t, lines, "order/0", "da"), daemonPID(t, lines, "order/0", "db")
	a, b := statFile(t, filepath.Join(dir, "a.conf")), statFile(t, filepath.Join(dir, "b.conf"))
	jobs := hostJobs(t, e.s, m, "order/0")
	installs := func() int {
		return len(slices.DeleteFunc(e.lines(t), func(l string) bool { return !strings.HasPrefix(l, "install ") }))
	}
	if n := installs(); n != 1 {
		t.Fatalf("%d package installs, want 1:\n%s", n, strings.Join(lines, "\n"))
	}

	e.s.OK(t, "config", "order", "other=o2")
	lines = e.waitLine(t, "^hook order/0 config-changed$", 2)
	unitOn(t, e.s, "order/0")
	if n := hostJobs(t, e.s, m, "order/0"); n != jobs {
		t.Errorf("after a change of other: %d host jobs ran tasks, want none", n-jobs)
	}
	if got := statFile(t, filepath.Join(dir, "a.conf")); got != a {
		t.Errorf("a.conf was written again: %+v, was %+v", got, a)
	}
	if got := statFile(t, filepath.Join(dir, "b.conf")); got != b {
		t.Errorf("b.conf was written again: %+v, was %+v", got, b)
	}
	if got := daemonPID(t, lines, "order/0", "da"); got != da {
		t.Errorf("da restarted: pid %d, was %d", got, da)
	}
	if got := daemonPID(t, lines, "order/0", "db"); got != db {
		t.Errorf("db restarted: pid %d, was %d", got, db)
	}
	if !e2etest.PIDAlive(da) || !e2etest.PIDAlive(db) {
		t.Errorf("da (%d) or db (%d) no longer runs", da, db)
	}

	e.s.OK(t, "config", "order", "a=a2")
	lines = e.waitLine(t, "^daemon order/0 da .* a2$", 1)
	e.waitLine(t, "^hook order/0 config-changed$", 3)
	unitOn(t, e.s, "order/0")
	if got, err := os.ReadFile(filepath.Join(dir, "a.conf")); err != nil || string(got) != "a=a2\n" {
		t.Errorf("a.conf holds %q (%v), want a=a2", got, err)
	}
	if got := statFile(t, filepath.Join(dir, "b.conf")); got != b {
		t.Errorf("b.conf was written again: %+v, was %+v", got, b)
	}
	if got := daemonPID(t, lines, "order/0", "da"); got == da || e2etest.PIDAlive(da) {
		t.Errorf("da's pid %d, was %d (alive: %v): want it restarted", got, da, e2etest.PIDAlive(da))
	}
	if got := daemonPID(t, lines, "order/0", "db"); got != db || !e2etest.PIDAlive(db) {
		t.Errorf("db's pid %d, was %d (alive: %v): want it untouched", got, db, e2etest.PIDAlive(db))
	}
	if n := installs(); n != 1 {
		t.Errorf("%d package installs, want the first only", n)
	}
	if n := len(daemonProcs(dir, "3601")) + len(daemonProcs(dir, "3602")); n != 2 {
		t.Errorf("%d daemon processes in %s, want 2", n, dir)
	}
}

// sharedCharm claims package shared and nothing else.
func sharedCharm(t *testing.T, e *claimsEnv, name string) string {
	return claimsCharm(t, name, e.log, "  packages:\n    - {name: shared, version: \"1.0\"}\n", "")
}

// TestClaimsSharedPackage: two units of two services on one machine claim
// one package at one version: removing the first leaves it installed,
// removing the second uninstalls it.
func TestClaimsSharedPackage(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.s.OK(t, "deploy", sharedCharm(t, e, "one"))
	m := unitOn(t, e.s, "one/0")
	e.s.OK(t, "deploy", sharedCharm(t, e, "two"), "--to", m)
	unitOn(t, e.s, "two/0")
	if pkgs := e.installed(t); pkgs["shared"] != "1.0" {
		t.Fatalf("fakepkg's records: %v, want shared 1.0", pkgs)
	}
	e.s.OK(t, "destroy-unit", "one/0")
	e.s.WaitStatus(t, "one/0 removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit("one/0")
		return !ok
	})
	if pkgs := e.installed(t); pkgs["shared"] != "1.0" {
		t.Errorf("after one/0 went, fakepkg's records: %v, want shared 1.0 still", pkgs)
	}
	e.s.OK(t, "destroy-unit", "two/0")
	e.s.WaitStatus(t, "two/0 removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit("two/0")
		return !ok
	})
	poll.Within(t, "shared to be uninstalled", 10*time.Second, func() (bool, string) {
		pkgs := e.installed(t)
		_, ok := pkgs["shared"]
		return !ok, fmt.Sprint(pkgs)
	})
	want := []string{"install shared 1.0", "remove shared"}
	if got := e.lines(t); !slices.Equal(got, want) {
		t.Errorf("fakepkg's log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestClaimsDaemonRestarted: a daemon killed with SIGKILL is started
// again (a new process, and the machine agent's log says it ended).
func TestClaimsDaemonRestarted(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	charm := claimsCharm(t, "dies", e.log, "  daemons:\n"+daemonClaim("d", e.log, "3603", ""), "")
	e.s.OK(t, "deploy", charm)
	m := unitOn(t, e.s, "dies/0")
	lines := e.waitLine(t, "^daemon dies/0 d ", 1)
	pid := daemonPID(t, lines, "dies/0", "d")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lines = e.waitLine(t, "^daemon dies/0 d ", 2)
	if got := daemonPID(t, lines, "dies/0", "d"); got == pid || !e2etest.PIDAlive(got) {
		t.Errorf("the daemon's pid is %d (alive: %v), was %d: want a new process", got, e2etest.PIDAlive(got), pid)
	}
	dir := unitDir(e.s, m, "dies/0")
	poll.Within(t, "one daemon process", 10*time.Second, func() (bool, string) {
		ps := daemonProcs(dir, "3603")
		return len(ps) == 1, e2etest.ProcList(ps)
	})
	b, err := os.ReadFile(filepath.Join(e.s.MachinesDir(), m, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`daemon ended.*unit=dies/0.*daemon=d`).Match(b) {
		t.Errorf("machine %s's agent log says nothing of the daemon's end:\n%s", m, b)
	}
}

// TestClaimsAgentKilledMidJob: the machine agent killed with SIGKILL
// while a new unit's package installs (for 3 s) is started again: the
// job completes, the unit starts, and its daemon runs once.
func TestClaimsAgentKilledMidJob(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t, "slowpkg")
	host := "  packages:\n    - {name: slowpkg}\n  daemons:\n" + daemonClaim("d", e.log, "3604", "")
	e.s.OK(t, "deploy", claimsCharm(t, "slow", e.log, host, "", "install", "start"))
	var m string
	e.s.WaitStatus(t, "slow/0 on a machine", time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit("slow/0")
		m = u.Machine
		return m != ""
	})
	poll.Within(t, "slowpkg's install to run", time.Minute, func() (bool, string) {
		ps := e2etest.Procs(func(p e2etest.Proc) bool {
			if len(p.Args) < 3 || p.Args[1] != "install" || !slices.Contains(p.Args, "slowpkg") {
				return false
			}
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID))
			return err == nil && strings.Contains(string(env), e.dir)
		})
		return len(ps) > 0, ""
	})
	agent := e2etest.ReadPID(t, filepath.Join(e.s.MachinesDir(), m, "pid"))
	args := agentArgs(t, agent)
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if lines := e.lines(t); slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "hook ") }) {
		t.Fatalf("a hook ran before the agent was killed, want it killed during the first job:\n%s", strings.Join(lines, "\n"))
	}
	poll.Within(t, "the agent to end", 10*time.Second, func() (bool, string) { return !e2etest.PIDAlive(agent), "" })
	restartAgent(t, e.s, m, args)
	unitOn(t, e.s, "slow/0")
	e.waitLine(t, "^hook slow/0 start$", 1)
	dir := unitDir(e.s, m, "slow/0")
	// Adoption or a second start would show in a few seconds.
	time.Sleep(3 * time.Second)
	if ps := daemonProcs(dir, "3604"); len(ps) != 1 {
		t.Errorf("daemon processes:\n%swant one", e2etest.ProcList(ps))
	}
	if pkgs := e.installed(t); pkgs["slowpkg"] != "1.0" {
		t.Errorf("fakepkg's records: %v, want slowpkg 1.0", pkgs)
	}
	var hooks []string
	for _, l := range e.lines(t) {
		if strings.HasPrefix(l, "hook ") {
			hooks = append(hooks, l)
		}
	}
	if want := []string{"hook slow/0 install", "hook slow/0 start"}; !slices.Equal(hooks, want) {
		t.Errorf("hooks ran:\n%s\nwant:\n%s", strings.Join(hooks, "\n"), strings.Join(want, "\n"))
	}
}

// TestClaimsForcedRemovalStopsDaemons: a unit forced out has its daemons
// stopped: no process of them is left.
func TestClaimsForcedRemovalStopsDaemons(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	host := "  daemons:\n" + daemonClaim("d1", e.log, "3605", "") + daemonClaim("d2", e.log, "3606", "")
	e.s.OK(t, "deploy", claimsCharm(t, "forced", e.log, host, ""))
	m := unitOn(t, e.s, "forced/0")
	dir := unitDir(e.s, m, "forced/0")
	lines := e.waitLine(t, "^daemon forced/0 d[12] ", 2)
	pids := []int{daemonPID(t, lines, "forced/0", "d1"), daemonPID(t, lines, "forced/0", "d2")}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	e.s.OK(t, "destroy-unit", "forced/0", "--force", "--no-wait")
	e.s.WaitStatus(t, "forced/0 removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit("forced/0")
		return !ok
	})
	poll.Within(t, "forced/0's daemons to end", 30*time.Second, func() (bool, string) {
		ps := append(daemonProcs(dir, "3605"), daemonProcs(dir, "3606")...)
		var alive []int
		for _, pid := range pids {
			if e2etest.PIDAlive(pid) {
				alive = append(alive, pid)
			}
		}
		return len(ps) == 0 && len(alive) == 0, fmt.Sprintf("alive %v\n%s", alive, e2etest.ProcList(ps))
	})
}

// TestClaimsForcedMachineEndsDaemons: a machine whose agent was killed
// with SIGKILL, forced out with its unit, has its unit's daemons ended by
// its provider, though each runs in a session of its own, apart from the
// agent's.
func TestClaimsForcedMachineEndsDaemons(t *testing.T) {
	t.Parallel()
	e := newClaimsEnv(t)
	e.s.OK(t, "deploy", claimsCharm(t, "orphan", e.log, "  daemons:\n"+daemonClaim("d", e.log, "3607", ""), ""))
	m := unitOn(t, e.s, "orphan/0")
	pid := daemonPID(t, e.waitLine(t, "^daemon orphan/0 d ", 1), "orphan/0", "d")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	agent := e2etest.ReadPID(t, filepath.Join(e.s.MachinesDir(), m, "pid"))
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.s.OK(t, "destroy-unit", "orphan/0", "--force", "--no-wait")
	e.s.OK(t, "destroy-machine", m, "--force", "--no-wait")
	e.s.WaitStatus(t, "machine "+m+" removed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Machines[m]
		return !ok
	})
	poll.Within(t, "orphan/0's daemon to end", 30*time.Second, func() (bool, string) {
		return !e2etest.PIDAlive(pid), fmt.Sprintf("pid %d runs", pid)
	})
}
