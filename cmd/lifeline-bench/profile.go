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
// and of this process (the fleet of agents) for a phase, and heap profiles
// of both, into a directory. A nil profiler does nothing.
type profiler struct {
	dir     string
	seconds int
	ctl     *controllerProc
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

func newProfiler(dir string, seconds int, ctl *controllerProc) (*profiler, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &profiler{dir: dir, seconds: seconds, ctl: ctl}, nil
}

func (p *profiler) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// cpu profiles the controller and this process for the profiler's seconds
// from now, in the background, as <phase>-controller.cpu.pprof and
// <phase>-fleet.cpu.pprof. Only one phase at a time.
func (p *profiler) cpu(ctx context.Context, phase string) {
	if p == nil {
		return
	}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.ctl.metricsAddr, p.seconds)
		if err := p.fetch(ctx, url, phase+"-controller.cpu.pprof"); err != nil {
			p.fail(err)
		}
	}()
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

// heap writes heap profiles of the controller and this process now.
func (p *profiler) heap(ctx context.Context, phase string) {
	if p == nil {
		return
	}
	url := fmt.Sprintf("http://%s/debug/pprof/heap", p.ctl.metricsAddr)
	if err := p.fetch(ctx, url, phase+"-controller.heap.pprof"); err != nil {
		p.fail(err)
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
