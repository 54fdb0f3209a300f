package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// The documentation's examples, run as shown: every command of the
// README's tour and of the Example section of ctl's --help and of each of
// its commands' runs, in order, against a real controller and the demo
// charms, from a directory laid out as the repository's root (its
// examples/charms the built copies). Every path an example names must
// exist in the repository.
//
// Examples run in scenarios, each with a sandbox of its own: one for the
// README's tour, one for ctl's own example followed by most commands' (so
// their examples must make sense one after the other, and kill-controller's
// come last), one for wait's, and one for each of bootstrap's. What the
// test adds is listed here and nowhere else: the sandbox's port and
// loopback network given to every ctl bootstrap (and its --data-dir moved
// into the sandbox), a few steps of its own between groups (docSetups),
// the refusals the documentation shows (docRefusals), and the commands
// that run until interrupted (docInterrupted).

// docScenarios lists the groups of examples each scenario runs, in order:
// "README.md" for the tour, "ctl" for ctl --help, "ctl NAME" for ctl NAME
// --help. Every group with examples is in exactly one.
var docScenarios = []struct {
	name   string
	groups []string
	// bootstrap has the test start the controller; otherwise the first
	// example does.
	bootstrap bool
	// each runs every example of the one group in a sandbox of its own.
	each bool
}{
	{name: "tour", groups: []string{"README.md"}},
	{name: "commands", groups: []string{
		"ctl", "ctl deploy", "ctl add-unit", "ctl add-machine", "ctl join-token", "ctl add-relation", "ctl config", "ctl status",
		"ctl show-unit", "ctl show-machine", "ctl show-status-log", "ctl resolved", "ctl destroy-relation", "ctl destroy-unit", "ctl destroy-machine",
		"ctl destroy-service", "ctl add-controller", "ctl kill-controller",
	}},
	{name: "wait", groups: []string{"ctl wait"}, bootstrap: true},
	// add-user writes bob's token, which register reads; the commands
	// after run as admin or, with --config bob.json, as bob.
	{name: "users", groups: []string{
		"ctl add-user", "ctl register", "ctl users", "ctl whoami", "ctl dashboard", "ctl set-role", "ctl rotate-credential",
		"ctl audit", "ctl remove-user",
	}, bootstrap: true},
	// Operations, numbered as the examples name them: run makes 1 (keys),
	// 2 (backup, awaiting) and 3 (reindex); the setups make 4 and 5
	// (olga's backups, for approve, execute and reject) and 6 (a long
	// reindex, for the verbs and logs).
	{name: "operations", groups: []string{
		"ctl actions", "ctl run", "ctl operations", "ctl show-operation", "ctl show-task", "ctl approve", "ctl execute",
		"ctl reject", "ctl pause", "ctl resume", "ctl stop", "ctl logs", "ctl debug-log",
	}, bootstrap: true},
	// Revisions: the setup deploys kv from an older copy of its charm (an
	// option more) and makes revisions 2 and 3 (two ports); the refresh
	// to the demo's kv makes 4; the rollbacks make 5 (to 3, the old charm
	// again) and 6 (to 1). set-rollout leaves a canary of 1 and a
	// min-healthy of 5m, so that the rollout to revision 7 (rollout's
	// setup) is in its canary, then not done before the abort, whether
	// units move or not.
	{name: "revisions", groups: []string{"ctl revisions", "ctl refresh", "ctl rollback", "ctl set-rollout", "ctl rollout"}, bootstrap: true},
	{name: "everyday", groups: []string{"ctl version", "ctl completion", "ctl controllers", "ctl switch", "ctl plan", "ctl apply", "ctl export"}, bootstrap: true},
	{name: "bootstrap", groups: []string{"ctl bootstrap"}, each: true},
}

