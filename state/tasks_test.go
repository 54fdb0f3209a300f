package state_test

import (
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// machineOf returns the unit's machine.
func (f *opsFixture) machineOf(t *testing.T, unit string) string {
	t.Helper()
	u, err := f.st.Unit(f.ctx, unit)
	must(t, "Unit", err)
	return u.MachineId
}

func (f *opsFixture) start(t *testing.T, id int64, unit string) *pb.Task {
	t.Helper()
	tk, err := f.st.StartTask(f.ctx, id, unit, f.machineOf(t, unit))
	must(t, "StartTask "+unit, err)
	return tk
}

func (f *opsFixture) finish(t *testing.T, id int64, unit string, attempt int64, end pb.TaskState) {
	t.Helper()
	_, err := f.st.FinishTask(f.ctx, state.TaskReport{Operation: id, Unit: unit, Attempt: attempt, Outcome: end, Message: "exit"})
	must(t, "FinishTask "+unit, err)
}

func wantStates(t *testing.T, f *opsFixture, id int64, want map[string]string, op string) {
	t.Helper()
	got := f.taskStates(t, id)
	for u, w := range want {
		if got[u] != w {
			t.Errorf("task %s = %s, want %s (all: %v)", u, got[u], w, got)
		}
	}
	if op != "" {
		if got := f.opState(t, id); got != op {
			t.Errorf("operation %d is %s, want %s", id, got, op)
		}
	}
}

func TestTaskStartAndFinish(t *testing.T) {
	f := newOpsFixture(t, 3)
	op := f.create(t, f.op(true, 0))
	_, err := f.st.StartTask(f.ctx, op.Id, "kv/0", f.machineOf(t, "kv/1"))
	wantErr(t, "StartTask(other machine)", err, state.ErrRefused, "T2", "is not on machine")
	tk := f.start(t, op.Id, "kv/0")
	if tk.Attempt != 1 || tk.State != pb.TaskState_TASK_STATE_RUNNING {
		t.Errorf("started task = %v", tk)
	}
	_, err = f.st.StartTask(f.ctx, op.Id, "kv/0", tk.Machine)
	wantErr(t, "StartTask(again)", err, state.ErrRefused, "T1", "is running: only a pending task can be started")
	_, err = f.st.FinishTask(f.ctx, state.TaskReport{Operation: op.Id, Unit: "kv/0", Attempt: 2, Outcome: pb.TaskState_TASK_STATE_DONE})
	wantErr(t, "FinishTask(stale)", err, state.ErrRefused, "T2", "the report of attempt 2 is stale")
	_, err = f.st.FinishTask(f.ctx, state.TaskReport{Operation: op.Id, Unit: "kv/0", Attempt: 1, Outcome: pb.TaskState_TASK_STATE_PAUSED})
	wantErr(t, "FinishTask(paused)", err, state.ErrRefused, "T1", "cannot end paused")
	_, err = f.st.FinishTask(f.ctx, state.TaskReport{Operation: op.Id, Unit: "kv/0", Attempt: 1, Outcome: pb.TaskState_TASK_STATE_DONE,
		Results: map[string]string{"x": strings.Repeat("a", state.MaxResultsBytes)}})
	wantErr(t, "FinishTask(large)", err, state.ErrInvalid, "", "at most 64 KiB")
	f.finish(t, op.Id, "kv/0", 1, pb.TaskState_TASK_STATE_DONE)
	wantStates(t, f, op.Id, map[string]string{"kv/0": "done", "kv/1": "pending"}, "running")
	for _, u := range []string{"kv/1", "kv/2"} {
		f.start(t, op.Id, u)
	}
	f.finish(t, op.Id, "kv/1", 1, pb.TaskState_TASK_STATE_FAILED)
	f.finish(t, op.Id, "kv/2", 1, pb.TaskState_TASK_STATE_DONE)
	wantStates(t, f, op.Id, map[string]string{"kv/1": "failed"}, "failed")

	// A failed task resumed runs its operation again, at its next attempt.
	res, err := f.st.ResumeOperation(f.ctx, op.Id, nil)
	must(t, "ResumeOperation", err)
	if len(res.Changed) != 1 || res.Changed[0] != "kv/1" {
		t.Errorf("ResumeOperation changed %v, want kv/1", res.Changed)
	}
	wantStates(t, f, op.Id, map[string]string{"kv/1": "pending"}, "running")
	if tk := f.start(t, op.Id, "kv/1"); tk.Attempt != 2 || tk.Resumed != 1 {
		t.Errorf("restarted task = %v, want attempt 2, resumed once", tk)
	}
	f.finish(t, op.Id, "kv/1", 2, pb.TaskState_TASK_STATE_DONE)
	wantStates(t, f, op.Id, nil, "done")
	counts, err := f.st.TaskCounts(f.ctx, op.Id)
	must(t, "TaskCounts", err)
	if len(counts) != 1 || counts[pb.TaskState_TASK_STATE_DONE] != 3 {
		t.Errorf("TaskCounts = %v, want 3 done", counts)
	}
}

func TestTaskVerbs(t *testing.T) {
	f := newOpsFixture(t, 3)
	op := f.create(t, f.op(true, 0))
	id := op.Id
	f.start(t, id, "kv/0")
	f.start(t, id, "kv/1")
	for _, step := range []struct {
		do      func() (*state.VerbResult, error)
		changed string
		rule    string
		want    map[string]string
	}{
		{func() (*state.VerbResult, error) { return f.st.PauseOperation(f.ctx, id, []string{"kv/0", "kv/2"}) }, "kv/0 kv/2", "",
			map[string]string{"kv/0": "pausing", "kv/1": "running", "kv/2": "paused"}},
		{func() (*state.VerbResult, error) { return f.st.ResumeOperation(f.ctx, id, []string{"kv/0", "kv/2"}) }, "kv/2", "",
			map[string]string{"kv/0": "pausing", "kv/2": "pending"}},
		{func() (*state.VerbResult, error) { return f.st.StopOperation(f.ctx, id, []string{"kv/1"}) }, "kv/1", "",
			map[string]string{"kv/1": "stopping"}},
		{func() (*state.VerbResult, error) { return f.st.PauseOperation(f.ctx, id, []string{"kv/1"}) }, "", "T1",
			map[string]string{"kv/1": "stopping"}},
	} {
		res, err := step.do()
		must(t, "verb", err)
		if got := strings.Join(res.Changed, " "); got != step.changed {
			t.Errorf("changed %q, want %q", got, step.changed)
		}
		if step.rule != "" && (len(res.Refused) != 1 || state.RuleOf(res.Refused[0].Err) != step.rule) {
			t.Errorf("refused %v, want one by %s", res.Refused, step.rule)
		}
		wantStates(t, f, id, step.want, "running")
	}
	f.finish(t, id, "kv/0", 1, pb.TaskState_TASK_STATE_PAUSED)
	f.finish(t, id, "kv/1", 1, pb.TaskState_TASK_STATE_DONE) // done wins over the stop
	wantStates(t, f, id, map[string]string{"kv/0": "paused", "kv/1": "done"}, "running")
	res, err := f.st.StopOperation(f.ctx, id, nil)
	must(t, "StopOperation", err)
	if got := strings.Join(res.Changed, " "); got != "kv/0 kv/2" {
		t.Errorf("StopOperation changed %q, want kv/0 kv/2", got)
	}
	wantStates(t, f, id, map[string]string{"kv/0": "stopped", "kv/2": "stopped"}, "stopped")
	res, err = f.st.ResumeOperation(f.ctx, id, []string{"kv/0"})
	must(t, "ResumeOperation", err)
	if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Err.Error(), "task kv/0 of operation 1 is stopped: stopping is final") {
		t.Errorf("ResumeOperation(stopped) = %+v, want refused: stopping is final", res)
	}
}

