package controller

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The defaults of the operations worker.
const (
	DefaultOperationsInterval  = 5 * time.Second
	DefaultTaskLostAfter       = time.Minute
	DefaultOperationRetention  = 14 * 24 * time.Hour
	DefaultOperationPruneBatch = 100
)

// OperationsWorkerConfig configures an OperationsWorker.
type OperationsWorkerConfig struct {
	State  *state.State
	Logger hclog.Logger
	// Metrics registers the worker's metrics; none when nil.
	Metrics prometheus.Registerer
	// Interval is how often it works; DefaultOperationsInterval when
	// zero.
	Interval time.Duration
	// TaskLostAfter is how long a machine running tasks may go without a
	// heartbeat before its tasks are lost; DefaultTaskLostAfter when zero.
	TaskLostAfter time.Duration
	// Retention is how long a finished operation is kept;
	// DefaultOperationRetention when zero.
	Retention time.Duration
	// PruneBatch bounds the operations deleted in one pass;
	// DefaultOperationPruneBatch when zero.
	PruneBatch int
}

// Validate reports a configuration NewOperationsWorker cannot use.
func (c OperationsWorkerConfig) Validate() error {
	switch {
	case c.State == nil:
		return errors.New("operations worker: no state")
	case c.Interval < 0 || c.TaskLostAfter < 0 || c.Retention < 0 || c.PruneBatch < 0:
		return errors.New("operations worker: a negative setting")
	}
	return nil
}

// OperationsWorker is the leader's upkeep of operations: every Interval
// it makes the tasks a stopped controller left unmade
// (MaterializePending), marks lost the tasks of machines silent for
// TaskLostAfter (DetectLostTasks, once it has led that long), expires
// lapsed approvals and deletes operations finished Retention ago
// (PruneOperations, PruneBatch a pass), and updates the tasks' metrics.
// Every step is a checked transaction of state: two leaders running it
// for a moment do no harm. Made once a process, it is Run for each term
// as leader.
type OperationsWorker struct {
	cfg    OperationsWorkerConfig
	logger hclog.Logger

	tasks   *prometheus.GaugeVec
	oldest  prometheus.Gauge
	lost    prometheus.Counter
	expired prometheus.Counter
	pruned  prometheus.Counter
}

// gaugedStates are the open task states lifeline_tasks reports.
var gaugedStates = []pb.TaskState{
	pb.TaskState_TASK_STATE_PENDING, pb.TaskState_TASK_STATE_RUNNING, pb.TaskState_TASK_STATE_PAUSING,
	pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_STOPPING, pb.TaskState_TASK_STATE_LOST,
}

// NewOperationsWorker returns a worker and registers its metrics.
func NewOperationsWorker(cfg OperationsWorkerConfig) (*OperationsWorker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultOperationsInterval
	}
	if cfg.TaskLostAfter == 0 {
		cfg.TaskLostAfter = DefaultTaskLostAfter
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultOperationRetention
	}
	if cfg.PruneBatch == 0 {
		cfg.PruneBatch = DefaultOperationPruneBatch
	}
	w := &OperationsWorker{
		cfg: cfg, logger: cfg.Logger.Named("operations"),
		tasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "tasks",
			Help: "Open tasks of operations by state, as the leader last counted them (0 on other controllers).",
		}, []string{"state"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "task_oldest_running_seconds",
			Help: "How long the longest running task (running, pausing or stopping) has run; 0 when none.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "tasks_lost_total",
			Help: "Tasks this controller, as leader, marked lost: their machine's heartbeat was older than --task-lost-after.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "operations_expired_total",
			Help: "Operations this controller, as leader, expired: not approved, or not executed once approved, in time.",
		}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "operations_pruned_total",
			Help: "Finished operations this controller, as leader, deleted after --operation-retention.",
		}),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(w.tasks, w.oldest, w.lost, w.expired, w.pruned)
	}
	return w, nil
}

// Run works until ctx ends: one term as leader, which starts now (the
// lost-task detector gives agents TaskLostAfter from now to report).
func (w *OperationsWorker) Run(ctx context.Context) error {
	since := time.Now()
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	defer w.clearGauges()
	for {
		w.pass(ctx, since)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pass does one round of the worker's steps, each on its own: a step
// that fails is logged and tried again next time.
func (w *OperationsWorker) pass(ctx context.Context, since time.Time) {
	st := w.cfg.State
	warn := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			w.logger.Warn(what, "error", err)
		}
	}
	warn("making the tasks of running operations failed", st.MaterializePending(ctx))
	n, err := st.DetectLostTasks(ctx, w.cfg.TaskLostAfter, since)
	warn("detecting lost tasks failed", err)
	if n > 0 {
		w.lost.Add(float64(n))
		w.logger.Info("tasks lost: their machines went silent", "tasks", n, "after", w.cfg.TaskLostAfter)
	}
	expired, pruned, err := st.PruneOperations(ctx, w.cfg.Retention, w.cfg.PruneBatch)
	warn("pruning operations failed", err)
	w.expired.Add(float64(expired))
	w.pruned.Add(float64(pruned))
	if pruned > 0 {
		w.logger.Info("pruned finished operations", "operations", pruned, "retention", w.cfg.Retention)
	}
	counts, oldest, err := st.TaskGauges(ctx)
	warn("counting tasks failed", err)
	if err != nil {
		return
	}
	for _, s := range gaugedStates {
		w.tasks.WithLabelValues(state.TaskStateName(s)).Set(float64(counts[s]))
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(time.Since(oldest).Seconds(), 0)
	}
	w.oldest.Set(age)
}

// clearGauges zeroes the gauges once the controller no longer leads:
// another controller counts.
func (w *OperationsWorker) clearGauges() {
	for _, s := range gaugedStates {
		w.tasks.WithLabelValues(state.TaskStateName(s)).Set(0)
	}
	w.oldest.Set(0)
}
