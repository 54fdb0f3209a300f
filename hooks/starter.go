package hooks

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// Starter starts a hook's process for Run. Run uses os/exec in the agent's
// own process unless Spec.Starter names another: the scale harness, whose
// one process holds a thousand machines' controller connections, starts
// hooks from a small process of its own, since each fork copies the
// forking process's descriptors and each exec closes them again (about
// 0.2 ms a hook for every thousand sockets), which a machine agent on a
// host of its own does not pay.
type Starter interface {
	// Start runs the executable at path, with itself as its only
	// argument, in dir, with exactly env, its stdin /dev/null and its
	// stdout and stderr the given files, as the leader of a process group
	// of its own. When the file cannot be run the error wraps the errno
	// that says why (syscall.ENOEXEC, syscall.EACCES, syscall.ETXTBSY).
	Start(path, dir string, env []string, stdout, stderr *os.File) (Process, error)
}

// Process is a hook's process as its Starter started it.
type Process interface {
	// Pid is the process's id, and its process group's.
	Pid() int
	// Wait waits for the process to exit and says how it did. It is
	// called once.
	Wait() (syscall.WaitStatus, error)
}

// ExecStarter starts hooks with os/exec, in the calling process: the
// Starter Run uses when Spec.Starter is nil.
type ExecStarter struct{}

// Start implements Starter.
func (ExecStarter) Start(path, dir string, env []string, stdout, stderr *os.File) (Process, error) {
	cmd := &exec.Cmd{
		Path:        path,
		Args:        []string{path},
		Dir:         dir,
		Env:         env,
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return execProcess{cmd}, nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) Pid() int { return p.cmd.Process.Pid }

func (p execProcess) Wait() (syscall.WaitStatus, error) {
	err := p.cmd.Wait()
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			return ws, nil
		}
	}
	if err == nil {
		err = errors.New("no wait status")
	}
	return 0, err
}
