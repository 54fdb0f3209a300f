package unitagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The unit's tasks (its share of operations) are run by a taskRunner, a
// goroutine a task, beside the agent's loop, which hands it the tasks'
// watch at each look (sync). A pending task is started (StartTask) and
// its action, actions/<name> in the charm directory, run as hooks are
// (hooks.Run: its own process group, the hook environment and tools),
// with an ActionContext; a parallel action runs beside hooks, another
// holds the machine's hook lock while it runs, between hooks. Pausing
// or stopping one cancels its run (SIGTERM to its group, its pause grace,
// SIGKILL) and reports it paused or stopped, unless it ended first. The
// unit dying stops its running tasks, and has the controller close the
// others.
//
// The tasks it runs are recorded in tasks.json in the unit's directory
// (with each one's process group), before each starts: an agent that
// starts again ends what a task it ran left (its group, should the
// process have outlived the agent) and reports the task lost ("the agent
// restarted"); so does it any task its first look finds running that it
// does not run.

// TaskBeats is told how many tasks a unit agent runs as that changes, so
// that its machine's heartbeat goes while any runs: the machine agent.
type TaskBeats interface {
	Running(unit string, n int)
}

// heartbeatEvery is how often the running tasks' machine reports them
// alive.
const heartbeatEvery = 5 * time.Second

// logFlushEvery is how often a task's log lines go to the controller.
const logFlushEvery = time.Second

// maxLogChunk is the most a log append carries (state's bound).
const maxLogChunk = 16 << 10

// tasksFile records the tasks the agent runs.
const tasksFile = "tasks.json"

// taskEnd is why a run was cancelled: the outcome to report and its
// message.
type taskEnd struct {
	state pb.TaskState
	why   string
}

func (e *taskEnd) Error() string { return e.why }

// taskRun is one task the runner runs.
type taskRun struct {
	id     int64
	cancel context.CancelCauseFunc
}

// taskRecord is a task as tasks.json records it.
type taskRecord struct {
	Operation int64  `json:"operation"`
	Attempt   int64  `json:"attempt,omitempty"`
	Pgid      int    `json:"pgid,omitempty"`
	UUID      string `json:"uuid"`
}

type taskRunner struct {
	a     *Agent
	tools *toolServer
	ctx   context.Context
	wg    sync.WaitGroup

	mu   sync.Mutex
	runs map[int64]*taskRun
	recs map[int64]*taskRecord
	// looked says the first look at the tasks' watch was made: the
	// tasks found running then that the agent does not run were its
	// previous run's.
	looked bool
	// stopping says a StopUnitTasks call is on its way.
	stopping bool
}

func newTaskRunner(ctx context.Context, a *Agent, tools *toolServer) *taskRunner {
	tr := &taskRunner{a: a, tools: tools, ctx: ctx, runs: map[int64]*taskRun{}, recs: map[int64]*taskRecord{}}
	if a.cfg.Beats == nil {
		// Run alone, the agent reports its own heartbeat.
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tr.beat(ctx)
		}()
	}
	return tr
}

// wait waits for every task's goroutine: the agent's ctx has ended.
func (tr *taskRunner) wait() { tr.wg.Wait() }

// running counts the tasks the runner runs.
func (tr *taskRunner) running() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.runs)
}

// beat calls TaskHeartbeat every heartbeatEvery while a task runs.
func (tr *taskRunner) beat(ctx context.Context) {
	for pause.For(ctx, heartbeatEvery) {
		if tr.running() == 0 || tr.a.cfg.MachineID == "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := tr.a.cfg.API.TaskHeartbeat(cctx, &pb.TaskHeartbeatRequest{Machine: tr.a.cfg.MachineID})
		cancel()
		if err != nil && ctx.Err() == nil {
			tr.a.logger.Warn("task heartbeat failed", "error", err)
		}
	}
}

