package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// fleet is the simulated machines: real machine agents, each with one
// connection of its own shared by its units, run by -fleet-procs worker
// processes of this program (-fleet-worker; one by default), or in this
// process with -fleet-procs 0.
// Every hook's fork copies its process's descriptor table, which the hook
// then closes: with a descriptor a unit in one process (each unit's hook
// tool socket, before a machine's units shared one) that was 0.9 ms of
// CPU a hook more on the harness's machine than from a process holding a
// few, as a machine agent on a host of its own does.
type fleet struct {
	ids     []string
	stopIn  func()    // stops the agents run in this process
	workers []*worker // or the processes that run them

	mu   sync.Mutex
	errs []error
}

// worker is one process of the fleet.
type worker struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	pprofAddr string        // its /debug/pprof
	done      chan struct{} // closed once its output has ended
}

// workerSpec is what a worker runs: the machines it runs the agents of,
// joined by their tokens.
type workerSpec struct {
	Dir       string   `json:"dir"`
	Lifelined string   `json:"lifelined"`
	Log       string   `json:"log"`
	IDs       []string `json:"ids"`
	Tokens    []string `json:"tokens"`
	// HeapFloor has the process collect garbage as seldom as one agent a
	// process would (heapFloor).
	HeapFloor bool `json:"heap_floor"`
}

// startFleet adds n manual machines and runs their agents: in this
// process when procs is 0, otherwise in procs worker processes; with
// heapFloor, each process collects garbage as its agents would in
// processes of their own.
func startFleet(ctx context.Context, c *controllerProc, dir, lifelined string, n, procs int, heapFloor bool) (*fleet, error) {
	f := &fleet{}
	var tokens []string
	for len(tokens) < n {
		resp, err := c.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: int32(min(n-len(tokens), 1000)), Manual: true})
		if err != nil {
			return nil, fmt.Errorf("add machines: %w", err)
		}
		for i, token := range resp.JoinTokens {
			tokens = append(tokens, token)
			f.ids = append(f.ids, resp.Machines[i].Id)
		}
	}
	if procs == 0 {
		logf, err := os.Create(filepath.Join(dir, "agents.log"))
		if err != nil {
			return nil, err
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: logf})
		stop, err := runAgents(workerSpec{Dir: dir, Lifelined: lifelined, IDs: f.ids, Tokens: tokens, HeapFloor: heapFloor}, logger, f.fail)
		if err != nil {
			logf.Close()
			return nil, err
		}
		f.stopIn = func() {
			stop()
			logf.Close()
		}
		return f, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	procs = min(procs, n)
	for i := range procs {
		lo, hi := i*n/procs, (i+1)*n/procs
		spec := workerSpec{Dir: dir, Lifelined: lifelined, Log: filepath.Join(dir, fmt.Sprintf("agents-%d.log", i)),
			IDs: f.ids[lo:hi], Tokens: tokens[lo:hi], HeapFloor: heapFloor}
		w, err := f.startWorker(self, filepath.Join(dir, fmt.Sprintf("fleet-%d.json", i)), spec)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("fleet worker %d: %w", i, err)
		}
		f.workers = append(f.workers, w)
	}
	return f, nil
}

func (f *fleet) fail(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func (f *fleet) startWorker(self, specPath string, spec workerSpec) (*worker, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	w := &worker{cmd: exec.Command(self, "-fleet-worker", specPath), done: make(chan struct{})}
	w.cmd.Stderr = logf
	// Its own process group, away from the terminal's signals: it stops
	// when the harness closes its input, or dies.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		return nil, fmt.Errorf("exited at start (see %s)", spec.Log)
	}
	addr, ok := strings.CutPrefix(lines.Text(), "pprof ")
	if !ok {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		return nil, fmt.Errorf("said %q at start, not its pprof address", lines.Text())
	}
	w.pprofAddr = addr
	go func() {
		defer close(w.done)
		for lines.Scan() {
			if msg, ok := strings.CutPrefix(lines.Text(), "error: "); ok {
				f.fail(errors.New(msg))
			}
		}
	}()
	return w, nil
}

// stop stops the agents; a worker stops its own once its input ends.
func (f *fleet) stop() {
	if f.stopIn != nil {
		f.stopIn()
		f.stopIn = nil
	}
	for _, w := range f.workers {
		w.stdin.Close()
	}
	for _, w := range f.workers {
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			w.cmd.Process.Kill()
		}
		if err := w.cmd.Wait(); err != nil {
			f.fail(fmt.Errorf("fleet worker %d: %w", w.cmd.Process.Pid, err))
		}
	}
	f.workers = nil
}

func (f *fleet) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// usage is what the fleet, and the hooks it ran, have used so far: in
// this process, what the process and its children have (the related
// units' agents' processes too, once they have exited).
func (f *fleet) usage() usage {
	if f.workers == nil {
		return currentUsage()
	}
	var u usage
	for _, w := range f.workers {
		wu, err := procCPU(w.cmd.Process.Pid)
		if err != nil {
			continue
		}
		wu.written, wu.syscalls = procIO(w.cmd.Process.Pid)
		u = u.plus(wu)
	}
	return u
}

// rss returns the fleet's resident memory now.
func (f *fleet) rss() int64 {
	if f.workers == nil {
		return currentRSS(os.Getpid())
	}
	var n int64
	for _, w := range f.workers {
		n += currentRSS(w.cmd.Process.Pid)
	}
	return n
}

// writeCharm writes a charm with the given metadata; with a hook, every
// hook the charm can have is that executable.
func writeCharm(dir, name, metadata string, endpoints []string, hook []byte) (string, error) {
	cdir := filepath.Join(dir, "charms", name)
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(cdir, "metadata.yaml"), []byte(metadata), 0o644); err != nil {
		return "", err
	}
	if hook == nil {
		// A charm without hooks has no hooks directory either: an
		// empty one would be a directory more for every unit to make
		// and remove, which no hook needs.
		return cdir, nil
	}
	if err := os.Mkdir(filepath.Join(cdir, "hooks"), 0o755); err != nil {
		return "", err
	}
	names := []string{"install", "config-changed", "start", "stop", "remove"}
	for _, ep := range endpoints {
		for _, k := range []string{"created", "joined", "changed", "departed", "broken"} {
			names = append(names, ep+"-relation-"+k)
		}
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(cdir, "hooks", n), hook, 0o755); err != nil {
			return "", err
		}
	}
	return cdir, nil
}

// hookProgram returns the no-op hook of -hooks kind: the static no-op
// program (noop.go) for process, where the harness has one for this
// machine, and a shell script for sh or otherwise; nil for none.
func hookProgram(kind string) []byte {
	if kind == "none" {
		return nil
	}
	if p := noopProgram(); kind == "process" && p != nil {
		return p
	}
	return []byte("#!/bin/sh\nexit 0\n")
}