func TestMaxParallelAdmitsInOrder(t *testing.T) {
	f := newOpsFixture(t, 4)
	op := f.create(t, f.op(true, 2))
	id := op.Id
	wantStates(t, f, id, map[string]string{"kv/0": "pending", "kv/1": "pending", "kv/2": "queued", "kv/3": "queued"}, "running")
	_, err := f.st.StartTask(f.ctx, id, "kv/2", f.machineOf(t, "kv/2"))
	wantErr(t, "StartTask(queued)", err, state.ErrRefused, "T1", "is queued")
	f.start(t, id, "kv/0")
	f.finish(t, id, "kv/0", 1, pb.TaskState_TASK_STATE_DONE)
	wantStates(t, f, id, map[string]string{"kv/1": "pending", "kv/2": "pending", "kv/3": "queued"}, "running")
	// A pending task paused gives its slot to the next.
	_, err = f.st.PauseOperation(f.ctx, id, []string{"kv/1"})
	must(t, "PauseOperation", err)
	wantStates(t, f, id, map[string]string{"kv/1": "paused", "kv/2": "pending", "kv/3": "pending"}, "running")
	// Resumed, it waits for a slot.
	_, err = f.st.ResumeOperation(f.ctx, id, []string{"kv/1"})
	must(t, "ResumeOperation", err)
	wantStates(t, f, id, map[string]string{"kv/1": "queued"}, "running")
	// Pausing all takes the queued one out first: no slot goes to it.
	res, err := f.st.PauseOperation(f.ctx, id, nil)
	must(t, "PauseOperation(all)", err)
	if len(res.Changed) != 3 {
		t.Errorf("PauseOperation(all) changed %v, want 3", res.Changed)
	}
	wantStates(t, f, id, map[string]string{"kv/1": "paused", "kv/2": "paused", "kv/3": "paused"}, "running")
	_, err = f.st.ResumeOperation(f.ctx, id, nil)
	must(t, "ResumeOperation(all)", err)
	wantStates(t, f, id, map[string]string{"kv/1": "pending", "kv/2": "pending", "kv/3": "queued"}, "running")
	for _, u := range []string{"kv/1", "kv/2"} {
		f.start(t, id, u)
		f.finish(t, id, u, 1, pb.TaskState_TASK_STATE_DONE)
	}
	f.start(t, id, "kv/3")
	f.finish(t, id, "kv/3", 1, pb.TaskState_TASK_STATE_DONE)
	wantStates(t, f, id, nil, "done")
}