// sync acts on the tasks' watch as the agent's loop last saw it: starts
// the pending tasks, ends those pausing or stopping, and, the unit dying,
// stops them all. The charm must be there.
func (tr *taskRunner) sync(r *modelView) {
	if !r.tasksKnown {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.looked {
		tr.looked = true
		tr.reportLeftovers(r)
	}
	dying := r.unit != nil && r.unit.Life != pb.Life_LIFE_ALIVE
	idle := 0
	for _, id := range slices.Sorted(mapKeys(r.tasks)) {
		v := r.tasks[id]
		run := tr.runs[id]
		switch {
		case run != nil && dying:
			run.cancel(&taskEnd{pb.TaskState_TASK_STATE_STOPPED, "unit dying"})
		case run != nil && v == "pausing":
			run.cancel(&taskEnd{pb.TaskState_TASK_STATE_PAUSED, "paused by an operator"})
		case run != nil && v == "stopping":
			run.cancel(&taskEnd{pb.TaskState_TASK_STATE_STOPPED, "stopped by an operator"})
		case run == nil && v == "pending" && !dying && tr.a.l.Charm != "" && tr.a.l.Spec != nil:
			tr.start(id, tr.a.l.config())
		case run == nil && v != "running" && v != "pausing" && v != "stopping":
			idle++
		}
	}
	if dying && idle > 0 && !tr.stopping {
		tr.stopping = true
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tr.stopIdle()
		}()
	}
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// stopIdle has the controller close the dying unit's tasks that are not
// running.
func (tr *taskRunner) stopIdle() {
	ctx, cancel := context.WithTimeout(tr.ctx, 30*time.Second)
	defer cancel()
	resp, err := tr.a.cfg.API.StopUnitTasks(ctx, &pb.StopUnitTasksRequest{Unit: tr.a.cfg.Unit})
	if err != nil {
		tr.a.logger.Warn("cannot stop the dying unit's tasks", "error", err)
		pause.For(tr.ctx, time.Second)
	} else if resp.Stopped > 0 {
		tr.a.logger.Info("the dying unit's tasks stopped", "tasks", resp.Stopped)
	}
	tr.mu.Lock()
	tr.stopping = false
	tr.mu.Unlock()
}

// reportLeftovers, at the first look, reports lost every task that runs
// by the controller's word but not here (the agent's previous run's),
// having ended the process group its record names; call with mu held.
func (tr *taskRunner) reportLeftovers(r *modelView) {
	recs := tr.load()
	for id, v := range r.tasks {
		if v != "running" && v != "pausing" && v != "stopping" {
			continue
		}
		rec := recs[id]
		if rec == nil {
			rec = &taskRecord{Operation: id}
		}
		tr.recs[id] = rec
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tr.reportLost(rec)
		}()
	}
	for id := range recs {
		if _, ok := tr.recs[id]; !ok {
			tr.endGroup(recs[id])
		}
	}
	tr.saveLocked()
}

// reportLost ends what the task's previous run left and reports it lost.
func (tr *taskRunner) reportLost(rec *taskRecord) {
	tr.endGroup(rec)
	for {
		ctx, cancel := context.WithTimeout(tr.ctx, 30*time.Second)
		_, err := tr.a.cfg.API.ReportTaskLost(ctx, &pb.ReportTaskLostRequest{Operation: rec.Operation, Unit: tr.a.cfg.Unit,
			Attempt: rec.Attempt, Why: "the agent restarted"})
		cancel()
		if err == nil || final(err) {
			if err == nil {
				tr.a.logger.Warn("task lost: the agent restarted while it ran", "operation", rec.Operation)
			}
			tr.forget(rec.Operation)
			return
		}
		tr.a.logger.Warn("cannot report a task lost", "operation", rec.Operation, "error", err)
		if !pause.For(tr.ctx, time.Second) {
			return
		}
	}
}

// endGroup kills the process group a previous run of the agent left for
// the task, if it is still the task's: its leader's environment names the
// task.
func (tr *taskRunner) endGroup(rec *taskRecord) {
	if rec.Pgid <= 0 {
		return
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", rec.Pgid))
	if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), hooks.EnvJujuActionUUID+"="+rec.UUID) {
		return
	}
	_ = syscall.Kill(-rec.Pgid, syscall.SIGKILL)
}

// final says whether a refusal will not change however often asked.
func final(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
		return true
	}
	return false
}

