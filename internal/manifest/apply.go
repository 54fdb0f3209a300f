package manifest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Executor carries out a resource's actions against the model: the
// OperatorService's calls for built-in types, the plugin's actions for a
// plugin. Do returns once the actions are done (a service's units have
// settled); its error names the action that failed.
type Executor interface {
	Do(ctx context.Context, c *Checked, rp *ResourcePlan) error
}

// ApplyOptions are what Apply takes beside the checked manifest.
type ApplyOptions struct {
	// Model reads the model again before and after each resource's
	// actions.
	Model Model
	// Exec does the actions.
	Exec Executor
	// Parallelism bounds the resources applied at once (10 when 0).
	Parallelism int
	// KeepGoing lets resources that do not depend on a failed one finish;
	// without it, a failure stops what has not started.
	KeepGoing bool
	// Progress, when set, is told of each resource's steps, one call a
	// step, from several goroutines (it serializes itself).
	Progress func(Event)
}

// Event is one step of applying a resource: Phase "valid" (nothing to
// do), "applying" (its actions, Actions), "applied" (VALID again),
// "failed" (Err), "skipped" (a dependency failed).
type Event struct {
	Resource string
	Type     string
	Phase    string
	Actions  []Action
	Err      error
}

// ApplyResult is what an apply did: each resource's plan as it was when
// its actions started, and the resources that failed or were skipped.
type ApplyResult struct {
	Applied []*ResourcePlan
	Failed  map[string]error
	Skipped []string
}

// ApplyError is an apply that halted: the resources that failed, each
// with its error, and those not applied because of them.
type ApplyError struct {
	Failed  map[string]error
	Skipped []string
}

func (e *ApplyError) Error() string {
	var parts []string
	for _, name := range sortedKeys(e.Failed) {
		parts = append(parts, e.Failed[name].Error())
	}
	msg := strings.Join(parts, "; ")
	if len(e.Skipped) > 0 {
		msg += fmt.Sprintf(" (not applied: %s)", strings.Join(e.Skipped, ", "))
	}
	return msg
}

// StillStale is the error of a resource not VALID after its actions: the
// seed's rule, halting the apply.
type StillStale struct {
	Resource string
	// Action is the last action done; Remaining what a plan still asks.
	Action    string
	Remaining []Action
}

func (e *StillStale) Error() string {
	var rem []string
	for _, a := range e.Remaining {
		rem = append(rem, a.Describe())
	}
	return fmt.Sprintf("resource %s is still STALE after %s: %s", e.Resource, e.Action, strings.Join(rem, "; "))
}

// Apply applies a checked manifest: each resource once its dependencies
// are applied (in parallel up to Parallelism), planned again against the
// model as it is then (so values known only after apply are rendered),
// its actions done by Exec, and planned once more: it must then be VALID,
// else the apply halts with a *StillStale. A failure stops the resources
// not yet started (all of them, or with KeepGoing only those depending on
// it); the error is an *ApplyError.
func (c *Checked) Apply(ctx context.Context, opts ApplyOptions) (*ApplyResult, error) {
	par := opts.Parallelism
	if par <= 0 {
		par = 10
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(Event) {}
	}
	m := c.Manifest
	deps := map[string][]string{}
	for _, name := range c.Order {
		deps[name] = c.applyDeps(name)
	}
	var (
		mu      sync.Mutex
		states  = map[string]*Dep{}
		done    = map[string]bool{}
		failed  = map[string]error{}
		started = map[string]bool{}
		res     = &ApplyResult{Failed: failed}
		wake    = make(chan struct{}, len(c.Order)+1)
		running int
		halted  bool
	)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for {
		mu.Lock()
		var ready []string
		pending := 0
		for _, name := range c.Order {
			if started[name] {
				continue
			}
			blocked, waiting := false, false
			for _, d := range deps[name] {
				if _, bad := failed[d]; bad || slices.Contains(res.Skipped, d) {
					blocked = true
				} else if !done[d] {
					waiting = true
				}
			}
			switch {
			case blocked || (halted && !opts.KeepGoing):
				started[name] = true
				res.Skipped = append(res.Skipped, name)
				progress(Event{Resource: name, Type: m.Resources[name].Type, Phase: "skipped"})
			case !waiting:
				ready = append(ready, name)
			default:
				pending++
			}
		}
		for _, name := range ready {
			started[name] = true
			running++
		}
		if len(ready) == 0 && running == 0 {
			mu.Unlock()
			break
		}
		view := maps.Clone(states)
		mu.Unlock()
		for _, name := range ready {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				rp, dep, err := c.applyOne(ctx, name, view, opts, progress)
				<-sem
				mu.Lock()
				running--
				if err != nil {
					failed[name] = err
					halted = true
				} else {
					done[name] = true
					states[name] = dep
					res.Applied = append(res.Applied, rp)
				}
				mu.Unlock()
				wake <- struct{}{}
			}()
		}
		// Everything ready has started: nothing more can until one ends.
		<-wake
	}
	wg.Wait()
	if len(failed) > 0 {
		return res, &ApplyError{Failed: failed, Skipped: res.Skipped}
	}
	return res, nil
}