func TestLostTasksAndHeartbeats(t *testing.T) {
	f := newOpsFixture(t, 2)
	op := f.create(t, f.op(true, 1))
	id := op.Id
	tk := f.start(t, id, "kv/0")
	lostAfter := time.Minute
	led := f.clock.Now()
	f.clock.Advance(30 * time.Second)
	must(t, "Heartbeat", f.st.Heartbeat(f.ctx, tk.Machine))
	f.clock.Advance(45 * time.Second)
	n, err := f.st.DetectLostTasks(f.ctx, lostAfter, f.clock.Now())
	must(t, "DetectLostTasks", err)
	if n != 0 {
		t.Errorf("a new leader marked %d tasks lost, want none before it has led for %s", n, lostAfter)
	}
	n, err = f.st.DetectLostTasks(f.ctx, lostAfter, led)
	must(t, "DetectLostTasks", err)
	if n != 0 {
		t.Errorf("DetectLostTasks marked %d lost 45s after a heartbeat, want none", n)
	}
	f.clock.Advance(30 * time.Second)
	n, err = f.st.DetectLostTasks(f.ctx, lostAfter, led)
	must(t, "DetectLostTasks", err)
	if n != 1 {
		t.Errorf("DetectLostTasks marked %d lost, want 1", n)
	}
	task, err := f.st.Task(f.ctx, id, "kv/0")
	must(t, "Task", err)
	if task.State != pb.TaskState_TASK_STATE_LOST || !strings.Contains(task.Message, "no heartbeat from machine "+tk.Machine+" for 1m0s") {
		t.Errorf("task = %v, want lost for want of heartbeats", task)
	}
	// Its slot went to the next task; resumed, it waits for it.
	wantStates(t, f, id, map[string]string{"kv/0": "lost", "kv/1": "pending"}, "running")
	sum, err := f.st.OperationsSummary(f.ctx)
	must(t, "OperationsSummary", err)
	if sum.Running != 1 || sum.LostTasks != 1 {
		t.Errorf("OperationsSummary = %+v, want 1 running, 1 lost task", sum)
	}
	_, err = f.st.ResumeOperation(f.ctx, id, []string{"kv/0"})
	must(t, "ResumeOperation", err)
	wantStates(t, f, id, map[string]string{"kv/0": "queued"}, "running")
	// A silent machine running nothing loses its heartbeat record.
	n, err = f.st.DetectLostTasks(f.ctx, lostAfter, led)
	must(t, "DetectLostTasks", err)
	if n != 0 {
		t.Errorf("DetectLostTasks marked %d, want 0", n)
	}
	if _, err := f.st.ReportTaskLost(f.ctx, id, "kv/0", 1, "x"); state.RuleOf(err) != "T1" {
		t.Errorf("ReportTaskLost(queued) = %v, want refused by T1", err)
	}
}