// start runs task id; call with mu held.
func (tr *taskRunner) start(id int64, config map[string]*pb.ConfigValue) {
	ctx, cancel := context.WithCancelCause(tr.ctx)
	tr.runs[id] = &taskRun{id: id, cancel: cancel}
	tr.recs[id] = &taskRecord{Operation: id, UUID: actionUUID(id, tr.a.cfg.Unit)}
	tr.saveLocked()
	tr.told()
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		defer cancel(nil)
		tr.run(ctx, id, config)
		tr.mu.Lock()
		delete(tr.runs, id)
		tr.told()
		tr.mu.Unlock()
	}()
}

// told tells the machine agent how many tasks run; call with mu held.
func (tr *taskRunner) told() {
	if b := tr.a.cfg.Beats; b != nil {
		b.Running(tr.a.cfg.Unit, len(tr.runs))
	}
}

// actionUUID is Juju's id of the unit's task: "7-kv-0".
func actionUUID(id int64, unit string) string {
	return fmt.Sprintf("%d-%s", id, strings.ReplaceAll(unit, "/", "-"))
}

// forget drops a task's record.
func (tr *taskRunner) forget(id int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.recs, id)
	tr.saveLocked()
}

// record updates a task's record.
func (tr *taskRunner) record(id int64, f func(*taskRecord)) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if rec := tr.recs[id]; rec != nil {
		f(rec)
		tr.saveLocked()
	}
}

// load reads tasks.json.
func (tr *taskRunner) load() map[int64]*taskRecord {
	out := map[int64]*taskRecord{}
	b, err := os.ReadFile(filepath.Join(tr.a.cfg.DataDir, tasksFile))
	if err != nil {
		return out
	}
	var recs []*taskRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		tr.a.logger.Warn("unreadable record of tasks: ignored", "error", err)
		return out
	}
	for _, r := range recs {
		out[r.Operation] = r
	}
	return out
}

// saveLocked writes tasks.json (removes it when no task is left); call
// with mu held. The unit's directory holds its charm, where actions run.
func (tr *taskRunner) saveLocked() {
	path := filepath.Join(tr.a.cfg.DataDir, tasksFile)
	if len(tr.recs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			tr.a.logger.Warn("cannot remove the record of tasks", "error", err)
		}
		return
	}
	recs := make([]*taskRecord, 0, len(tr.recs))
	for _, id := range slices.Sorted(mapKeys(tr.recs)) {
		recs = append(recs, tr.recs[id])
	}
	b, _ := json.Marshal(recs)
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.Write(b)
		if serr := f.Sync(); err == nil {
			err = serr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		tr.a.logger.Warn("cannot record the tasks", "error", err)
	}
}

// run runs one task: start it, run its action, report how it ended.
func (tr *taskRunner) run(ctx context.Context, id int64, config map[string]*pb.ConfigValue) {
	a := tr.a
	logger := a.logger.With("operation", id)
	var st *pb.StartTaskResponse
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var err error
		st, err = a.cfg.API.StartTask(cctx, &pb.StartTaskRequest{Operation: id, Unit: a.cfg.Unit})
		cancel()
		if err == nil {
			break
		}
		if final(err) || ctx.Err() != nil {
			if ctx.Err() == nil {
				logger.Info("task not started", "error", err)
			}
			tr.forget(id)
			return
		}
		logger.Warn("cannot start task; trying again", "error", err)
		if !pause.For(ctx, time.Second) {
			tr.forget(id)
			return
		}
	}
	tr.record(id, func(r *taskRecord) { r.Attempt = st.Attempt })
	logger = logger.With("action", st.Action, "attempt", st.Attempt)
	logger.Info("task started")
	out := newTaskLog(tr.ctx, a, id, st.Attempt)
	end, results, msg := tr.runAction(ctx, id, st, out, config)
	out.close()
	if end == pb.TaskState_TASK_STATE_UNSPECIFIED {
		// The agent is stopping: its next run reports the task lost.
		return
	}
	for {
		cctx, cancel := context.WithTimeout(tr.ctx, 30*time.Second)
		resp, err := a.cfg.API.FinishTask(cctx, &pb.FinishTaskRequest{Operation: id, Unit: a.cfg.Unit, Attempt: st.Attempt,
			Outcome: end, Results: results, Message: msg})
		cancel()
		if err == nil {
			logger.Info("task ended", "state", resp.State.String(), "message", msg)
			break
		}
		if final(err) || tr.ctx.Err() != nil {
			logger.Warn("task's end not recorded", "error", err)
			break
		}
		logger.Warn("cannot report the task's end; trying again", "error", err)
		if !pause.For(tr.ctx, time.Second) {
			return
		}
	}
	tr.forget(id)
}

