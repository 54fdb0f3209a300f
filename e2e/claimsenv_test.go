package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// claimsEnv is a sandbox whose local machines' agents carry out package
// claims with fakepkg, through a wrapper that gives it its records
// (db.json) and its log: the log every line of the test's charms' hooks
// and daemons goes to as well, so that its order is the order things
// happened in on the machine.
type claimsEnv struct {
	s   *e2etest.Sandbox
	dir string // the wrapper's, the records', the log's
	log string
}

// newClaimsEnv starts a controller whose machine agents use fakepkg as
// their package manager; installs of the packages named slow wait 3 s
// first.
func newClaimsEnv(t *testing.T, slow ...string) *claimsEnv {
	t.Helper()
	s := newSandbox(t)
	e := &claimsEnv{s: s, dir: filepath.Join(s.Dir, "claims")}
	e.log = filepath.Join(e.dir, "order.log")
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(e.dir, "pkg")
	script := fmt.Sprintf("#!/bin/sh\nFAKEPKG_DB=%s FAKEPKG_LOG=%s FAKEPKG_SLOW=%s FAKEPKG_SLEEP=3s\nexport FAKEPKG_DB FAKEPKG_LOG FAKEPKG_SLOW FAKEPKG_SLEEP\nexec %s \"$@\"\n",
		filepath.Join(e.dir, "db.json"), e.log, strings.Join(slow, ","), bins.Fakepkg)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s.StartController(t, "--local-agent-arg=--package-manager=exec:"+wrapper)
	return e
}

// installed is fakepkg's record: installed packages by name, with their
// versions.
func (e *claimsEnv) installed(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile(filepath.Join(e.dir, "db.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("fakepkg's records: %v", err)
	}
	return out
}

// lines are the log's lines.
func (e *claimsEnv) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.log)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// waitLine waits until the log holds n lines matching re, and returns
// the log's lines.
func (e *claimsEnv) waitLine(t *testing.T, re string, n int) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var lines []string
	poll.Within(t, fmt.Sprintf("%d lines of %q in the log", n, re), time.Minute, func() (bool, string) {
		lines = e.lines(t)
		got := 0
		for _, l := range lines {
			if rx.MatchString(l) {
				got++
			}
		}
		return got >= n, strings.Join(lines, "\n")
	})
	return lines
}

// daemonPID is the pid the log says daemon name (of unit) last started
// with: its lines are "daemon UNIT NAME PID ...".
func daemonPID(t *testing.T, lines []string, unit, name string) int {
	t.Helper()
	pid := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == "daemon" && f[1] == unit && f[2] == name {
			n, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			pid = n
		}
	}
	if pid == 0 {
		t.Fatalf("no daemon %s of %s in the log:\n%s", name, unit, strings.Join(lines, "\n"))
	}
	return pid
}

// claimsCharm writes a charm named name whose hooks (those named) log
// "hook UNIT HOOK" to log, and whose metadata.yaml has host claims host
// (the text under "host:", indented), with config options config (the
// text under "options:", indented; none when empty).
func claimsCharm(t *testing.T, name, log, host, config string, hooks ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	files := map[string]string{
		"metadata.yaml": "name: " + name + "\nsummary: claims on its host\ndescription: for tests\nhost:\n" + host,
	}
	if config != "" {
		files["config.yaml"] = "options:\n" + config
	}
	for _, h := range hooks {
		files["hooks/"+h] = fmt.Sprintf("#!/bin/sh\necho \"hook $LIFELINE_UNIT_NAME %s\" >>%s\n", h, log)
	}
	for file, content := range files {
		path := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// daemonClaim is a daemon claim (YAML, indented under daemons:) whose
// process logs "daemon UNIT NAME PID EXTRA" to log as it starts and then
// sleeps as sleep SECS (its command line once started, in its unit's
// directory).
func daemonClaim(name, log, secs, extra string) string {
	return fmt.Sprintf("    - name: %s\n      command: [sh, -c, 'echo \"daemon {{ unit_name }} %s $$ %s\" >>%s; exec sleep %s']\n",
		name, name, extra, log, secs)
}

// daemonProcs lists the processes running sleep secs in dir (a unit's
// directory): its daemon's.
func daemonProcs(dir, secs string) []e2etest.Proc {
	return e2etest.Procs(func(p e2etest.Proc) bool {
		return p.Cwd == dir && len(p.Args) == 2 && p.Args[0] == "sleep" && p.Args[1] == secs
	})
}

// unitOn waits for unit to be idle and running, and returns its machine.
func unitOn(t *testing.T, s *e2etest.Sandbox, unit string) string {
	t.Helper()
	doc := s.WaitStatus(t, unit+" idle, running", 2*time.Minute, func(doc *e2etest.StatusDoc) bool {
		u, _ := doc.Unit(unit)
		return u.Agent == "idle" && u.State == "running" && u.Machine != ""
	})
	u, _ := doc.Unit(unit)
	return u.Machine
}

// restartAgent starts machine m's agent again with args (its command
// line when it ran), as its provider started it: in a session of its
// own, logging to its agent.log; the sandbox's teardown ends it and
// waits for it.
func restartAgent(t *testing.T, s *e2etest.Sandbox, m string, args []string) *exec.Cmd {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.MachinesDir(), m, "agent.log"), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	s.OnStop(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd
}

// agentArgs is the command line of process pid.
func agentArgs(t *testing.T, pid int) []string {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
}
