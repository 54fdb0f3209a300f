package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The operations scenario (-scenario operations) runs, once every unit of
// bench runs and is idle, two operations on all of its units:
//
//   - noop, an action that exits at once, timed from the RunAction call
//     (a safe action runs at once: the call makes the operation and its
//     tasks, and is its execution) until every task has ended, by the
//     revision at which the last one did;
//   - sleep, an action that sleeps sleepSeconds; once every task runs, the
//     whole operation is paused (PauseTasks, no units: every task) and
//     timed until every task is paused, by the same revision clock. It is
//     then stopped, so that destroying finds no open task.
//
// A charm declaring an action must ship its executable (charm's
// checkActionFiles), which the unit agent runs as a process: there is no
// action without one, as there are hooks without any (-hooks none, where
// the charm has no hooks directory and the agents fork nothing). So the
// actions are the static programs of noop.go whatever -hooks says, shell
// scripts with -hooks sh; and since the charm then has files, every unit
// unpacks it while deploying, which -hooks none otherwise skips: the
// scenario's deploy figures are not the plain deploy's.
//
// Neither action is parallel: each runs under its machine's hook lock,
// one at a time a machine. So of the sleeping operation's tasks all are
// RUNNING in etcd (the agent starts a task before it takes the lock) but
// one a machine has its process; the others wait for the lock, and a
// pause ends them there. Parallel sleepers would be a process a unit,
// with two pipes and a pidfd each in the fleet's process: 30,000
// descriptors at 10,000 units, beyond its limit of 20,000.

// sleepSeconds is how long the sleeping action sleeps: far longer than
// its tasks take to start and be paused.
const sleepSeconds = 3600

// fewestTxnsPerTask is the fewest etcd transactions a task of an
// operation needs under the rules: made (materializeTasks makes 8 in a
// transaction), started (1), finished (1).
const fewestTxnsPerTask = 1.0/8 + 1 + 1

// opsResults are the operations scenario's figures.
type opsResults struct {
	Tasks int `json:"tasks"`
	// SecondsToDone is from the RunAction call of noop until every task
	// ended (done, or failed), by the revision clock; RunCallSeconds the
	// call's own time (it makes every task before it returns).
	SecondsToDone  float64 `json:"seconds_to_done"`
	RunCallSeconds float64 `json:"run_call_seconds"`
	TasksDone      int     `json:"tasks_done"`
	TasksFailed    int     `json:"tasks_failed"`
	// TasksLost were marked lost (their machine's heartbeat late past
	// the controller's --task-lost-after) rather than ending: counted as
	// ended for the time above, then stopped.
	TasksLost      int     `json:"tasks_lost"`
	TasksPerSecond float64 `json:"tasks_per_second"`
	// FewestTxnsPerTask, CeilingTasksPerSecond (raw etcd put-if-absent
	// transactions a second ÷ FewestTxnsPerTask) and the ratio to it.
	FewestTxnsPerTask     float64 `json:"fewest_txns_per_task"`
	CeilingTasksPerSecond float64 `json:"ceiling_tasks_per_second"`
	RatioToCeiling        float64 `json:"ratio_to_ceiling"`
	// EtcdTxnsPerTask is the controller's transactions from the call
	// until every task ended, ÷ tasks: the agents' other writes
	// meanwhile (heartbeats, status) included.
	EtcdTxnsPerTask float64            `json:"etcd_txns_per_task"`
	Retries         map[string]float64 `json:"etcd_txn_retries_by_operation"`
	CallsPerTask    map[string]float64 `json:"api_calls_per_task"`
	CallP99         map[string]float64 `json:"api_call_p99_seconds"`
	// The controller's CPU and the fleet's (its action processes apart),
	// and how busy the machine was, from the call until every task ended.
	ControllerCPUSeconds float64 `json:"controller_cpu_seconds"`
	FleetCPUSeconds      float64 `json:"fleet_cpu_seconds"`
	ActionCPUSeconds     float64 `json:"action_cpu_seconds"`
	MachineBusy          float64 `json:"machine_busy"`

	// The pause: PauseRunning tasks were running, PauseProcesses of them
	// with their action's process (one a machine, at most), when the
	// pause was called, SecondsToRunning after the sleeping operation's
	// RunAction call.
	PauseSecondsToRunning float64 `json:"pause_seconds_to_running"`
	PauseRunning          int     `json:"pause_tasks_running"`
	// PauseLost of the sleeping operation's tasks were lost (see
	// TasksLost) rather than running, then paused: not paused.
	PauseLost int `json:"pause_tasks_lost"`
	// PausePaused of them were paused when the pause settled; PauseEnded
	// had ended first (their action's run over, or failed).
	PausePaused    int `json:"pause_tasks_paused"`
	PauseEnded     int `json:"pause_tasks_ended"`
	PauseProcesses int `json:"pause_action_processes"`
	// PauseCallSeconds is the PauseTasks call's own time (every task
	// made pausing, or paused); PauseSecondsToSettled from the call until
	// every task is paused (or ended, or lost), by the revision clock.
	PauseCallSeconds      float64 `json:"pause_call_seconds"`
	PauseSecondsToSettled float64 `json:"pause_seconds_to_settled"`
	PauseEtcdTxnsPerTask  float64 `json:"pause_etcd_txns_per_task"`
	// WatchLagSeconds is how long after the last task ended, then was
	// paused, the harness's watch saw it (not counted above).
	WatchLagSeconds float64 `json:"watch_lag_seconds"`
}

