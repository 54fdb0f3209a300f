package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// profiler writes CPU profiles of the controller (from its /debug/pprof)
// and of the fleet (of this process, or from each of its processes'
// /debug/pprof) for a phase, and heap profiles of them, into a directory.
// A nil profiler does nothing.
type profiler struct {
	dir     string
	seconds int
	ctl     *controllerProc
	fleet   *fleet
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

func newProfiler(dir string, seconds int, ctl *controllerProc, fl *fleet) (*profiler, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &profiler{dir: dir, seconds: seconds, ctl: ctl, fleet: fl}, nil
}

func (p *profiler) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// sources returns, by the name of its files, each process profiled from
// its pprof address: the controller, and the fleet's processes if it has
// any (fleet-0, fleet-1, ...; pprof reads several files as one profile).
func (p *profiler) sources() map[string]string {
	out := map[string]string{"controller": p.ctl.metricsAddr}
	for i, w := range p.fleet.workers {
		out[fmt.Sprintf("fleet-%d", i)] = w.pprofAddr
	}
	return out
}

// cpu profiles the controller and the fleet for the profiler's seconds
// from now, in the background, as <phase>-controller.cpu.pprof and
// <phase>-fleet.cpu.pprof (<phase>-fleet-<i>.cpu.pprof for each of the
// fleet's processes). Only one phase at a time.
func (p *profiler) cpu(ctx context.Context, phase string) {
	if p == nil {
		return
	}
	for name, addr := range p.sources() {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, p.seconds)
			if err := p.fetch(ctx, url, phase+"-"+name+".cpu.pprof"); err != nil {
				p.fail(err)
			}
		}()
	}
	if p.fleet.workers != nil {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f, err := os.Create(filepath.Join(p.dir, phase+"-fleet.cpu.pprof"))
		if err != nil {
			p.fail(err)
			return
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			p.fail(err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(p.seconds) * time.Second):
		}
		pprof.StopCPUProfile()
	}()
}

// heap writes heap profiles of the controller and the fleet now.
func (p *profiler) heap(ctx context.Context, phase string) {
	if p == nil {
		return
	}
	for name, addr := range p.sources() {
		url := fmt.Sprintf("http://%s/debug/pprof/heap", addr)
		if err := p.fetch(ctx, url, phase+"-"+name+".heap.pprof"); err != nil {
			p.fail(err)
		}
	}
	if p.fleet.workers != nil {
		return
	}
	f, err := os.Create(filepath.Join(p.dir, phase+"-fleet.heap.pprof"))
	if err != nil {
		p.fail(err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		p.fail(err)
	}
}

// wait waits for the profiles under way, and reports what failed.
func (p *profiler) wait() error {
	if p == nil {
		return nil
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		return fmt.Errorf("profiles: %v", p.errs)
	}
	return nil
}

func (p *profiler) fetch(ctx context.Context, url, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(filepath.Join(p.dir, name))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