// applyDeps are the resources a resource is applied after: its
// dependencies, and for a relation the manifest's services it names.
func (c *Checked) applyDeps(name string) []string {
	r := c.Manifest.Resources[name]
	out := slices.Collect(maps.Values(r.Dependencies))
	if r.Type == TypeRelation {
		for _, s := range relationServices(r) {
			if other, ok := c.Manifest.Resources[s]; ok && other.Type == TypeService && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// applyOne plans a resource against the model as it is now, does its
// actions, and requires it VALID after them.
func (c *Checked) applyOne(ctx context.Context, name string, states map[string]*Dep, opts ApplyOptions, progress func(Event)) (*ResourcePlan, *Dep, error) {
	typ := c.Manifest.Resources[name].Type
	fail := func(err error) (*ResourcePlan, *Dep, error) {
		progress(Event{Resource: name, Type: typ, Phase: "failed", Err: err})
		return nil, nil, err
	}
	rp, err := c.planNow(ctx, name, states, opts.Model)
	if err != nil {
		return fail(fmt.Errorf("resource %s: %w", name, err))
	}
	if rp.Status == Valid {
		progress(Event{Resource: name, Type: typ, Phase: "valid"})
		return rp, rp.Dep(), nil
	}
	progress(Event{Resource: name, Type: typ, Phase: "applying", Actions: rp.Actions})
	if err := opts.Exec.Do(ctx, c, rp); err != nil {
		return fail(fmt.Errorf("resource %s: %w", name, err))
	}
	after, err := c.planNow(ctx, name, states, opts.Model)
	if err != nil {
		return fail(fmt.Errorf("resource %s: after its actions: %w", name, err))
	}
	if after.Status != Valid {
		last := rp.Actions[len(rp.Actions)-1].Describe()
		return fail(&StillStale{Resource: name, Action: last, Remaining: after.Actions})
	}
	progress(Event{Resource: name, Type: typ, Phase: "applied"})
	return rp, after.Dep(), nil
}

// planNow plans one resource against the model as it is now, reading of
// it what the resource needs: a service's status and head revision, a
// relation's services' (their relations with them), all of it for a
// machine resource (its owned machines), nothing for a plugin's. Reading
// the whole model for each of thousands of resources would make an apply
// quadratic in the model's size.
func (c *Checked) planNow(ctx context.Context, name string, states map[string]*Dep, model Model) (*ResourcePlan, error) {
	r := c.Manifest.Resources[name]
	var snap *Snapshot
	var err error
	switch {
	case r.Type == TypeService:
		snap, err = readSnapshot(ctx, model, []string{name}, &pb.StatusRequest{Services: []string{name}})
		if status.Code(errors.Unwrap(err)) == codes.NotFound {
			snap, err = &Snapshot{Services: map[string]*ServiceSnapshot{}}, nil // not created yet
		}
	case r.Type == TypeRelation:
		// The endpoints' services, as far as they are known before
		// rendering: a templated one reads the whole model.
		var svcs []string
		for _, s := range relationServices(r) {
			if !hasTemplate(s) && names.ValidService(s) {
				svcs = append(svcs, s)
			}
		}
		req := &pb.StatusRequest{}
		if len(svcs) == 2 {
			req.Services = svcs
		}
		snap, err = readSnapshot(ctx, model, nil, req)
		if status.Code(errors.Unwrap(err)) == codes.NotFound {
			snap, err = ReadSnapshot(ctx, model, nil)
		}
	case r.Plugin != "":
		snap = &Snapshot{Services: map[string]*ServiceSnapshot{}}
	default:
		snap, err = ReadSnapshot(ctx, model, nil)
	}
	if err != nil {
		return nil, err
	}
	rp, err := c.PlanResource(ctx, name, snap, states)
	var me *Errors
	if errors.As(err, &me) {
		return nil, fmt.Errorf("%s", strings.Join(me.List, "; "))
	}
	return rp, err
}