// docSetups are the test's own steps before a group of examples: what
// the examples rely on that no example before them does.
var docSetups = map[string]func(t *testing.T, s *e2etest.Sandbox){
	// resolved's examples answer cache's units, in an error state once
	// their hooks have failed five times (over a minute; before that they
	// show error too, but a retry could run between the cause's fix and
	// the example): the port kv-server cannot listen on is set well
	// before, while other groups run, without auto-revert (which would
	// take it back at once).
	"ctl add-unit": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "set-rollout", "cache", "--auto-revert=false")
		s.OK(t, "config", "cache", "port=70000")
	},
	"ctl resolved": func(t *testing.T, s *e2etest.Sandbox) {
		for _, u := range []string{"cache/0", "cache/1"} {
			s.WaitStatus(t, u+" in an error state", 3*time.Minute, func(doc *e2etest.StatusDoc) bool {
				d, _ := doc.Unit(u)
				return d.Agent == "error" && strings.HasSuffix(d.State, "-error")
			})
		}
	},
	// The cause fixed once resolved's examples ran: a new revision, to
	// which the units move, giving up their failed config-changed (fixed
	// before, it would have taken them out of their error states before
	// the examples answer them).
	"ctl destroy-relation": func(t *testing.T, s *e2etest.Sandbox) { s.OK(t, "config", "cache", "--reset", "port") },
	"ctl actions": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "deploy", charmPath(t, "kv"), "-n", "2")
		s.OK(t, "wait", "--timeout", "3m")
		newUser(t, s, "olga", "operator")
	},
	"ctl approve": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "--config", filepath.Join(s.Dir, "olga.json"), "run", "kv", "backup", "name=weekly")
	},
	"ctl reject": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "--config", filepath.Join(s.Dir, "olga.json"), "run", "kv", "backup", "name=monthly")
	},
	"ctl pause": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "run", "kv", "reindex", "steps=3000", "step-ms=100")
		waitTask(t, s, "6", "kv/0", "running", 2*time.Minute)
		waitTask(t, s, "6", "kv/1", "running", 2*time.Minute)
	},
	"ctl resume": func(t *testing.T, s *e2etest.Sandbox) {
		waitTask(t, s, "6", "kv/0", "paused", time.Minute)
		waitTask(t, s, "6", "kv/1", "paused", time.Minute)
	},
	"ctl logs": func(t *testing.T, s *e2etest.Sandbox) { waitOpEnd(t, s, "6", time.Minute) },
	"ctl revisions": func(t *testing.T, s *e2etest.Sandbox) {
		s.OK(t, "deploy", olderCharm(t, "kv"))
		s.OK(t, "config", "kv", "port=7071")
		s.OK(t, "config", "kv", "port=7072")
	},
	"ctl rollout": func(t *testing.T, s *e2etest.Sandbox) { s.OK(t, "config", "kv", "port=7073") },
}

// olderCharm is a copy of the demo charm name with an option more, as
// an older revision of it: what ctl refresh moves from.
func olderCharm(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dir, os.DirFS(charmPath(t, name))); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "config.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("  legacy:\n    type: string\n    default: \"\"\n    description: an option the newer revision drops\n"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docRefusals are the examples shown failing, each with its exit status
// and what it says on stderr.
var docRefusals = []struct {
	group, command string
	code           int
	msg            string
}{
	{"README.md", "ctl destroy-machine 0", 1, "ctl: machine 0 has unit kv/0 assigned"},
	// The sandboxes name their client config with LIFELINE_CONFIG, which
	// names one file: the named controllers are not consulted
	// (cmd/ctl TestNamedControllers runs them without it).
	{"ctl controllers", "ctl controllers", 1, "LIFELINE_CONFIG is set"},
	{"ctl controllers", "ctl controllers --format json", 1, "LIFELINE_CONFIG is set"},
	{"ctl switch", "ctl switch staging", 1, "LIFELINE_CONFIG is set"},
	{"ctl switch", "ctl switch default", 1, "LIFELINE_CONFIG is set"},
}

// docInterrupted are the examples that run until interrupted: each must
// print something, then end with status 0 on SIGINT.
var docInterrupted = []string{"ctl status --watch", "ctl audit --entity bob --follow", "ctl rollout status kv --watch",
	"ctl debug-log --include kv --follow"}

// docExample is one command line of the documentation.
type docExample struct {
	group string // as in docScenarios
	where string // where it is shown, for messages
	line  string // as shown, without its comment
}

func TestDocExamples(t *testing.T) {
	// Parallel, so that its scenarios (parallel subtests) overlap the
	// package's other tests, not only one another.
	t.Parallel()
	needCharms(t)
	root, err := e2etest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The directory examples run from: the repository's layout, its demo
	// charms the copies TestMain built.
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(charmsDir, filepath.Join(work, "examples", "charms")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "examples", "manifests"), filepath.Join(work, "examples", "manifests")); err != nil {
		t.Fatal(err)
	}

	groups := map[string][]docExample{"README.md": readmeTour(t, root)}
	probe := newSandbox(t) // no controller: for --help alone
	for _, name := range append([]string{""}, ctlCommands(t, probe)...) {
		g := strings.TrimSpace("ctl " + name)
		groups[g] = helpExamples(t, probe, g)
	}
	covered := map[string]bool{}
	for _, sc := range docScenarios {
		for _, g := range sc.groups {
			if _, ok := groups[g]; !ok {
				t.Errorf("scenario %s runs the examples of %q, which ctl does not have", sc.name, g)
			}
			covered[g] = true
		}
	}
	for g, exs := range groups {
		if len(exs) == 0 {
			t.Errorf("%s shows no example", g)
		}
		if !covered[g] {
			t.Errorf("no scenario runs the examples of %s: add them to docScenarios", g)
		}
		for _, ex := range exs {
			checkPaths(t, root, ex)
		}
	}
	for _, ex := range readmeInline(t, root) {
		checkPaths(t, root, ex)
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, sc := range docScenarios {
		var exs []docExample
		for _, g := range sc.groups {
			exs = append(exs, groups[g]...)
		}
		if sc.each {
			for i, ex := range exs {
				t.Run(fmt.Sprintf("%s/%d", sc.name, i), func(t *testing.T) {
					t.Parallel()
					s := newSandbox(t)
					runExample(t, s, root, work, ex)
					s.OK(t, "status")
				})
			}
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s := newSandbox(t)
			// The default data directory, where ctl bootstrap without
			// --data-dir puts the controller: its machines too are the
			// teardown's to stop.
			s.AddMachinesDir(filepath.Join(s.Dir, "lifeline", "controller", "machines"))
			if sc.bootstrap {
				s.Bootstrap(t)
			}
			group := ""
			for _, ex := range exs {
				if ex.group != group {
					group = ex.group
					if setup := docSetups[group]; setup != nil {
						setup(t, s)
					}
				}
				runExample(t, s, root, work, ex)
			}
		})
	}
}