// runAction runs the action of a started task and says how it ended:
// UNSPECIFIED when the agent is stopping.
func (tr *taskRunner) runAction(ctx context.Context, id int64, st *pb.StartTaskResponse, out *taskLog, config map[string]*pb.ConfigValue) (pb.TaskState, map[string]string, string) {
	a := tr.a
	ended := func() (pb.TaskState, map[string]string, string) {
		var e *taskEnd
		if errors.As(context.Cause(ctx), &e) {
			return e.state, nil, e.why
		}
		return pb.TaskState_TASK_STATE_UNSPECIFIED, nil, ""
	}
	if !st.Parallel {
		select {
		case a.cfg.HookLock <- struct{}{}:
		case <-ctx.Done():
			return ended()
		}
		defer func() { <-a.cfg.HookLock }()
	}
	ac := newActionContext(a, id, st, out, config)
	h, err := tr.tools.srv.Begin(ac)
	if err != nil {
		return pb.TaskState_TASK_STATE_FAILED, nil, fmt.Sprintf("cannot run the action: %v", err)
	}
	defer tr.tools.srv.End(h.ID)
	env := map[string]string{
		hooks.EnvUnitName:       a.cfg.Unit,
		hooks.EnvService:        names.UnitService(a.cfg.Unit),
		hooks.EnvMachineID:      a.cfg.MachineID,
		hooks.EnvCharmDir:       a.charmDir(),
		hooks.EnvSession:        a.cfg.DataDir,
		hooks.EnvOperationID:    fmt.Sprint(id),
		hooks.EnvActionName:     st.Action,
		hooks.EnvJujuActionName: st.Action,
		hooks.EnvJujuActionUUID: actionUUID(id, a.cfg.Unit),
	}
	if st.Resumed {
		env[hooks.EnvActionResumed] = "1"
	}
	if a.cfg.PrincipalDir != "" {
		env[hooks.EnvPrincipalSession] = a.cfg.PrincipalDir
	}
	for k, v := range h.Env {
		env[k] = v
	}
	hooks.JujuEnv(env, "")
	res, err := hooks.Run(ctx, hooks.Spec{
		Unit: a.cfg.Unit, Hook: "action " + st.Action, Path: filepath.Join("actions", st.Action),
		CharmDir: a.charmDir(), ToolsDir: a.cfg.ToolsDir, Env: env,
		Timeout: time.Duration(st.TimeoutMs) * time.Millisecond, KillGrace: time.Duration(st.PauseGraceMs) * time.Millisecond,
		Logger: a.logger, Lines: func(_, line string) { out.line(line) },
		Started: func(pid int) { tr.record(id, func(r *taskRecord) { r.Pgid = pid }) },
	})
	results, failed := ac.outcome()
	switch {
	case res.Killed && !res.TimedOut:
		// Cancelled: paused, stopped, or the agent stopping.
		state, _, why := ended()
		return state, results, why
	case err != nil:
		return pb.TaskState_TASK_STATE_FAILED, results, err.Error()
	case res.Skipped:
		return pb.TaskState_TASK_STATE_FAILED, results, fmt.Sprintf("the charm has no action %s (actions/%s)", st.Action, st.Action)
	case failed != "":
		return pb.TaskState_TASK_STATE_FAILED, results, failed
	case !res.Succeeded():
		msg := res.String()
		if res.Signal == 0 && !res.TimedOut {
			msg = fmt.Sprintf("exit status %d", res.ExitCode)
		}
		return pb.TaskState_TASK_STATE_FAILED, results, msg
	}
	return pb.TaskState_TASK_STATE_DONE, results, ""
}
