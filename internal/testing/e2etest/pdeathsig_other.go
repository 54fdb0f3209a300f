//go:build !linux

package e2etest

import "syscall"

// setPdeathsig does nothing where there is no parent-death signal: the
// sandbox's reaper alone ends its processes there.
func setPdeathsig(*syscall.SysProcAttr) {}
