package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// agentProc is a real machine agent process (lifelined machine-agent) of
// a manual machine: the one with no units, to measure what an idle
// machine agent costs, and those of the related units.
type agentProc struct {
	cmd  *exec.Cmd
	id   string
	done chan struct{}

	mu sync.Mutex
	// last is the process's usage when last sampled; gone says it has
	// been waited for.
	last usage
	gone bool
}

func startAgentProc(ctx context.Context, c *controllerProc, dir, lifelined, name string) (*agentProc, error) {
	resp, err := c.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true})
	if err != nil {
		return nil, err
	}
	if _, err := pki.DecodeJoinToken(resp.JoinTokens[0]); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, name+"-join")
	if err := os.WriteFile(tokenFile, []byte(resp.JoinTokens[0]), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+"-agent.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(lifelined, "machine-agent", "--data-dir", filepath.Join(dir, name), "--join-file", tokenFile, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	a := &agentProc{cmd: cmd, id: resp.Machines[0].Id, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		a.mu.Lock()
		a.gone = true
		a.mu.Unlock()
		close(a.done)
	}()
	go a.sample()
	return a, nil
}

// sample keeps the process's last usage, twice a second, while it runs.
func (a *agentProc) sample() {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		u, err := procCPU(a.cmd.Process.Pid)
		a.mu.Lock()
		if err == nil && !a.gone {
			a.last = u
		}
		a.mu.Unlock()
		select {
		case <-a.done:
			return
		case <-t.C:
		}
	}
}

// usage returns what the process used so far, as last sampled. When
// reaped is true the caller counts this process's waited-for children
// (currentUsage), among which, once it has exited, is all it used, its
// own CPU too: that, as last sampled, is then moved back to CPU.
// Otherwise what it used in its last half second is not counted.
func (a *agentProc) usage(reaped bool) usage {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone && reaped {
		return usage{cpu: a.last.cpu, children: -a.last.cpu}
	}
	return a.last
}

func (a *agentProc) stop() {
	syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
}
