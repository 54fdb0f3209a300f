package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifelinehq/lifeline/controller/gate"
	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/state"
)

// The defaults of the rollout worker.
const (
	// DefaultRolloutMinPass is the least time between two passes: a
	// burst of changes makes one pass, not one a change.
	DefaultRolloutMinPass = 200 * time.Millisecond
	// DefaultRolloutTick is how often a pass runs when nothing changed:
	// deadlines, back-offs and min-healthy are times, not changes.
	DefaultRolloutTick = time.Second
	// DefaultRolloutGateAsks bounds the gate asks in flight, all gates
	// and services together.
	DefaultRolloutGateAsks = 16
	// DefaultRolloutCalls bounds the grants, releases and records of
	// decisions a pass makes at once.
	DefaultRolloutCalls = 4
	// DefaultRolloutBackoff is the first wait of a unit a gate denied or
	// did not answer, doubled each time up to DefaultRolloutMaxBackoff.
	DefaultRolloutBackoff    = 5 * time.Second
	DefaultRolloutMaxBackoff = 5 * time.Minute
	// MaxRolloutPassUnits bounds the units one pass grants permits to,
	// all services together (MaxRolloutPassUnits/state.MaxGrantUnits
	// transactions at most).
	MaxRolloutPassUnits = 2000
)

// RolloutWorkerConfig configures a RolloutWorker.
type RolloutWorkerConfig struct {
	State  *state.State
	Logger hclog.Logger
	// Metrics registers the worker's metrics; none when nil.
	Metrics prometheus.Registerer
	// Gates are the gates a policy may name (lifelined controller
	// --rollout-gate), by their names.
	Gates []gate.Gate
	// MinPass, Tick, GateAsks, Calls, Backoff and MaxBackoff: the
	// Default* above when zero.
	MinPass    time.Duration
	Tick       time.Duration
	GateAsks   int
	Calls      int
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Validate reports a configuration NewRolloutWorker cannot use.
func (c RolloutWorkerConfig) Validate() error {
	switch {
	case c.State == nil:
		return errors.New("rollout worker: no state")
	case c.MinPass < 0 || c.Tick < 0 || c.GateAsks < 0 || c.Calls < 0 || c.Backoff < 0 || c.MaxBackoff < 0:
		return errors.New("rollout worker: a negative setting")
	}
	seen := map[string]bool{}
	for _, g := range c.Gates {
		if seen[g.Name()] {
			return fmt.Errorf("rollout worker: gate %q given twice", g.Name())
		}
		seen[g.Name()] = true
	}
	return nil
}

// RolloutWorker is the leader's half of rollouts (docs/DESIGN.md,
// Revisions and rollouts): for every service rolling out (or in its
// canary) it asks the policy's gate about the units waiting to move,
// grants permits to those allowed within max-parallel, releases the
// permits of units done (running the target, agent idle, workload
// neither error nor blocked, for min-healthy), fails the rollout on a
// unit in error on the target or a deadline passed, and completes it
// when every unit runs the target. Every step is a checked transaction
// of state: two leaders running it for a moment do no harm. Made once a
// process, it is Run for each term as leader.
type RolloutWorker struct {
	cfg    RolloutWorkerConfig
	logger hclog.Logger
	gates  map[string]gate.Gate

	granted   prometheus.Counter
	released  prometheus.Counter
	failed    prometheus.Counter
	completed prometheus.Counter
	decisions *prometheus.CounterVec
	rolling   prometheus.Gauge
	out       prometheus.Gauge
}

// NewRolloutWorker returns a worker and registers its metrics.
func NewRolloutWorker(cfg RolloutWorkerConfig) (*RolloutWorker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MinPass, DefaultRolloutMinPass)
	def(&cfg.Tick, DefaultRolloutTick)
	def(&cfg.Backoff, DefaultRolloutBackoff)
	def(&cfg.MaxBackoff, DefaultRolloutMaxBackoff)
	if cfg.GateAsks == 0 {
		cfg.GateAsks = DefaultRolloutGateAsks
	}
	if cfg.Calls == 0 {
		cfg.Calls = DefaultRolloutCalls
	}
	w := &RolloutWorker{
		cfg: cfg, logger: cfg.Logger.Named("rollout"), gates: map[string]gate.Gate{},
		granted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "rollout_permits_granted_total",
			Help: "Permits to move to a new revision this controller, as leader, granted to units.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "rollout_permits_released_total",
			Help: "Permits this controller, as leader, released: their units ran the new revision, healthy for min-healthy.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "rollout_failures_total",
			Help: "Rollouts this controller, as leader, failed: a unit in error on the new revision, or the deadline passed.",
		}),
		completed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "rollouts_completed_total",
			Help: "Rollouts this controller, as leader, completed: every unit runs the new revision.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "rollout_gate_decisions_total",
			Help: "Gate decisions this controller, as leader, recorded, by verdict (a gate that did not answer counts as retry).",
		}, []string{"verdict"}),
		rolling: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "rollouts_active",
			Help: "Services rolling out or in their canary, as the leader last saw them (0 on other controllers).",
		}),
		out: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "rollout_permits_out",
			Help: "Permits out, all services together, as the leader last saw them (0 on other controllers).",
		}),
	}
	for _, g := range cfg.Gates {
		w.gates[g.Name()] = g
	}
	for _, v := range []string{"allow", "deny", "retry"} {
		w.decisions.WithLabelValues(v)
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(w.granted, w.released, w.failed, w.completed, w.decisions, w.rolling, w.out)
	}
	return w, nil
}

// Run works until ctx ends: one term as leader. What it keeps in memory
// (back-offs, when a unit was first seen healthy) is the term's: a new
// leader starts afresh.
func (w *RolloutWorker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	pic := newRolloutPicture()
	var watches sync.WaitGroup
	for kind := range pictureKinds {
		watches.Add(1)
		go func() {
			defer watches.Done()
			pic.follow(ctx, w.cfg.State, kind)
		}()
	}
	t := newRolloutTerm(w, pic)
	defer func() {
		cancel()
		t.asks.Wait()
		watches.Wait()
		w.rolling.Set(0)
		w.out.Set(0)
	}()
	tick := time.NewTicker(w.cfg.Tick)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pic.changed:
		case <-t.news:
		case <-tick.C:
		}
		if d := w.cfg.MinPass - time.Since(last); d > 0 && !pause.For(ctx, d) {
			return nil
		}
		last = time.Now()
		if !pic.ready() {
			continue
		}
		t.pass(ctx, time.Now())
	}
}
