package unitagent_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The test charm's actions: work (logs, sets results, echoes its
// environment's resumed mark), fail (action-fail), long (steps of 100 ms,
// each checkpointed; resumed, it goes on after its checkpoint).
var testActions = map[string]string{
	"actions.yaml": "work:\n  description: w\nfail:\n  description: f\nlong:\n  description: l\n",
	"actions/work": `#!/bin/sh
set -e
echo "working on $(action-get who)"
action-log "logged by action-log"
action-set "result.who=$(action-get who)" "uuid=$JUJU_ACTION_UUID" "op=$LIFELINE_OPERATION_ID"
`,
	"actions/fail": `#!/bin/sh
action-fail "it broke"
`,
	"actions/long": `#!/bin/sh
set -eu
from=0
if [ "${LIFELINE_ACTION_RESUMED:-}" = 1 ]; then from=$(checkpoint-get step); fi
stop=
trap 'stop=1' TERM
step=$from
while [ "$step" -lt 30 ] && [ -z "$stop" ]; do
	sleep 0.1 & wait $! || true
	[ -n "$stop" ] && break
	step=$((step + 1))
	checkpoint-set "step=$step"
done
[ -n "$stop" ] && exit 143
action-set "resumed-from=$from"
`,
}

// deployActions deploys one unit of a charm with the test actions and
// runs its agent until it is running.
func deployActions(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	dir := writeCharm(t, kvMeta)
	if err := os.MkdirAll(filepath.Join(dir, "actions"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range testActions {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	w.start("kv/0")
	w.waitState("kv/0", "running")
	return w
}

// run makes a running operation of action on kv/0.
func (w *world) run(action string, parallel bool) int64 {
	w.t.Helper()
	svc, err := w.env.State.Service(w.env.Ctx, "kv")
	if err != nil {
		w.t.Fatal(err)
	}
	op, err := w.env.State.CreateOperation(w.env.Ctx, state.NewOperation{
		Service: "kv", Action: action, Units: []string{"kv/0"}, ParamsJSON: []byte(`{"who":"alice"}`),
		Charm: svc.Charm, Requester: "admin", Safe: true, Parallel: parallel, Timeout: time.Minute, PauseGrace: 2 * time.Second,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return op.Id
}

// task returns kv/0's task of operation id.
func (w *world) task(id int64) *pb.Task {
	w.t.Helper()
	tk, err := w.env.State.Task(w.env.Ctx, id, "kv/0")
	if err != nil {
		w.t.Fatal(err)
	}
	return tk
}

// waitTask waits until kv/0's task of operation id is in state want.
func (w *world) waitTask(id int64, want string) *pb.Task {
	w.t.Helper()
	var tk *pb.Task
	w.waitFor("task of operation "+strconv.FormatInt(id, 10)+" "+want, func() bool {
		tk = w.task(id)
		return state.TaskStateName(tk.State) == want
	})
	return tk
}

// waitStep waits until the long action's checkpoint is at least step n.
func (w *world) waitStep(id int64, n int) {
	w.t.Helper()
	w.waitFor("checkpoint step "+strconv.Itoa(n), func() bool {
		cp, err := w.env.State.Checkpoint(w.env.Ctx, id, "kv/0")
		if err != nil {
			w.t.Fatal(err)
		}
		s, _ := strconv.Atoi(cp["step"])
		return s >= n
	})
}

func TestTaskRuns(t *testing.T) {
	w := deployActions(t)

	// Done, with its results and its log.
	id := w.run("work", false)
	tk := w.waitTask(id, "done")
	want := map[string]string{"result.who": "alice", "uuid": strconv.FormatInt(id, 10) + "-kv-0", "op": strconv.FormatInt(id, 10)}
	for k, v := range want {
		if tk.Results[k] != v {
			t.Errorf("results[%s] = %q, want %q (all: %v)", k, tk.Results[k], v, tk.Results)
		}
	}
	l, err := w.env.State.TaskLog(w.env.Ctx, id, "kv/0", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(l.Data); !strings.Contains(got, "working on alice\n") || !strings.Contains(got, "logged by action-log\n") {
		t.Errorf("task log = %q, want its output and its action-log line", got)
	}

	// action-fail: failed, with its message.
	id = w.run("fail", true)
	if tk := w.waitTask(id, "failed"); tk.Message != "it broke" {
		t.Errorf("failed task's message = %q, want action-fail's", tk.Message)
	}

	// Paused mid-way, then resumed: it goes on from its checkpoint.
	id = w.run("long", false)
	w.waitStep(id, 3)
	if _, err := w.env.State.PauseOperation(w.env.Ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	w.waitTask(id, "paused")
	if _, err := w.env.State.ResumeOperation(w.env.Ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	tk = w.waitTask(id, "done")
	if from, _ := strconv.Atoi(tk.Results["resumed-from"]); from < 3 || tk.Attempt != 2 {
		t.Errorf("resumed task = attempt %d, resumed from %q; want attempt 2 from step 3 or later", tk.Attempt, tk.Results["resumed-from"])
	}

	// Stopped: final.
	id = w.run("long", true)
	w.waitStep(id, 1)
	if _, err := w.env.State.StopOperation(w.env.Ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if tk := w.waitTask(id, "stopped"); tk.Message != "stopped by an operator" {
		t.Errorf("stopped task's message = %q", tk.Message)
	}
}

// An agent started again finds the task its previous run ran, ends what
// it left and reports it lost.
func TestTaskLostAtRestart(t *testing.T) {
	w := deployActions(t)
	id := w.run("long", true)
	w.waitStep(id, 1)
	w.stop("kv/0")
	if st := state.TaskStateName(w.task(id).State); st != "running" {
		t.Fatalf("task after the agent stopped = %s, want still running", st)
	}
	w.start("kv/0")
	if tk := w.waitTask(id, "lost"); tk.Message != "the agent restarted" {
		t.Errorf("lost task's message = %q", tk.Message)
	}
	// Resumed, the new agent runs it on from its checkpoint.
	if _, err := w.env.State.ResumeOperation(w.env.Ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if tk := w.waitTask(id, "done"); tk.Results["resumed-from"] == "0" {
		t.Errorf("resumed lost task started over: %v", tk.Results)
	}
}

// A dying unit stops its running task, and the pending ones.
func TestTaskStoppedWhenUnitDies(t *testing.T) {
	w := deployActions(t)
	id := w.run("long", true)
	w.waitStep(id, 1)
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("the task stopped", func() bool {
		tk, err := w.env.State.Task(w.env.Ctx, id, "kv/0")
		return err == nil && tk.State == pb.TaskState_TASK_STATE_STOPPED && tk.Message == "unit dying"
	})
}
