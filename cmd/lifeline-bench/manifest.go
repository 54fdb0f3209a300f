package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The manifest scenario (-scenario manifest) applies a manifest of
// -manifest-services services (one charm, mf, which provides p and
// requires r), -manifest-relations relations between them and
// -manifest-units units in all, from an empty model, with ctl apply: the
// same code an operator runs, against the real fleet of machine agents.
// Each service's units are placed on one of the fleet's machines, in turn
// (the fleet's machines are manual ones: a unit without a machine would
// wait for one the manual provider never starts). It times ctl apply until
// it exits (every resource applied, its units settled as ctl wait says,
// and planned VALID again); the time until ctl wait finds every unit
// settled and a plan of the whole manifest has no changes (ctl plan
// --detailed-exitcode exits 0: the VALID re-check of everything); ctl plan
// of the converged model alone, three times; then destroying every
// service and the machines, until etcd holds no entity keys.

// manifestResults are the manifest scenario's figures.
type manifestResults struct {
	Services    int `json:"services"`
	Relations   int `json:"relations"`
	Units       int `json:"units"`
	Parallelism int `json:"parallelism"`
	// ApplySeconds is ctl apply from empty until it exits; LastActionsSeconds
	// until the last resource's actions began (its last "applying" line).
	ApplySeconds       float64 `json:"apply_seconds"`
	LastActionsSeconds float64 `json:"last_actions_seconds"`
	// SecondsToValid is from the apply's start until ctl wait found every
	// unit settled and ctl plan --detailed-exitcode then exited 0.
	SecondsToValid float64 `json:"seconds_to_valid"`
	// PlanSeconds are ctl plan of the converged model, three runs.
	PlanSeconds []float64 `json:"plan_seconds"`
	// SecondsToDestroyed is from destroying the services until etcd held
	// no entity keys (the machines destroyed as their units went).
	SecondsToDestroyed   float64 `json:"seconds_to_destroyed"`
	ControllerCPUSeconds float64 `json:"controller_cpu_seconds_apply"`
	MachineBusy          float64 `json:"machine_busy_apply"`
}

// manifestConfig is what the scenario is asked for.
type manifestConfig struct {
	services, relations, units, parallelism int
}

func (m manifestConfig) validate() error {
	switch {
	case m.services < 2:
		return errors.New("-manifest-services must be at least 2")
	case m.relations < 0 || m.relations > m.services*(m.services-1):
		return fmt.Errorf("-manifest-relations must be from 0 to %d (each service's r with every other's p)", m.services*(m.services-1))
	case m.units < 0 || m.units > m.services*10000:
		return errors.New("-manifest-units must be from 0 to 10,000 a service")
	case m.parallelism < 1:
		return errors.New("-manifest-parallelism must be at least 1")
	}
	return nil
}

// mfService is the name of the scenario's i-th service.
func mfService(i int) string { return fmt.Sprintf("svc%03d", i) }

// benchManifest is the scenario's manifest: services mf-charm services,
// units spread over them as evenly as can be, service i on machine
// machines[i mod len]; relation j relates service i = j mod services's r
// with the p of service (i+k) mod services, k = 1 + j / services, so that
// no two relations relate the same pair the same way.
func benchManifest(charmDir string, m manifestConfig, machines []string) string {
	var b strings.Builder
	b.WriteString("name: bench\nresources:\n")
	for i := range m.services {
		n := m.units / m.services
		if i < m.units%m.services {
			n++
		}
		fmt.Fprintf(&b, "  %s:\n    type: service\n    config: {charm: %q, units: %d, to: %q}\n", mfService(i), charmDir, n, machines[i%len(machines)])
	}
	for j := range m.relations {
		i, k := j%m.services, 1+j/m.services
		fmt.Fprintf(&b, "  rel%04d:\n    type: relation\n    config: {endpoints: [%q, %q]}\n", j,
			mfService(i)+":r", mfService((i+k)%m.services)+":p")
	}
	return b.String()
}

// manifestEnv is what the scenario runs with.
type manifestEnv struct {
	ctl      *controllerProc
	ctlPath  string
	dir      string
	hooks    string
	machines []string // the fleet's, units go on them
	others   []string // the other machines, destroyed at the end too
	model    *follower
	etcd     *clientv3.Client
	timeout  time.Duration
}