// writeActions gives the charm in cdir the scenario's actions: noop and
// sleep, safe (no approval: they run when asked), of the kind of program
// -hooks names (the static ones for none, see above).
func writeActions(cdir, hooks string) error {
	yaml := `noop:
  description: exits at once
  safe: true
  additionalProperties: false
sleep:
  description: sleeps, until paused or stopped
  safe: true
  timeout: 2h
  pause-grace: 5s
  additionalProperties: false
`
	noop, sleep := noopProgram(), sleepProgram(sleepSeconds)
	if hooks == "sh" || noop == nil {
		noop = []byte("#!/bin/sh\nexit 0\n")
	}
	if hooks == "sh" || sleep == nil {
		sleep = []byte(fmt.Sprintf("#!/bin/sh\nexec sleep %d\n", sleepSeconds))
	}
	if err := os.WriteFile(filepath.Join(cdir, "actions.yaml"), []byte(yaml), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(cdir, "actions"), 0o755); err != nil {
		return err
	}
	for name, prog := range map[string][]byte{"noop": noop, "sleep": sleep} {
		if err := os.WriteFile(filepath.Join(cdir, "actions", name), prog, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// opsEnv is what the scenario uses of the run.
type opsEnv struct {
	ctl        *controllerProc
	st         *state.State
	clock      *revClock
	fleetUsage func() usage
	raw        float64
	units      int
	machines   int
	prof       *profiler
}

// runOperations runs the scenario on every unit of bench.
func runOperations(ctx context.Context, e opsEnv) (*opsResults, error) {
	res := &opsResults{Tasks: e.units, FewestTxnsPerTask: fewestTxnsPerTask, CeilingTasksPerSecond: e.raw / fewestTxnsPerTask}
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	tasks := followTasks(wctx, e.st)

	say("running noop on the %d units of bench", e.units)
	countsBefore, err := e.ctl.counters()
	if err != nil {
		return res, err
	}
	txnsBefore, err := e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	fleetBefore := e.fleetUsage()
	meter := startPhase(e.ctl.cmd.Process.Pid)
	e.prof.cpu(ctx, "operation")
	start := time.Now()
	resp, err := e.ctl.op.RunAction(ctx, &pb.RunActionRequest{Targets: []string{"bench"}, Action: "noop"})
	if err != nil {
		return res, fmt.Errorf("run noop: %w", err)
	}
	res.RunCallSeconds = time.Since(start).Seconds()
	id := resp.Operation.Id
	say("  operation %d made with its tasks after %.1f s", id, res.RunCallSeconds)
	lost := func(n map[pb.TaskState]int) int { return n[pb.TaskState_TASK_STATE_LOST] }
	rev, err := tasks.wait(ctx, id, start, func(n map[pb.TaskState]int) bool { return ended(n)+lost(n) == e.units })
	if err != nil {
		return res, fmt.Errorf("operation %d: %w", id, err)
	}
	done, lag := e.clock.seen(ctx, rev)
	use := meter.end()
	fleet := e.fleetUsage().since(fleetBefore)
	txnsAfter, err := e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	countsAfter, err := e.ctl.counters()
	if err != nil {
		return res, err
	}
	n := tasks.counts(id)
	res.SecondsToDone = done.Sub(start).Seconds()
	res.TasksDone, res.TasksFailed, res.TasksLost = n[pb.TaskState_TASK_STATE_DONE], n[pb.TaskState_TASK_STATE_FAILED], lost(n)
	res.TasksPerSecond = float64(e.units) / res.SecondsToDone
	res.RatioToCeiling = res.TasksPerSecond / res.CeilingTasksPerSecond
	res.EtcdTxnsPerTask = (txnsAfter - txnsBefore) / float64(e.units)
	res.Retries = perUnit(countsBefore.retries, countsAfter.retries, 1)
	res.CallsPerTask = perUnit(countsBefore.calls, countsAfter.calls, e.units)
	res.CallP99 = slowest(countsBefore, countsAfter)
	res.ControllerCPUSeconds, res.MachineBusy = use.controller, use.busy
	res.FleetCPUSeconds, res.ActionCPUSeconds = fleet.cpu.Seconds(), fleet.children.Seconds()
	res.WatchLagSeconds = lag.Seconds()
	say("  every task ended after %.1f s (%d done, %d failed, %d lost): %.0f tasks/s, %.2f of the ceiling", res.SecondsToDone, res.TasksDone, res.TasksFailed, res.TasksLost, res.TasksPerSecond, res.RatioToCeiling)
	if err := stopAll(ctx, e.ctl, tasks, id, e.units); err != nil {
		return res, err
	}
	if err := e.prof.wait(); err != nil {
		return res, err
	}

	say("running sleep on the %d units of bench, to pause it", e.units)
	start = time.Now()
	resp, err = e.ctl.op.RunAction(ctx, &pb.RunActionRequest{Targets: []string{"bench"}, Action: "sleep"})
	if err != nil {
		return res, fmt.Errorf("run sleep: %w", err)
	}
	id = resp.Operation.Id
	rev, err = tasks.wait(ctx, id, start, func(n map[pb.TaskState]int) bool { return n[pb.TaskState_TASK_STATE_RUNNING]+lost(n) == e.units })
	if err != nil {
		return res, fmt.Errorf("operation %d: %w", id, err)
	}
	running, _ := e.clock.seen(ctx, rev)
	res.PauseSecondsToRunning = running.Sub(start).Seconds()
	// The machines' first tasks take their hook locks and start their
	// processes as soon as they run: a second is ample for a static
	// program's fork and exec.
	time.Sleep(time.Second)
	res.PauseRunning = tasks.counts(id)[pb.TaskState_TASK_STATE_RUNNING]
	res.PauseProcesses = min(e.machines, res.PauseRunning)
	say("  every task running after %.1f s (%d with a process, one a machine): pausing operation %d", res.PauseSecondsToRunning, res.PauseProcesses, id)
	txnsBefore, err = e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	start = time.Now()
	if _, err := e.ctl.op.PauseTasks(ctx, &pb.PauseTasksRequest{Id: id}); err != nil {
		return res, fmt.Errorf("pause operation %d: %w", id, err)
	}
	res.PauseCallSeconds = time.Since(start).Seconds()
	rev, err = tasks.wait(ctx, id, start, func(n map[pb.TaskState]int) bool {
		return n[pb.TaskState_TASK_STATE_PAUSED]+ended(n)+lost(n) == e.units
	})
	if err != nil {
		return res, fmt.Errorf("pausing operation %d: %w", id, err)
	}
	paused, lag := e.clock.seen(ctx, rev)
	txnsAfter, err = e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	res.PauseSecondsToSettled = paused.Sub(start).Seconds()
	n = tasks.counts(id)
	res.PauseLost, res.PausePaused, res.PauseEnded = lost(n), n[pb.TaskState_TASK_STATE_PAUSED], ended(n)
	res.PauseEtcdTxnsPerTask = (txnsAfter - txnsBefore) / float64(e.units)
	res.WatchLagSeconds = max(res.WatchLagSeconds, lag.Seconds())
	say("  every task paused or ended after %.1f s (the call returned after %.1f s): %d paused, %d ended first, %d lost", res.PauseSecondsToSettled, res.PauseCallSeconds, res.PausePaused, res.PauseEnded, res.PauseLost)

	return res, stopAll(ctx, e.ctl, tasks, id, e.units)
}

// stopAll stops operation id's tasks not ended (the lost ones, the
// paused), and waits until all of its units tasks have ended, so that
// destroying finds none open.
func stopAll(ctx context.Context, ctl *controllerProc, tasks *taskFollower, id int64, units int) error {
	if ended(tasks.counts(id)) == units {
		return nil
	}
	if _, err := ctl.op.StopTasks(ctx, &pb.StopTasksRequest{Id: id}); err != nil {
		return fmt.Errorf("stop operation %d: %w", id, err)
	}
	if _, err := tasks.wait(ctx, id, time.Now(), func(n map[pb.TaskState]int) bool { return ended(n) == units }); err != nil {
		return fmt.Errorf("stopping operation %d: %w", id, err)
	}
	return nil
}

// ended counts the tasks that ended: done, failed or stopped.
func ended(n map[pb.TaskState]int) int {
	return n[pb.TaskState_TASK_STATE_DONE] + n[pb.TaskState_TASK_STATE_FAILED] + n[pb.TaskState_TASK_STATE_STOPPED]
}

// taskFollower counts the operations' tasks by state, from a watch of
// every task's record.
type taskFollower struct {
	mu    sync.Mutex
	state map[string]pb.TaskState // by key
	n     map[int64]map[pb.TaskState]int
	// rev is, for each operation, the revision of its tasks' last change.
	rev     map[int64]int64
	changed chan struct{}
}

// tasksRoot is the prefix of every task's key.
var tasksRoot = strings.TrimSuffix(state.TasksPrefix(0), fmt.Sprintf("%020d/", 0))

// followTasks follows the tasks until ctx ends.
func followTasks(ctx context.Context, st *state.State) *taskFollower {
	f := &taskFollower{state: map[string]pb.TaskState{}, n: map[int64]map[pb.TaskState]int{},
		rev: map[int64]int64{}, changed: make(chan struct{}, 1)}
	go func() {
		for b := range st.Watch(ctx, tasksRoot, 0) {
			f.apply(b)
		}
	}()
	return f
}

func (f *taskFollower) apply(b state.WatchBatch) {
	f.mu.Lock()
	if b.Reset {
		f.state, f.n = map[string]pb.TaskState{}, map[int64]map[pb.TaskState]int{}
	}
	for _, e := range b.Events {
		var id int64
		if _, err := fmt.Sscanf(e.Key[len(tasksRoot):], "%d/", &id); err != nil {
			continue
		}
		if f.n[id] == nil {
			f.n[id] = map[pb.TaskState]int{}
		}
		if old, ok := f.state[e.Key]; ok {
			f.n[id][old]--
			delete(f.state, e.Key)
		}
		t := &pb.Task{}
		if e.Type == state.EventPut && proto.Unmarshal(e.Value, t) == nil {
			f.state[e.Key] = t.State
			f.n[id][t.State]++
		}
		f.rev[id] = max(f.rev[id], e.ModRevision)
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// counts returns operation id's tasks by state.
func (f *taskFollower) counts(id int64) map[pb.TaskState]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[pb.TaskState]int, len(f.n[id]))
	for s, n := range f.n[id] {
		out[s] = n
	}
	return out
}

// wait waits until done says so of operation id's tasks, saying how they
// are every progressEvery (the time since start), and returns the
// revision of their last change: when done became true, as their counts
// only move towards it.
func (f *taskFollower) wait(ctx context.Context, id int64, start time.Time, done func(map[pb.TaskState]int) bool) (int64, error) {
	p := newProgress(start)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		n := f.counts(id)
		if done(n) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.rev[id], nil
		}
		if p.due() {
			p.say("operation %d's tasks: %s", id, taskCounts(n))
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (tasks: %s)", ctx.Err(), taskCounts(n))
		case <-f.changed:
		case <-t.C:
		}
	}
}

// taskCounts says tasks' counts by state: "pending 3, running 7".
func taskCounts(n map[pb.TaskState]int) string {
	var out []string
	for s := pb.TaskState_TASK_STATE_PENDING; s <= pb.TaskState_TASK_STATE_LOST; s++ {
		if n[s] > 0 {
			out = append(out, fmt.Sprintf("%s %d", state.TaskStateName(s), n[s]))
		}
	}
	if len(out) == 0 {
		return "none yet"
	}
	return strings.Join(out, ", ")
}

// print adds the scenario's lines to the harness's summary.
func (o *opsResults) print(row func(k, format string, v ...any)) {
	row("operation: every task ended", "%.1f s after the run call (%.1f s of it the call, making the tasks); %d done, %d failed, %d lost; %.0f tasks/s",
		o.SecondsToDone, o.RunCallSeconds, o.TasksDone, o.TasksFailed, o.TasksLost, o.TasksPerSecond)
	row("operation: ratio to ceiling", "%.2f (ceiling %.0f tasks/s at %.3f txns a task)", o.RatioToCeiling, o.CeilingTasksPerSecond, o.FewestTxnsPerTask)
	row("operation: etcd txns a task", "%.2f; retried: %s", o.EtcdTxnsPerTask, top(o.Retries, 4, "%.0f"))
	row("operation: CPU", "controller %.1f s, fleet %.1f s (actions %.1f s); machine's CPUs %.0f%% busy",
		o.ControllerCPUSeconds, o.FleetCPUSeconds, o.ActionCPUSeconds, 100*o.MachineBusy)
	row("operation: API calls a task", "%s", topCalls(o.CallsPerTask, 6))
	row("operation: slowest calls (p99)", "%s", slowCalls(o.CallP99, 4))
	row("pause-all: running", "%d tasks running (%d with a process), %d lost, %.1f s after the run call",
		o.PauseRunning, o.PauseProcesses, o.PauseLost, o.PauseSecondsToRunning)
	row("pause-all: settled", "%.1f s after the pause call (the call %.1f s): %d paused, %d ended first; %.2f etcd txns a task",
		o.PauseSecondsToSettled, o.PauseCallSeconds, o.PausePaused, o.PauseEnded, o.PauseEtcdTxnsPerTask)
	row("operations: watch lag", "%.1f s at most (not counted above)", o.WatchLagSeconds)
}
