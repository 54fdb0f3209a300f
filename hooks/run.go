package hooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	// DefaultTimeout is how long a hook may run when Spec.Timeout is zero.
	DefaultTimeout = 5 * time.Minute
	// DefaultKillGrace is how long a hook's process group has between
	// SIGTERM and SIGKILL when Spec.KillGrace is zero.
	DefaultKillGrace = 5 * time.Second
	// DefaultTailLines is how many of its last output lines a hook's Result
	// keeps when Spec.TailLines is zero.
	DefaultTailLines = 20

	// outputWait is how long Run keeps reading a hook's output after the
	// hook exited, for processes it left running that hold its stdout or
	// stderr open (a daemon started without redirecting them). After that
	// Run closes the pipes and returns.
	outputWait = 2 * time.Second
	// drainWait is how long Run waits for the end of a hook's output after
	// the hook exited leaving no process behind: what it wrote is read at
	// once, but the end can come late when a process forked meanwhile by
	// the agent's process (another unit's hook, say) holds a copy of the
	// pipe until it execs.
	drainWait = 200 * time.Millisecond
	// groupPoll is how often Run checks, while killing a hook, whether its
	// process group is gone.
	groupPoll = 20 * time.Millisecond
)

// ErrNotExecutable is matched (errors.Is) by Run's error for a hook file
// that exists but may not be executed.
var ErrNotExecutable = errors.New("not executable")

// Spec says how to run one hook.
type Spec struct {
	// Unit and Hook label the hook's log lines (keys "unit" and "hook") and
	// Run's errors: "kv/0", "config-changed".
	Unit string
	Hook string
	// Path is the hook's executable, absolute or relative to CharmDir
	// ("hooks/install"). It is executed directly, never through a shell,
	// so a script needs its #! line.
	Path string
	// CharmDir is the charm directory: absolute, the hook's working
	// directory and, unless Home is set, its HOME.
	CharmDir string
	// ToolsDir is the absolute directory of the hook tools (InstallTools):
	// the first entry of the hook's PATH.
	ToolsDir string
	// Env holds the hook's LIFELINE_* variables (the Env* constants). The
	// hook's environment is exactly Env plus PATH, HOME and LANG (C.UTF-8
	// unless Env sets it): nothing of the agent's environment leaks in.
	// Env must not hold PATH or HOME: they come from ToolsDir, AgentPath and
	// Home.
	Env map[string]string
	// AgentPath is the rest of the hook's PATH, after ToolsDir. Empty means
	// the agent's own PATH.
	AgentPath string
	// Home is the hook's HOME; empty means CharmDir.
	Home string
	// Timeout bounds the hook's run (DefaultTimeout when zero). At the
	// timeout, or when Run's ctx ends, the hook's whole process group gets
	// SIGTERM, then SIGKILL after KillGrace (DefaultKillGrace when zero).
	Timeout   time.Duration
	KillGrace time.Duration
	// TailLines is how many of its last output lines the Result keeps
	// (DefaultTailLines when zero).
	TailLines int
	// Logger receives every line the hook writes, at info level, with keys
	// "unit", "hook" and "stream" (stdout or stderr). Nil discards them.
	Logger hclog.Logger
	// Lines, when set, is called with every line the hook writes, as it
	// completes, from one goroutine a stream ("stdout" or "stderr"): an
	// action's log.
	Lines func(stream, line string)
	// Started, when set, is called with the hook's pid (its process
	// group's id) once it has started.
	Started func(pid int)
}

// Result says how a hook's run ended.
type Result struct {
	// Skipped is true when the hook file does not exist: nothing was run,
	// and the hook counts as done (a missing hook is skipped).
	Skipped bool
	// ExitCode is the hook's exit status, or -1 when a signal ended it.
	ExitCode int
	// Signal is the signal that ended the hook, if one did.
	Signal syscall.Signal
	// TimedOut is true when the hook ran into Spec.Timeout; Killed when Run
	// killed its process group, at the timeout or because ctx ended. A
	// killed hook has failed whatever its exit code.
	TimedOut bool
	Killed   bool
	// Duration is how long the hook ran.
	Duration time.Duration
	// Tail is the hook's last output lines, stdout and stderr interleaved
	// as they arrived, oldest first, for the unit's status history.
	Tail []string
}

// Succeeded reports whether the hook ran and exited 0 without being killed.
func (r Result) Succeeded() bool { return !r.Skipped && !r.Killed && r.ExitCode == 0 }

