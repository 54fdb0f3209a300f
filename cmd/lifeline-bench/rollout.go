package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The rollout scenario (-scenario rollout), once every unit of bench runs
// and is idle, sets bench's rollout policy to -rollout-max-parallel and
// changes its configuration: a revision every unit moves to, a permit at
// a time as the leader's rollout worker grants them, running
// config-changed (real hook processes unless -hooks none). It is timed
// from the SetConfig call until the rollout is done (every unit runs the
// new revision, no permit out), while a watch of bench's permits keeps
// the most out at any revision of the model, which the policy bounds.

// rolloutOption is the configuration option the scenario changes.
const rolloutOption = "generation"

// writeRolloutConfig gives the charm in cdir the option the scenario
// changes.
func writeRolloutConfig(cdir string) error {
	yaml := "options:\n  " + rolloutOption + ":\n    type: int\n    default: 0\n    description: changed by the rollout scenario\n"
	return os.WriteFile(filepath.Join(cdir, "config.yaml"), []byte(yaml), 0o644)
}

// rolloutPolicyError says what is wrong with max-parallel as a policy's.
func rolloutPolicyError(maxParallel string) error {
	p := state.DefaultRolloutPolicy()
	p.MaxParallel = maxParallel
	return state.ValidateRolloutPolicy(p)
}

// rolloutResults are the rollout scenario's figures.
type rolloutResults struct {
	Units       int    `json:"units"`
	MaxParallel string `json:"max_parallel"`
	// PermitLimit is what max-parallel allows of Units.
	PermitLimit int `json:"permit_limit"`
	// SecondsToDone is from the SetConfig call until the rollout was
	// seen done; SetConfigSeconds the call's own time.
	SecondsToDone    float64 `json:"seconds_to_done"`
	SetConfigSeconds float64 `json:"set_config_seconds"`
	// MostPermits is the most permits out at once at any revision the
	// watch saw (PermitRevisions of them).
	MostPermits     int `json:"most_permits"`
	PermitRevisions int `json:"permit_revisions"`
	// EtcdTxnsPerUnit is the controller's transactions from the call
	// until done, ÷ units: the agents' other writes meanwhile included.
	EtcdTxnsPerUnit      float64 `json:"etcd_txns_per_unit"`
	ControllerCPUSeconds float64 `json:"controller_cpu_seconds"`
	MachineBusy          float64 `json:"machine_busy"`
}

// runRollout runs the scenario on bench.
func runRollout(ctx context.Context, e opsEnv, maxParallel string) (*rolloutResults, error) {
	res := &rolloutResults{Units: e.units, MaxParallel: maxParallel}
	if _, err := e.ctl.op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "bench", MaxParallel: &maxParallel}); err != nil {
		return res, fmt.Errorf("set bench's rollout policy: %w", err)
	}
	res.PermitLimit = state.MaxParallelUnits(&pb.RolloutPolicy{MaxParallel: maxParallel}, e.units)
	wctx, stopWatching := context.WithCancel(ctx)
	permits := followPermits(wctx, e.st, "bench")

	txnsBefore, err := e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		stopWatching()
		return res, err
	}
	meter := startPhase(e.ctl.cmd.Process.Pid)
	e.prof.cpu(ctx, "rollout")
	say("changing bench's configuration: %d units, max-parallel %s (%d permits)", e.units, maxParallel, res.PermitLimit)
	start := time.Now()
	if _, err := e.ctl.op.SetConfig(ctx, &pb.SetConfigRequest{Service: "bench", Set: map[string]string{rolloutOption: "1"}}); err != nil {
		stopWatching()
		return res, fmt.Errorf("set bench's configuration: %w", err)
	}
	res.SetConfigSeconds = time.Since(start).Seconds()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		ro, err := e.st.Rollout(ctx, "bench")
		if err != nil {
			stopWatching()
			return res, err
		}
		if ro.State == pb.RolloutState_ROLLOUT_STATE_DONE && ro.Target > 1 {
			break
		}
		if ro.State == pb.RolloutState_ROLLOUT_STATE_FAILED || ro.State == pb.RolloutState_ROLLOUT_STATE_PAUSED {
			stopWatching()
			return res, fmt.Errorf("bench's rollout to revision %d is %s: %s", ro.Target, state.RolloutStateName(ro.State), ro.Reason)
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			urs, err := e.st.UnitRevisions(ctx, "bench")
			if err == nil {
				on := 0
				for _, ur := range urs {
					if ur.Current == ro.Target {
						on++
					}
				}
				say("  revision %d: %d of %d units on it, %d permits out (%.0f s)", ro.Target, on, len(urs), ro.Permits, time.Since(start).Seconds())
			}
		}
		select {
		case <-ctx.Done():
			stopWatching()
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	res.SecondsToDone = time.Since(start).Seconds()
	use := meter.end()
	res.ControllerCPUSeconds, res.MachineBusy = use.controller, use.busy
	if txnsAfter, err := e.ctl.metric("lifeline_etcd_txns_total"); err == nil {
		res.EtcdTxnsPerUnit = (txnsAfter - txnsBefore) / float64(e.units)
	}
	stopWatching()
	res.MostPermits, res.PermitRevisions = permits.result()
	say("  every unit on the new revision after %.1f s; at most %d permits out at once (limit %d)", res.SecondsToDone, res.MostPermits, res.PermitLimit)
	return res, nil
}

// permitFollower keeps the most permits of a service out at once, at
// every revision of the model its watch sees.
type permitFollower struct {
	mu        sync.Mutex
	out       map[string]bool
	most      int
	revisions int
	done      chan struct{}
}

func followPermits(ctx context.Context, st *state.State, service string) *permitFollower {
	f := &permitFollower{out: map[string]bool{}, done: make(chan struct{})}
	prefix := state.PermitsPrefix(service)
	go func() {
		defer close(f.done)
		for b := range st.Watch(ctx, prefix, 0) {
			f.mu.Lock()
			if b.Reset {
				f.out = map[string]bool{}
			}
			for _, e := range b.Events {
				if !strings.HasPrefix(e.Key, prefix) {
					continue
				}
				if e.Type == state.EventPut {
					f.out[e.Key] = true
				} else {
					delete(f.out, e.Key)
				}
			}
			f.most, f.revisions = max(f.most, len(f.out)), f.revisions+1
			f.mu.Unlock()
		}
	}()
	return f
}

// result waits for the watch to end (its context cancelled) and returns
// the most permits out at once and how many batches it saw.
func (f *permitFollower) result() (most, revisions int) {
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most, f.revisions
}
