package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// runSpec is one run of a program.
type runSpec struct {
	exe     string   // absolute path of the program
	args    []string // its arguments, after argv[0]
	dir     string   // its working directory
	env     []string // its whole environment
	stdin   []byte
	timeout time.Duration
	// capture is true for init and state: stdout is kept, up to
	// MaxOutput. Otherwise it is copied to out.
	capture bool
	// out, when not nil, receives stderr and, without capture, stdout.
	out io.Writer
}

// runResult is what a run left.
type runResult struct {
	stdout []byte
	stderr string // the last MaxStderrTail bytes
}

// readerGrace is how long the readers of a run's pipes may take after its
// process group was killed before their ends are closed under them: long
// enough for the kernel to deliver what is buffered, short enough that a
// process that escaped the group (setsid) and holds a pipe cannot hang us.
const readerGrace = time.Second

// errOverflow is returned by a capture when stdout passes MaxOutput.
var errOverflow = errors.New("output over the limit")

// checkRunnable refuses a program that is missing, a directory or not
// executable, before trying to start it.
func checkRunnable(exe string) error {
	fi, err := os.Stat(exe)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s does not exist", ErrNotRunnable, exe)
	case err != nil:
		return fmt.Errorf("%w: %v", ErrNotRunnable, err)
	case fi.IsDir():
		return fmt.Errorf("%w: %s is a directory", ErrNotRunnable, exe)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%w: %s is not executable (mode %v)", ErrNotRunnable, exe, fi.Mode().Perm())
	}
	return nil
}

// run starts the program in a process group of its own, feeds it stdin,
// collects its output, and waits for it, its timeout or ctx. Whatever ends
// the wait, the whole group is then killed, so that nothing it started
// outlives it. The error wraps ErrNotRunnable, ErrTimeout, ErrFailed or
// ErrProtocol (stdout over MaxOutput); the result holds the stderr tail in
// every case.
func run(ctx context.Context, spec runSpec) (runResult, error) {
	if err := checkRunnable(spec.exe); err != nil {
		return runResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return runResult{}, fmt.Errorf("%w: not started: %w", ErrTimeout, context.Cause(ctx))
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return runResult{}, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return runResult{}, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		return runResult{}, err
	}
	cmd := &exec.Cmd{
		Path:        spec.exe,
		Args:        append([]string{spec.exe}, spec.args...),
		Dir:         spec.dir,
		Env:         spec.env,
		Stdin:       stdinR,
		Stdout:      stdoutW,
		Stderr:      stderrW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	startErr := cmd.Start()
	// The child has its copies; ours of its ends would keep the pipes
	// open after it exits.
	closeAll(stdinR, stdoutW, stderrW)
	if startErr != nil {
		closeAll(stdinW, stdoutR, stderrR)
		return runResult{}, fmt.Errorf("%w: %v", ErrNotRunnable, startErr)
	}
	pgid := cmd.Process.Pid

	var (
		wg       sync.WaitGroup
		stdout   tailBuffer
		stderr   = tailBuffer{limit: MaxStderrTail}
		overflow = make(chan struct{})
		outMu    sync.Mutex
	)
	// A plugin that does not read its stdin gets EPIPE on our side once
	// it exits; that is not an error of ours to report.
	wg.Add(3)
	go func() {
		defer wg.Done()
		_, _ = stdinW.Write(spec.stdin)
		_ = stdinW.Close()
	}()
	go func() {
		defer wg.Done()
		if spec.capture {
			if err := captureTo(&stdout, stdoutR, MaxOutput); errors.Is(err, errOverflow) {
				close(overflow)
			}
			return
		}
		copyTo(spec.out, &outMu, nil, stdoutR)
	}()
	go func() {
		defer wg.Done()
		copyTo(spec.out, &outMu, &stderr, stderrR)
	}()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(spec.timeout)
	defer timer.Stop()

	var runErr, waitErr error
	select {
	case waitErr = <-waited:
	case <-timer.C:
		runErr = fmt.Errorf("%w after %v; its process group was killed", ErrTimeout, spec.timeout)
	case <-ctx.Done():
		runErr = fmt.Errorf("%w: stopped: %w; its process group was killed", ErrTimeout, context.Cause(ctx))
	case <-overflow:
		runErr = fmt.Errorf("%w: stdout over %d bytes; its process group was killed", ErrProtocol, MaxOutput)
	}
	killGroup(pgid)
	if runErr != nil {
		<-waited
	}
	// The group is dead; the pipes drain and close. A process that left
	// the group may hold them open: close our ends after a grace.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(readerGrace):
		closeAll(stdinW, stdoutR, stderrR)
		<-drained
	}
	closeAll(stdinW, stdoutR, stderrR)

	res := runResult{stdout: stdout.buf, stderr: string(stderr.buf)}
	if runErr != nil {
		return res, runErr
	}
	select {
	case <-overflow:
		return res, fmt.Errorf("%w: stdout over %d bytes", ErrProtocol, MaxOutput)
	default:
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return res, fmt.Errorf("%w: killed by signal %v", ErrFailed, ws.Signal())
			}
			return res, fmt.Errorf("%w: exit status %d", ErrFailed, ee.ExitCode())
		}
		return res, fmt.Errorf("%w: %v", ErrFailed, waitErr)
	}
	return res, nil
}

// killGroup kills every process left in the group; a group already gone
// is fine.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// tailBuffer keeps what is written to it: all of it when limit is 0, the
// last limit bytes otherwise.
type tailBuffer struct {
	limit int
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if t.limit > 0 && len(t.buf) > t.limit {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.limit:]...)
	}
	return len(p), nil
}

// captureTo reads r into t until EOF, or until more than limit bytes came:
// then it returns errOverflow and stops reading.
func captureTo(t *tailBuffer, r io.Reader, limit int) error {
	_, err := io.Copy(t, io.LimitReader(r, int64(limit)+1))
	if len(t.buf) > limit {
		t.buf = t.buf[:limit]
		return errOverflow
	}
	return err
}

// copyTo reads r to EOF, writing what it reads to out (under mu, so that
// stdout and stderr interleave by chunks) and to tail, either of which may
// be nil.
func copyTo(out io.Writer, mu *sync.Mutex, tail *tailBuffer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if tail != nil {
				_, _ = tail.Write(buf[:n])
			}
			if out != nil {
				mu.Lock()
				_, _ = out.Write(buf[:n])
				mu.Unlock()
			}
		}
		if err != nil {
			return
		}
	}
}
