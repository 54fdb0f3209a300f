package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// charmWithHook makes a charm dir holding hooks/<name> with script as its
// content and mode, and a tools dir beside it.
func charmWithHook(t *testing.T, name, script string, mode os.FileMode) hooks.Spec {
	t.Helper()
	dir := tempDir(t)
	charmDir, toolsDir := filepath.Join(dir, "charm"), filepath.Join(dir, "tools")
	if err := os.MkdirAll(toolsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if script != "" {
		writeFile(t, filepath.Join(charmDir, "hooks", name), script, mode)
	} else if err := os.MkdirAll(filepath.Join(charmDir, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	return hooks.Spec{
		Unit:      "kv/0",
		Hook:      name,
		Path:      filepath.Join(charmDir, "hooks", name),
		CharmDir:  charmDir,
		ToolsDir:  toolsDir,
		AgentPath: "/usr/bin:/bin",
		Timeout:   time.Minute,
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunEnvironment checks that a hook sees exactly its variables plus
// PATH (the tools first), HOME and LANG, and runs in the charm dir.
func TestRunEnvironment(t *testing.T) {
	const script = "#!/bin/sh\ntr '\\0' '\\n' < /proc/$$/environ > env.out\npwd -P > cwd.out\n"
	lifelineEnv := map[string]string{
		hooks.EnvUnitName:    "kv/0",
		hooks.EnvService:     "kv",
		hooks.EnvMachineID:   "3",
		hooks.EnvHookName:    "db-relation-changed",
		hooks.EnvContextFile: "/run/ll/hook-contexts/x",
		hooks.EnvAgentSocket: "/run/ll/agent.sock",
		hooks.EnvRelation:    "db",
		hooks.EnvRelationID:  "db:3",
		hooks.EnvRemoteUnit:  "pg/1",
	}
	t.Setenv("LIFELINE_SECRET_OF_THE_AGENT", "leaked")
	tests := []struct {
		name   string
		modify func(*hooks.Spec)
		want   func(spec hooks.Spec) []string
	}{
		{
			name:   "defaults",
			modify: func(*hooks.Spec) {},
			want: func(s hooks.Spec) []string {
				return []string{"PATH=" + s.ToolsDir + ":/usr/bin:/bin", "HOME=" + s.CharmDir, "LANG=C.UTF-8"}
			},
		},
		{
			name: "home, lang and the agent's PATH",
			modify: func(s *hooks.Spec) {
				s.Home, s.AgentPath = "/home/agent", ""
				s.Env["LANG"] = "en_GB.UTF-8"
			},
			want: func(s hooks.Spec) []string {
				return []string{"PATH=" + s.ToolsDir + ":" + os.Getenv("PATH"), "HOME=/home/agent", "LANG=en_GB.UTF-8"}
			},
		},
		{
			name:   "relative hook path",
			modify: func(s *hooks.Spec) { s.Path = "hooks/" + s.Hook },
			want: func(s hooks.Spec) []string {
				return []string{"PATH=" + s.ToolsDir + ":/usr/bin:/bin", "HOME=" + s.CharmDir, "LANG=C.UTF-8"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := charmWithHook(t, "db-relation-changed", script, 0o755)
			spec.Env = map[string]string{hooks.EnvCharmDir: spec.CharmDir}
			for k, v := range lifelineEnv {
				spec.Env[k] = v
			}
			tt.modify(&spec)
			res, err := hooks.Run(context.Background(), spec)
			if err != nil || !res.Succeeded() {
				t.Fatalf("Run() = %+v, %v, want success", res, err)
			}
			got := strings.Fields(readFile(t, filepath.Join(spec.CharmDir, "env.out")))
			want := []string{hooks.EnvCharmDir + "=" + spec.CharmDir}
			for k, v := range lifelineEnv {
				want = append(want, k+"="+v)
			}
			want = append(want, tt.want(spec)...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("hook environment = %q, want %q", got, want)
			}
			if cwd := strings.TrimSpace(readFile(t, filepath.Join(spec.CharmDir, "cwd.out"))); cwd != spec.CharmDir {
				t.Errorf("hook working dir = %s, want %s", cwd, spec.CharmDir)
			}
		})
	}
}

func TestRunExitStatus(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		mode      os.FileMode
		wantCode  int
		wantSig   syscall.Signal
		wantSkip  bool
		wantOK    bool
		wantError string // a part of Run's error
		wantIs    error
	}{
		{name: "success", script: "#!/bin/sh\nexit 0\n", mode: 0o755, wantOK: true},
		{name: "failure", script: "#!/bin/sh\nexit 3\n", mode: 0o755, wantCode: 3},
		{name: "signal", script: "#!/bin/sh\nkill -SEGV $$\n", mode: 0o700, wantCode: -1, wantSig: syscall.SIGSEGV},
		{name: "stdin is /dev/null", script: "#!/bin/sh\nread line && exit 4\nexit 0\n", mode: 0o755, wantOK: true},
		{name: "missing", wantSkip: true},
		{name: "not executable", script: "#!/bin/sh\nexit 0\n", mode: 0o644, wantError: `hook "install" could not start: permission denied: `, wantIs: hooks.ErrNotExecutable},
		{name: "no #! line", script: "exit 0\n", mode: 0o755, wantError: `hook "install" could not start: exec format error: `},
		{name: "bad interpreter", script: "#!/usr/bin/python2.4\nexit 0\n", mode: 0o755, wantError: `hook "install" could not start: bad interpreter: /usr/bin/python2.4 of `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := charmWithHook(t, "install", tt.script, tt.mode)
			res, err := hooks.Run(context.Background(), spec)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) || !strings.Contains(err.Error(), spec.Path) {
					t.Fatalf("Run() = %+v, %v, want an error naming %s and saying %q", res, err, spec.Path, tt.wantError)
				}
				if !errors.As(err, new(*hooks.StartError)) {
					t.Errorf("Run() = %v, want a StartError", err)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("Run() = %v, want an error matching %v", err, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run() = %v, want no error", err)
			}
			if res.Skipped != tt.wantSkip || res.ExitCode != tt.wantCode || res.Signal != tt.wantSig || res.Succeeded() != tt.wantOK || res.Killed {
				t.Errorf("Run() = %+v (%s), want skipped %v, code %d, signal %v, succeeded %v",
					res, res, tt.wantSkip, tt.wantCode, tt.wantSig, tt.wantOK)
			}
		})
	}
}

// A hook file still open for writing somewhere (a process forked while a
// charm was unpacked holds the descriptor until it execs) cannot be
// executed for a moment: Run waits for it rather than failing the hook.
func TestRunWaitsForABusyHookFile(t *testing.T) {
	spec := charmWithHook(t, "install", "#!/bin/sh\nexit 0\n", 0o755)
	f, err := os.OpenFile(spec.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { f.Close() })
	res, err := hooks.Run(context.Background(), spec)
	if err != nil || !res.Succeeded() {
		t.Fatalf("Run() of a hook file busy for 100 ms = %+v, %v; want it run and succeeded", res, err)
	}
}

func TestRunRefusesBadSpecs(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*hooks.Spec)
		want   string
	}{
		{"relative charm dir", func(s *hooks.Spec) { s.CharmDir = "charm" }, `charm dir "charm" is not an absolute path`},
		{"relative tools dir", func(s *hooks.Spec) { s.ToolsDir = "tools" }, `tools dir "tools" is not an absolute path`},
		{"PATH in Env", func(s *hooks.Spec) { s.Env = map[string]string{"PATH": "/bin"} }, "Env sets PATH"},
		{"HOME in Env", func(s *hooks.Spec) { s.Env = map[string]string{"HOME": "/"} }, "Env sets HOME"},
		{"bad name", func(s *hooks.Spec) { s.Env = map[string]string{"A=B": "c"} }, `bad environment variable name "A=B"`},
		{"directory", func(s *hooks.Spec) { s.Path = s.CharmDir }, "is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := charmWithHook(t, "install", "#!/bin/sh\n", 0o755)
			tt.modify(&spec)
			if res, err := hooks.Run(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run() = %+v, %v, want an error saying %q", res, err, tt.want)
			}
		})
	}
}

// groupMembers returns the live (not zombie) processes of process group
// pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	var pids []int
	for _, pid := range procfs.PIDs() {
		// Gone meanwhile, or not of the group.
		if st, ok, err := procfs.ReadStat(pid); err == nil && ok && st.State != 'Z' && st.PGID == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGroupGone polls until process group pgid has no live process.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) }) // should it fail
	poll.UntilSays(t, fmt.Sprintf("process group %d gone", pgid), func() (bool, string) {
		pids := groupMembers(t, pgid)
		return len(pids) == 0, fmt.Sprintf("it still has processes %v", pids)
	})
}