// String says in a few words how the hook ended: "exited 0", "exited 3",
// "killed at its timeout", "ended by signal terminated", "skipped: no
// hook file".
func (r Result) String() string {
	switch {
	case r.Skipped:
		return "skipped: no hook file"
	case r.TimedOut:
		return "killed at its timeout"
	case r.Killed:
		return "killed: interrupted"
	case r.Signal != 0:
		return "ended by signal " + r.Signal.String()
	}
	return fmt.Sprintf("exited %d", r.ExitCode)
}

// Run runs one hook as a child process in its own process group and
// waits for it, streaming its output into spec.Logger. Its stdin is
// /dev/null.
//
// A missing hook file is not run: Run returns Result{Skipped: true} and no
// error. Run returns an error, naming the file, when the hook cannot be
// run (not executable, not a regular file, no #! line, a bad Spec), and
// when ctx ends while the hook runs: then the hook's process group has been
// killed, the Result says so, and the error matches ctx.Err(). A hook that
// fails or times out is not an error: the Result says how it ended.
//
// When the hook exits normally, processes it started in the background
// are left running (a start hook may launch a daemon); Run stops reading
// their output shortly after the hook exits.
func Run(ctx context.Context, spec Spec) (Result, error) {
	env, err := spec.environ()
	if err != nil {
		return Result{}, err
	}
	path := spec.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(spec.CharmDir, path)
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return Result{Skipped: true}, nil
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return Result{}, fmt.Errorf("hook %s: %w", spec.Hook, err)
	case !fi.Mode().IsRegular():
		return Result{}, &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("%s is not a regular file", spec.Path)}
	case fi.Mode().Perm()&0o111 == 0:
		return Result{}, &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("permission denied: %s is not executable (mode %s)", spec.Path, fi.Mode().Perm()), Err: ErrNotExecutable}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("hook %s not run: %w", spec.Hook, err)
	}

	logger := spec.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.With("unit", spec.Unit, "hook", spec.Hook)
	out := newOutput(logger, orDefault(spec.TailLines, DefaultTailLines))
	out.onLine = spec.Lines
	stdout, stderr := out.stream("stdout"), out.stream("stderr")
	pipes, err := newOutputPipes(stdout, stderr)
	if err != nil {
		return Result{}, fmt.Errorf("hook %s: %w", spec.Hook, err)
	}
	defer pipes.close()
	var cmd *exec.Cmd
	start := time.Now()
	err = startBusy(ctx, func() error {
		cmd = &exec.Cmd{
			Path:        path,
			Args:        []string{path},
			Dir:         spec.CharmDir,
			Env:         env,
			Stdout:      pipes.w[0],
			Stderr:      pipes.w[1],
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		}
		return cmd.Start()
	})
	pipes.started()
	if err != nil {
		return Result{}, startError(spec, path, err)
	}
	logger.Debug("hook started", "pid", cmd.Process.Pid)
	if spec.Started != nil {
		spec.Started(cmd.Process.Pid)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	timer := time.NewTimer(orDefault(spec.Timeout, DefaultTimeout))
	defer timer.Stop()
	var res Result
	var waitErr error
	grace := orDefault(spec.KillGrace, DefaultKillGrace)
	select {
	case waitErr = <-done:
	case <-timer.C:
		res.TimedOut, res.Killed = true, true
		logger.Warn("hook timed out: killing its process group", "timeout", orDefault(spec.Timeout, DefaultTimeout))
		waitErr = killGroup(cmd.Process.Pid, done, grace)
	case <-ctx.Done():
		res.Killed = true
		logger.Warn("hook interrupted: killing its process group", "reason", ctx.Err())
		waitErr = killGroup(cmd.Process.Pid, done, grace)
	}
	res.Duration = time.Since(start)
	if !pipes.drain(cmd.Process.Pid) {
		logger.Warn("the hook left processes holding its output open: their output is no longer collected")
	}
	stdout.flush()
	stderr.flush()
	res.Tail = out.lines()
	if ps := cmd.ProcessState; ps != nil {
		res.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal()
		}
	} else {
		// Wait failed before the process was reaped; this does not happen
		// for a started process, but a hook we know nothing of has failed.
		return res, fmt.Errorf("hook %s: wait: %w", spec.Hook, waitErr)
	}
	logger.Debug("hook ended", "result", res.String(), "duration", res.Duration)
	if res.Killed && !res.TimedOut {
		return res, fmt.Errorf("hook %s interrupted: %w", spec.Hook, ctx.Err())
	}
	return res, nil
}

