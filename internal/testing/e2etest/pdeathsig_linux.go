package e2etest

import "syscall"

// setPdeathsig has the kernel send the child SIGKILL when the thread
// that forked it exits.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