// pidIn returns the pid a hook wrote into path, if it has.
func pidIn(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// readPid waits for a hook to have written a pid into path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	poll.Until(t, "a pid in "+path, func() bool {
		p, ok := pidIn(path)
		pid = p
		return ok
	})
	return pid
}

// TestRunKillsTheProcessGroup runs hooks that start a background child
// and hang: at the timeout, or when ctx ends, no process of the hook's
// group remains.
func TestRunKillsTheProcessGroup(t *testing.T) {
	const hang = "echo $$ > pgid.tmp && mv pgid.tmp pgid\nsleep 1000 &\nsleep 1000\n"
	tests := []struct {
		name     string
		script   string
		cancel   bool
		timedOut bool
	}{
		{name: "timeout", script: "#!/bin/sh\n" + hang, timedOut: true},
		{name: "timeout, SIGTERM ignored", script: "#!/bin/sh\ntrap '' TERM\n" + hang, timedOut: true},
		{name: "ctx cancelled", script: "#!/bin/sh\n" + hang, cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := charmWithHook(t, "start", tt.script, 0o755)
			spec.KillGrace = 200 * time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				go func() {
					defer cancel()
					for ctx.Err() == nil {
						if _, ok := pidIn(filepath.Join(spec.CharmDir, "pgid")); ok {
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			} else {
				// Long enough for the hook to write its group's id on a
				// loaded machine before it is killed.
				spec.Timeout = 2 * time.Second
			}
			res, err := hooks.Run(ctx, spec)
			if tt.cancel != errors.Is(err, context.Canceled) {
				t.Errorf("Run() error = %v, want context.Canceled: %v", err, tt.cancel)
			}
			if !res.Killed || res.TimedOut != tt.timedOut || res.Succeeded() {
				t.Errorf("Run() = %+v, want killed, timed out %v", res, tt.timedOut)
			}
			waitGroupGone(t, readPid(t, filepath.Join(spec.CharmDir, "pgid")))
		})
	}
}

// TestRunLeavesDaemonsRunning: a hook that exits normally may leave a
// process running, even one holding its output; Run returns anyway.
func TestRunLeavesDaemonsRunning(t *testing.T) {
	spec := charmWithHook(t, "start", "#!/bin/sh\necho $$ > pgid\nsleep 1000 &\necho started\n", 0o755)
	res, err := hooks.Run(context.Background(), spec)
	if err != nil || !res.Succeeded() {
		t.Fatalf("Run() = %+v, %v, want success", res, err)
	}
	pgid := readPid(t, filepath.Join(spec.CharmDir, "pgid"))
	defer syscall.Kill(-pgid, syscall.SIGKILL)
	if pids := groupMembers(t, pgid); len(pids) == 0 {
		t.Errorf("the hook's background process is gone, want it left running")
	}
	if !slices.Equal(res.Tail, []string{"started"}) {
		t.Errorf("Run().Tail = %q, want [started]", res.Tail)
	}
}

// TestRunOutputHeldOutsideTheGroup: a process outside the hook's process
// group holding its output (as a process the agent forks meanwhile does,
// until it execs) does not make Run wait for it: the hook left nothing of
// its own behind, so its output has ended.
func TestRunOutputHeldOutsideTheGroup(t *testing.T) {
	// The holder writes its pid once it has left the hook's group.
	script := "#!/bin/sh\necho started\nsetsid sh -c 'echo $$ > holder; exec sleep 30' &\n" +
		"while [ ! -s holder ]; do sleep 0.01; done\n"
	spec := charmWithHook(t, "start", script, 0o755)
	logger, rec := newRecordingLogger()
	spec.Logger = logger
	res, err := hooks.Run(context.Background(), spec)
	if err != nil || !res.Succeeded() {
		t.Fatalf("Run() = %+v, %v, want success", res, err)
	}
	holder := readPid(t, filepath.Join(spec.CharmDir, "holder"))
	defer syscall.Kill(holder, syscall.SIGKILL)
	if !slices.Equal(res.Tail, []string{"started"}) {
		t.Errorf("Run().Tail = %q, want [started]", res.Tail)
	}
	for _, e := range rec.all() {
		if e.level == hclog.Warn {
			t.Errorf("Run() warned %q: want no wait for a process outside the hook's group", e.msg)
		}
	}
}

func TestRunOutput(t *testing.T) {
	var script strings.Builder
	script.WriteString("#!/bin/sh\n")
	var lines []string
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&script, "echo 'line %d'\n", i)
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	script.WriteString("printf 'no newline'\n")
	lines = append(lines, "no newline")

	tests := []struct {
		name       string
		script     string
		tailLines  int
		wantStream string
		wantLines  []string
		wantTail   []string
	}{
		{"stdout", script.String(), 0, "stdout", lines, lines[len(lines)-20:]},
		{"stderr", "#!/bin/sh\nexec >&2\n" + script.String()[len("#!/bin/sh\n"):], 0, "stderr", lines, lines[len(lines)-20:]},
		{"tail of 5", script.String(), 5, "stdout", lines, lines[len(lines)-5:]},
		{"few lines", "#!/bin/sh\necho one\necho\necho 'three\r'\n", 0, "stdout", []string{"one", "", "three"}, []string{"one", "", "three"}},
		// A line longer than a read, and than a line may be: cut.
		{"long line", "#!/bin/sh\nhead -c 20000 /dev/zero | tr '\\0' x\necho\necho end\n", 0, "stdout",
			[]string{strings.Repeat("x", 16<<10), strings.Repeat("x", 20000-16<<10), "end"}, []string{strings.Repeat("x", 16<<10), strings.Repeat("x", 20000-16<<10), "end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := charmWithHook(t, "config-changed", tt.script, 0o755)
			logger, rec := newRecordingLogger()
			spec.Logger = logger
			spec.TailLines = tt.tailLines
			res, err := hooks.Run(context.Background(), spec)
			if err != nil || !res.Succeeded() {
				t.Fatalf("Run() = %+v, %v, want success", res, err)
			}
			if !slices.Equal(res.Tail, tt.wantTail) {
				t.Errorf("Run().Tail = %q, want %q", res.Tail, tt.wantTail)
			}
			var got []string
			for _, e := range rec.all() {
				if e.kv["stream"] == nil {
					continue
				}
				if e.kv["unit"] != "kv/0" || e.kv["hook"] != "config-changed" || e.kv["stream"] != tt.wantStream || e.level != hclog.Info {
					t.Errorf("logged %q at %v with %v, want info with unit kv/0, hook config-changed, stream %s", e.msg, e.level, e.kv, tt.wantStream)
				}
				got = append(got, e.msg)
			}
			if !slices.Equal(got, tt.wantLines) {
				t.Errorf("logged lines = %q, want %q", got, tt.wantLines)
			}
		})
	}
}

