package e2etest

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
)

// starter starts a sandbox's child processes so that they die with the
// test binary, however it dies (a timeout's panic, SIGKILL): each gets
// SIGKILL as its parent-death signal (Pdeathsig, on Linux). The kernel
// sends that signal when the *thread* that forked the child exits, not
// the process, and the Go runtime ends a thread when a goroutine locked
// to it exits; a child forked from an ordinary goroutine's thread could
// so be killed whenever another goroutine locks that thread and returns.
// So every child is forked from one goroutine locked to its thread for
// the sandbox's life, which nothing else runs on. The sandbox's teardown
// ends it last, after every process it started has been stopped: its
// thread then exits, and any child still running dies with it.
//
// The reaper is not started here: it must outlive the test binary.
// Processes the children start themselves (the local provider's machine
// agents, their units, a daemon ctl bootstrap starts) are not the test's
// children, and a controller's local machines are meant to outlive a
// controller restart; the reaper ends those (e2etest/reaper).
type starter struct {
	reqs chan startReq
	quit chan struct{}
	done chan struct{}
}

type startReq struct {
	cmd *exec.Cmd
	err chan error
}

// errTornDown is what starting a process in a sandbox torn down returns.
var errTornDown = errors.New("the sandbox is torn down")

func newStarter() *starter {
	st := &starter{reqs: make(chan startReq), quit: make(chan struct{}), done: make(chan struct{})}
	go st.loop()
	return st
}

func (st *starter) loop() {
	defer close(st.done)
	// Never unlocked: the thread is this goroutine's alone, and exits
	// when it returns.
	runtime.LockOSThread()
	for {
		select {
		case r := <-st.reqs:
			r.err <- r.cmd.Start()
		case <-st.quit:
			return
		}
	}
}

// start starts cmd from the starter's thread, with the parent-death
// signal set.
func (st *starter) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setPdeathsig(cmd.SysProcAttr)
	errc := make(chan error, 1)
	select {
	case st.reqs <- startReq{cmd, errc}:
		return <-errc
	case <-st.quit:
		return errTornDown
	}
}

// stop ends the starter's goroutine, and its thread, and waits for it.
func (st *starter) stop() {
	select {
	case <-st.quit:
	default:
		close(st.quit)
	}
	<-st.done
}

// Start starts cmd as a child of the test binary that dies with it
// (SIGKILL when the test binary dies, on Linux), for processes a test
// starts itself in the sandbox; the sandbox's own controllers, etcd
// members and ctl runs are started so already.
func (s *Sandbox) Start(cmd *exec.Cmd) error { return s.starter.start(cmd) }

// StartChild starts cmd, outside any sandbox, as a child of the test
// binary that dies with it as a sandbox's do (SIGKILL when the test
// binary dies, on Linux), in a process group of its own; the test's
// cleanup kills the group and waits for cmd.
func StartChild(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	st := newStarter()
	if err := st.start(cmd); err != nil {
		st.stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		st.stop()
	})
}