// readmeTour returns the ctl commands of the code blocks of the README's
// "A tour" section, in order.
func readmeTour(t *testing.T, root string) []docExample {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []docExample
	inTour, inCode := false, false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inTour = line == "## A tour"
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
		case inTour && inCode && strings.HasPrefix(line, "ctl "):
			out = append(out, docExample{group: "README.md", where: fmt.Sprintf("README.md:%d", i+1), line: stripComment(line)})
		}
	}
	if len(out) == 0 {
		t.Fatal("README.md has no ctl command in the code blocks of its tour")
	}
	return out
}

// readmeInline returns the ctl commands the README shows in its text, in
// `ctl ...` spans: their paths are checked, not run.
func readmeInline(t *testing.T, root string) []docExample {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []docExample
	for i, line := range strings.Split(string(data), "\n") {
		for _, m := range regexp.MustCompile("`(ctl [^`]+)`").FindAllStringSubmatch(line, -1) {
			out = append(out, docExample{group: "README.md", where: fmt.Sprintf("README.md:%d", i+1), line: m[1]})
		}
	}
	return out
}

// ctlCommands lists ctl's commands, as ctl --help does (but help).
func ctlCommands(t *testing.T, s *e2etest.Sandbox) []string {
	t.Helper()
	var out []string
	listing := false
	for _, line := range strings.Split(s.OK(t, "--help"), "\n") {
		switch {
		case line == "Available Commands:":
			listing = true
		case listing && strings.HasPrefix(line, "  "):
			if name := strings.Fields(line)[0]; name != "help" {
				out = append(out, name)
			}
		default:
			listing = false
		}
	}
	if len(out) == 0 {
		t.Fatal("ctl --help lists no command")
	}
	return out
}

// helpExamples returns the commands of the Example section of the group's
// --help ("ctl" or "ctl NAME").
func helpExamples(t *testing.T, s *e2etest.Sandbox, group string) []docExample {
	t.Helper()
	args := append(strings.Fields(group)[1:], "--help")
	var out []docExample
	inExample := false
	for _, line := range strings.Split(s.OK(t, args...), "\n") {
		switch {
		case line == "Example:":
			inExample = true
		case inExample && strings.HasPrefix(line, "  "):
			out = append(out, docExample{group: group, where: group + " --help", line: stripComment(strings.TrimSpace(line))})
		default:
			inExample = false
		}
	}
	return out
}

// stripComment removes a shell comment (from a # after a blank, outside
// quotes) and the blanks before it.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return line
}

var unitNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*/[0-9]+$`)

// checkPaths fails the test for a relative path an example names that
// the repository does not have (absolute ones are a host's: bootstrap's
// --data-dir).
func checkPaths(t *testing.T, root string, ex docExample) {
	t.Helper()
	for _, part := range strings.Split(ex.line, "&&") {
		cmd, _, _ := strings.Cut(part, "|") // what a pipe feeds is not ctl's
		for _, arg := range strings.Fields(cmd) {
			if strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "/") || !strings.Contains(arg, "/") || unitNameRE.MatchString(arg) {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, arg)); err != nil {
				t.Errorf("%s: %q names %s, which the repository does not have", ex.where, ex.line, arg)
			}
		}
	}
}

// runExample runs one example in the sandbox from dir and checks how it
// ended: status 0, or what docRefusals says; the commands it suggests
// must name paths the repository at root has.
func runExample(t *testing.T, s *e2etest.Sandbox, root, dir string, ex docExample) {
	t.Helper()
	line := ex.line
	if strings.HasPrefix(line, "ctl bootstrap") {
		line = sandboxBootstrap(s, line)
	}
	if slices.Contains(docInterrupted, line) {
		runInterrupted(t, s, dir, ex, line)
		return
	}
	script, note := line, ""
	if tool := missingTool(line); tool != "" {
		// What the pipe feeds needs a tool this host lacks: run ctl's
		// part alone.
		script, _, _ = strings.Cut(line, "|")
		note = fmt.Sprintf(" (without %s, not installed here)", tool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := shell(ctx, s, dir, script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		t.Fatalf("%s: %s%s: %v\nstdout:\n%s\nstderr:\n%s", ex.where, line, note, err, stdout.String(), stderr.String())
	}
	wantCode, wantMsg := 0, ""
	for _, r := range docRefusals {
		if r.group == ex.group && r.command == ex.line {
			wantCode, wantMsg = r.code, r.msg
		}
	}
	if code != wantCode || !strings.Contains(stderr.String(), wantMsg) {
		want := "exit status 0"
		if wantCode != 0 {
			want = fmt.Sprintf("exit status %d and %q on stderr, as the documentation shows", wantCode, wantMsg)
		}
		t.Fatalf("%s: %s%s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant %s", ex.where, line, note, code, stdout.String(), stderr.String(), want)
	}
	t.Logf("%s: %s%s: exit %d in %s\n%s", ex.where, line, note, code, time.Since(start).Round(100*time.Millisecond), firstLines(stdout.String(), 4))
	// The commands ctl suggests next (bootstrap's) name real paths too.
	for _, hint := range suggested(stdout.String()) {
		checkPaths(t, root, docExample{group: ex.group, where: ex.where + ", its output", line: hint})
	}
}

// suggested returns the commands ctl's output suggests: the lines after
// "next:", each "  ctl COMMAND  what it does".
func suggested(out string) []string {
	_, next, ok := strings.Cut(out, "\nnext:\n")
	if !ok {
		return nil
	}
	var cmds []string
	for _, line := range strings.Split(next, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "ctl ") {
			break
		}
		cmd, _, _ := strings.Cut(line, "  ")
		cmds = append(cmds, cmd)
	}
	return cmds
}

// firstLines returns the first n lines of out, indented.
func firstLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return "    " + strings.Join(lines, "\n    ")
}

// runInterrupted runs an example that runs until interrupted: once it has
// printed a line, SIGINT must end it with status 0.
func runInterrupted(t *testing.T, s *e2etest.Sandbox, dir string, ex docExample, line string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := s.CtlCommand(ctx, "", strings.Fields(line)[1:]...)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	first, err := out.ReadString('\n')
	if err != nil {
		_ = cmd.Wait()
		t.Fatalf("%s: %s printed nothing: %v\nstderr:\n%s", ex.where, line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out) // what it prints until it exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %s, interrupted: %v, want exit status 0\nstderr:\n%s", ex.where, line, err, stderr.String())
	}
	t.Logf("%s: %s: printed %q, ended on SIGINT", ex.where, line, strings.TrimSpace(first))
}

// sandboxBootstrap gives a ctl bootstrap line the sandbox's API port and
// loopback network, and moves a --data-dir into the sandbox: the host's
// ports, networks and directories are not the test's to take.
func sandboxBootstrap(s *e2etest.Sandbox, line string) string {
	args := strings.Fields(line)
	port, network := false, false
	for i := 2; i+1 < len(args); i++ {
		switch args[i] {
		case "--data-dir":
			args[i+1] = filepath.Join(s.Dir, strings.TrimPrefix(args[i+1], "/"))
		case "--api-port":
			args[i+1], port = strconv.Itoa(s.Port), true
		case "--local-network":
			args[i+1], network = s.Network, true
		}
	}
	if !port {
		args = append(args, "--api-port", strconv.Itoa(s.Port))
	}
	if !network {
		args = append(args, "--local-network", s.Network)
	}
	return strings.Join(args, " ")
}

// missingTool returns the first program a pipe in line feeds that is not
// installed, or "".
func missingTool(line string) string {
	parts := strings.Split(line, "|")
	for _, p := range parts[1:] {
		if f := strings.Fields(p); len(f) > 0 {
			if _, err := exec.LookPath(f[0]); err != nil {
				return f[0]
			}
		}
	}
	return ""
}

// shell runs script with bash from dir, with the sandbox's environment and
// its ctl first on the PATH; a pipeline fails when any of its commands
// does.
func shell(ctx context.Context, s *e2etest.Sandbox, dir, script string) *exec.Cmd {
	env := s.CtlCommand(ctx, "").Env
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail\n"+script)
	cmd.Dir = dir
	cmd.Env = append(env, "PATH="+filepath.Dir(s.Bin.Ctl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}