// runManifest runs the scenario.
func runManifest(ctx context.Context, e manifestEnv, m manifestConfig) (*manifestResults, error) {
	res := &manifestResults{Services: m.services, Relations: m.relations, Units: m.units, Parallelism: m.parallelism}
	charmDir, err := writeCharm(e.dir, "mf", "name: mf\nprovides:\n  p: mf\nrequires:\n  r: mf\n", []string{"p", "r"}, hookProgram(e.hooks))
	if err != nil {
		return res, err
	}
	path := filepath.Join(e.dir, "bench-manifest.yaml")
	if err := os.WriteFile(path, []byte(benchManifest(charmDir, m, e.machines)), 0o644); err != nil {
		return res, err
	}
	say("applying %s: %d services, %d relations, %d units on %d machines, parallelism %d", path, m.services, m.relations, m.units, len(e.machines), m.parallelism)
	meter := startPhase(e.ctl.cmd.Process.Pid)
	start := time.Now()
	last, err := e.apply(ctx, path, m, start)
	if err != nil {
		return res, err
	}
	res.ApplySeconds, res.LastActionsSeconds = time.Since(start).Seconds(), last.Sub(start).Seconds()
	say("  ctl apply done after %.1f s (the last resource's actions began after %.1f s)", res.ApplySeconds, res.LastActionsSeconds)
	if out, err := e.run(ctx, "wait", "--timeout", e.timeout.String()); err != nil {
		return res, fmt.Errorf("ctl wait: %w\n%s", err, out)
	}
	if out, err := e.run(ctx, "plan", path, "--detailed-exitcode"); err != nil {
		return res, fmt.Errorf("ctl plan of the applied manifest: %w (exit status 2: changes left)\n%s", err, lastLines(out, 20))
	}
	res.SecondsToValid = time.Since(start).Seconds()
	use := meter.end()
	res.ControllerCPUSeconds, res.MachineBusy = use.controller, use.busy
	say("  every unit settled and the whole manifest VALID after %.1f s", res.SecondsToValid)
	for range 3 {
		t0 := time.Now()
		if out, err := e.run(ctx, "plan", path, "--detailed-exitcode"); err != nil {
			return res, fmt.Errorf("ctl plan: %w\n%s", err, lastLines(out, 20))
		}
		res.PlanSeconds = append(res.PlanSeconds, time.Since(t0).Seconds())
	}
	say("  ctl plan of the converged model: %s", secondsList(res.PlanSeconds))

	say("destroying the %d services and the machines", m.services)
	destroyStart := time.Now()
	if err := destroyServices(ctx, e.ctl.op, m.services); err != nil {
		return res, err
	}
	if err := destroyMachinesWhenFree(ctx, e.ctl.op, e.model, append(slices.Clone(e.machines), e.others...)); err != nil {
		return res, err
	}
	if _, err := waitEmpty(ctx, e.model, e.etcd, destroyStart); err != nil {
		return res, err
	}
	res.SecondsToDestroyed = time.Since(destroyStart).Seconds()
	say("  the keyspace holds no entity keys after %.1f s", res.SecondsToDestroyed)
	return res, nil
}

// apply runs ctl apply, saying every few seconds how many resources are
// VALID, and returns when the last resource's actions began.
func (e manifestEnv) apply(ctx context.Context, path string, m manifestConfig, start time.Time) (time.Time, error) {
	cmd := e.command(ctx, "apply", path, "--parallelism", fmt.Sprint(m.parallelism), "--timeout", e.timeout.String())
	log, err := os.Create(filepath.Join(e.dir, "bench-manifest-apply.log"))
	if err != nil {
		return time.Time{}, err
	}
	defer log.Close()
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(log, &stderr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return time.Time{}, err
	}
	if err := cmd.Start(); err != nil {
		return time.Time{}, err
	}
	var last time.Time
	valid, total := 0, m.services+m.relations
	p := newProgress(start)
	var tail []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		tail = append(tail[max(0, len(tail)-19):], line)
		switch {
		case strings.Contains(line, ": applying: "):
			last = time.Now()
		case strings.Contains(line, ": VALID"):
			valid++
		}
		if p.due() {
			p.say("%d of %d resources VALID", valid, total)
		}
	}
	if err := cmd.Wait(); err != nil {
		return last, fmt.Errorf("ctl apply: %w\n%s%s", err, strings.Join(tail, "\n"), stderr.String())
	}
	return last, nil
}

// command is ctl with args, as the controller's admin.
func (e manifestEnv) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.ctlPath, args...)
	cmd.Env = append(os.Environ(), "LIFELINE_CONFIG="+e.ctl.configPath)
	return cmd
}

// run runs ctl with args and returns its output.
func (e manifestEnv) run(ctx context.Context, args ...string) (string, error) {
	out, err := e.command(ctx, args...).CombinedOutput()
	return string(out), err
}

// destroyServices destroys the scenario's services, 16 calls at once.
func destroyServices(ctx context.Context, op pb.OperatorServiceClient, n int) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: mfService(i)}); err != nil {
				errs[i] = fmt.Errorf("destroy service %s: %w", mfService(i), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func secondsList(xs []float64) string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%.2f s", x))
	}
	return strings.Join(out, ", ")
}

func (r *manifestResults) print(row func(k, format string, v ...any)) {
	row("manifest: services, relations, units", "%d, %d, %d (ctl apply --parallelism %d)", r.Services, r.Relations, r.Units, r.Parallelism)
	row("manifest: ctl apply from empty", "%.1f s (the last resource's actions began after %.1f s)", r.ApplySeconds, r.LastActionsSeconds)
	row("manifest: settled, whole manifest VALID", "%.1f s from the apply's start", r.SecondsToValid)
	row("manifest: ctl plan, converged", "%s (target ≤ 2 s)", secondsList(r.PlanSeconds))
	row("manifest: destroyed", "%.1f s until etcd held no entity keys", r.SecondsToDestroyed)
	row("manifest: controller while applying", "%.1f CPU s; the machine's CPUs %.0f%% busy", r.ControllerCPUSeconds, 100*r.MachineBusy)
}