// TestRunAllocatesLittle: running a hook that writes nothing allocates a
// few KiB, not a buffer of 32 KiB for each of its output streams (io.Copy
// through os.File's WriteTo did): thousands of hooks a minute are the
// agent's garbage.
func TestRunAllocatesLittle(t *testing.T) {
	spec := charmWithHook(t, "install", "#!/bin/sh\nexit 0\n", 0o755)
	run := func() {
		if res, err := hooks.Run(context.Background(), spec); err != nil || !res.Succeeded() {
			t.Fatalf("Run() = %+v, %v, want success", res, err)
		}
	}
	run()
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		run()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	if per > 24<<10 {
		t.Errorf("a hook's run allocated %d bytes, want at most %d", per, 24<<10)
	}
}

func TestResultString(t *testing.T) {
	tests := []struct {
		r    hooks.Result
		want string
	}{
		{hooks.Result{}, "exited 0"},
		{hooks.Result{ExitCode: 2}, "exited 2"},
		{hooks.Result{Skipped: true}, "skipped: no hook file"},
		{hooks.Result{ExitCode: -1, Killed: true, TimedOut: true, Signal: syscall.SIGTERM}, "killed at its timeout"},
		{hooks.Result{ExitCode: -1, Killed: true, Signal: syscall.SIGTERM}, "killed: interrupted"},
		{hooks.Result{ExitCode: -1, Signal: syscall.SIGSEGV}, "ended by signal segmentation fault"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.r, got, tt.want)
		}
	}
}