func TestCheckpoints(t *testing.T) {
	f := newOpsFixture(t, 1)
	op := f.create(t, f.op(true, 0))
	err := f.st.SetCheckpoint(f.ctx, op.Id, "kv/0", 0, map[string]string{"a": "1"})
	wantErr(t, "SetCheckpoint(pending)", err, state.ErrRefused, "T1", "is pending")
	tk := f.start(t, op.Id, "kv/0")
	must(t, "SetCheckpoint", f.st.SetCheckpoint(f.ctx, op.Id, "kv/0", tk.Attempt, map[string]string{"a": "1", "b": "2"}))
	must(t, "SetCheckpoint", f.st.SetCheckpoint(f.ctx, op.Id, "kv/0", tk.Attempt, map[string]string{"b": "3"}))
	err = f.st.SetCheckpoint(f.ctx, op.Id, "kv/0", tk.Attempt+1, map[string]string{"a": "x"})
	wantErr(t, "SetCheckpoint(stale)", err, state.ErrRefused, "T2", "stale")
	err = f.st.SetCheckpoint(f.ctx, op.Id, "kv/0", tk.Attempt, map[string]string{"big": strings.Repeat("x", state.MaxCheckpointBytes)})
	wantErr(t, "SetCheckpoint(large)", err, state.ErrInvalid, "", "at most 64 KiB")
	cp, err := f.st.Checkpoint(f.ctx, op.Id, "kv/0")
	must(t, "Checkpoint", err)
	if len(cp) != 2 || cp["a"] != "1" || cp["b"] != "3" {
		t.Errorf("Checkpoint = %v, want a=1 b=3", cp)
	}
	// It survives a pause and a resume, for the next attempt.
	_, err = f.st.PauseOperation(f.ctx, op.Id, nil)
	must(t, "PauseOperation", err)
	f.finish(t, op.Id, "kv/0", 1, pb.TaskState_TASK_STATE_PAUSED)
	_, err = f.st.ResumeOperation(f.ctx, op.Id, nil)
	must(t, "ResumeOperation", err)
	f.start(t, op.Id, "kv/0")
	if cp, _ := f.st.Checkpoint(f.ctx, op.Id, "kv/0"); cp["b"] != "3" {
		t.Errorf("Checkpoint after resume = %v", cp)
	}
	f.finish(t, op.Id, "kv/0", 2, pb.TaskState_TASK_STATE_DONE)
}

func TestRemovedUnitsTasksStop(t *testing.T) {
	f := newOpsFixture(t, 2)
	op := f.create(t, f.op(true, 1))
	f.start(t, op.Id, "kv/0")
	for _, u := range []string{"kv/0", "kv/1"} {
		must(t, "DestroyUnit", f.st.DestroyUnit(f.ctx, u, state.DestroyOptions{}))
		must(t, "EnsureUnitDead", f.st.EnsureUnitDead(f.ctx, u))
		must(t, "RemoveUnit", f.st.RemoveUnit(f.ctx, u))
	}
	checkInvariants(t, f.st)
	_, err := state.NewCleaner(f.st, time.Second).Pass(f.ctx)
	must(t, "Cleaner.Pass", err)
	wantStates(t, f, op.Id, map[string]string{"kv/0": "stopped", "kv/1": "stopped"}, "stopped")
	task, err := f.st.Task(f.ctx, op.Id, "kv/1")
	must(t, "Task", err)
	if task.Message != "unit removed" {
		t.Errorf("task message %q, want unit removed", task.Message)
	}
	// An operation made against a unit that is going stops its task.
	f2 := newOpsFixture(t, 1)
	must(t, "DestroyUnit", f2.st.DestroyUnit(f2.ctx, "kv/0", state.DestroyOptions{}))
	op2 := f2.create(t, f2.op(true, 0))
	wantStates(t, f2, op2.Id, map[string]string{"kv/0": "stopped"}, "stopped")
}