// busyWait bounds how long Run retries a hook whose file is busy.
const busyWait = 2 * time.Second

// startBusy calls start until it does not fail with ETXTBSY, for up to
// busyWait. A hook file just written (a charm unpacked) can be busy for a
// moment although it was closed: a process forked meanwhile, by another
// agent of the same process say, holds a copy of the descriptor it was
// written through until that process execs (Go's issue 22315).
func startBusy(ctx context.Context, start func() error) error {
	deadline := time.Now().Add(busyWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := start()
		if !errors.Is(err, syscall.ETXTBSY) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// killGroup ends process group pgid, whose leader's Wait reports on done:
// SIGTERM to the group, then SIGKILL once grace has passed unless every
// process of the group is gone by then. It returns the leader's Wait
// result.
func killGroup(pgid int, done <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	var waitErr error
	exited := false
	for {
		select {
		case waitErr = <-done:
			exited = true
			done = nil
		case <-tick.C:
			// While the leader is unreaped its pid, the group's id, cannot
			// be reused; after that the group is checked before each signal.
			if exited && syscall.Kill(-pgid, 0) == syscall.ESRCH {
				return waitErr
			}
		case <-deadline.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if !exited {
				waitErr = <-done
			}
			return waitErr
		}
	}
}

// environ builds the hook's environment from the Spec, checking it.
func (spec Spec) environ() ([]string, error) {
	switch {
	case spec.Path == "":
		return nil, fmt.Errorf("hook %s: no hook path", spec.Hook)
	case !filepath.IsAbs(spec.CharmDir):
		return nil, fmt.Errorf("hook %s: charm dir %q is not an absolute path", spec.Hook, spec.CharmDir)
	case !filepath.IsAbs(spec.ToolsDir):
		return nil, fmt.Errorf("hook %s: tools dir %q is not an absolute path", spec.Hook, spec.ToolsDir)
	case strings.ContainsRune(spec.ToolsDir, filepath.ListSeparator):
		return nil, fmt.Errorf("hook %s: tools dir %q contains %q", spec.Hook, spec.ToolsDir, filepath.ListSeparator)
	}
	env := make([]string, 0, len(spec.Env)+3)
	lang := defaultLang
	for k, v := range spec.Env {
		switch {
		case k == envPath || k == envHome:
			return nil, fmt.Errorf("hook %s: Env sets %s, which Run sets itself", spec.Hook, k)
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return nil, fmt.Errorf("hook %s: bad environment variable name %q", spec.Hook, k)
		case strings.ContainsRune(v, 0):
			return nil, fmt.Errorf("hook %s: environment variable %s holds a NUL byte", spec.Hook, k)
		case k == envLang:
			lang = v
			continue
		}
		env = append(env, k+"="+v)
	}
	agentPath := spec.AgentPath
	if agentPath == "" {
		agentPath = os.Getenv(envPath)
	}
	path := spec.ToolsDir
	if agentPath != "" {
		path += string(filepath.ListSeparator) + agentPath
	}
	home := spec.Home
	if home == "" {
		home = spec.CharmDir
	}
	return append(env, envPath+"="+path, envHome+"="+home, envLang+"="+lang), nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// StartError is Run's error for a hook file that exists but could not be
// started: not executable, not a regular file, no #! line, a missing
// interpreter. Its message says so in one line for the unit's status:
// `hook "install" could not start: permission denied: hooks/install is
// not executable (mode -rw-r--r--)`.
type StartError struct {
	Hook   string
	Reason string
	// Err is the cause: ErrNotExecutable, or the error of exec.
	Err error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("hook %q could not start: %s", e.Hook, e.Reason)
}

func (e *StartError) Unwrap() error { return e.Err }

// startError explains exec's err starting the hook at path.
func startError(spec Spec, path string, err error) error {
	rel := spec.Path
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		return &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("exec format error: %s is not a program, and a script needs a #! line", rel), Err: err}
	case errors.Is(err, syscall.EACCES):
		return &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("permission denied: %s is not executable", rel), Err: errors.Join(ErrNotExecutable, err)}
	case errors.Is(err, syscall.ENOENT):
		// The file is there: its interpreter is not.
		if interp := shebang(path); interp != "" {
			return &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("bad interpreter: %s of %s not found", interp, rel), Err: err}
		}
	}
	return &StartError{Hook: spec.Hook, Reason: fmt.Sprintf("start %s: %v", rel, err), Err: err}
}

// shebang returns the interpreter a script's #! line names, "" when it
// has none.
func shebang(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := io.ReadFull(f, b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}