func TestPruneOperations(t *testing.T) {
	f := newOpsFixture(t, 1)
	done := f.create(t, f.op(true, 0))
	f.start(t, done.Id, "kv/0")
	must(t, "SetCheckpoint", f.st.SetCheckpoint(f.ctx, done.Id, "kv/0", 1, map[string]string{"a": "1"}))
	f.finish(t, done.Id, "kv/0", 1, pb.TaskState_TASK_STATE_FAILED)
	waiting := f.create(t, f.op(false, 0))
	running := f.create(t, f.op(true, 0))
	f.clock.Advance(25 * time.Hour)
	expired, pruned, err := f.st.PruneOperations(f.ctx, 24*time.Hour, 10)
	must(t, "PruneOperations", err)
	if expired != 1 || pruned != 1 {
		t.Errorf("PruneOperations = %d expired, %d pruned; want 1, 1", expired, pruned)
	}
	if _, err := f.st.Operation(f.ctx, done.Id); err == nil {
		t.Errorf("operation %d outlived its retention", done.Id)
	}
	if got := f.opState(t, waiting.Id); got != "expired" {
		t.Errorf("waiting operation is %s, want expired", got)
	}
	if got := f.opState(t, running.Id); got != "running" {
		t.Errorf("running operation is %s, want running", got)
	}
	snap, err := f.st.Snapshot(f.ctx)
	must(t, "Snapshot", err)
	for k := range snap.Values {
		if strings.Contains(k, "/00000000000000000001") && !strings.HasPrefix(k, "revisions/") {
			t.Errorf("key %s of the pruned operation is left", k)
		}
	}
}

// TestVerbsOnManyTasks: a verb on every task of an operation without
// max_parallel runs its transactions several at once; every task moves
// once, the result lists each unit once, sorted, and the operation ends
// when the last task stops.
func TestVerbsOnManyTasks(t *testing.T) {
	f := newOpsFixture(t, 100)
	op := f.create(t, f.op(true, 0))
	id := op.Id
	for _, u := range f.units[:30] {
		f.start(t, id, u)
	}
	check := func(what string, res *state.VerbResult, err error, changed int) {
		t.Helper()
		must(t, what, err)
		if len(res.Changed) != changed || len(res.Refused) != 0 {
			t.Fatalf("%s changed %d and refused %v, want %d and none", what, len(res.Changed), res.Refused, changed)
		}
		for i := 1; i < len(res.Changed); i++ {
			if res.Changed[i-1] >= res.Changed[i] {
				t.Fatalf("%s's changed units are not sorted or repeat one: %v", what, res.Changed)
			}
		}
	}
	res, err := f.st.PauseOperation(f.ctx, id, nil)
	check("PauseOperation", res, err, 100)
	want := map[string]string{}
	for i, u := range f.units {
		want[u] = "paused"
		if i < 30 {
			want[u] = "pausing"
		}
	}
	wantStates(t, f, id, want, "running")
	for _, u := range f.units[:30] {
		f.finish(t, id, u, 1, pb.TaskState_TASK_STATE_PAUSED)
	}
	res, err = f.st.ResumeOperation(f.ctx, id, nil)
	check("ResumeOperation", res, err, 100)
	res, err = f.st.StopOperation(f.ctx, id, nil)
	check("StopOperation", res, err, 100)
	if got := f.opState(t, id); got != "stopped" {
		t.Errorf("operation %d is %s after every task stopped, want stopped", id, got)
	}
}
