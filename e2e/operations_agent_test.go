package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// taskLostAfter is the controller's --task-lost-after in
// TestOperationsSurviveAgentAndControllerDeath.
const taskLostAfter = 5 * time.Second

// opDoc is ctl show-operation --format json, as these tests read it.
type opDoc struct {
	State string `json:"state"`
	Tasks []struct {
		Unit       string            `json:"unit"`
		State      string            `json:"state"`
		Attempt    int64             `json:"attempt"`
		Message    string            `json:"message"`
		Results    map[string]string `json:"results"`
		Checkpoint []string          `json:"checkpoint_keys"`
	} `json:"tasks"`
}

func showOp(t *testing.T, s *e2etest.Sandbox, id string) opDoc {
	t.Helper()
	var doc opDoc
	out := s.OK(t, "show-operation", id, "--format", "json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ctl show-operation %s --format json: %v\n%s", id, err, out)
	}
	return doc
}

// taskState is the state of unit's task in doc, "" when it has none.
func (doc opDoc) taskState(unit string) string {
	for _, task := range doc.Tasks {
		if task.Unit == unit {
			return task.State
		}
	}
	return ""
}

// waitOpEnd waits until operation id has ended (done, failed or
// stopped) and returns it.
func waitOpEnd(t *testing.T, s *e2etest.Sandbox, id string, timeout time.Duration) opDoc {
	t.Helper()
	var doc opDoc
	poll.Within(t, "operation "+id+" to end", timeout, func() (bool, string) {
		doc = showOp(t, s, id)
		return doc.State == "done" || doc.State == "failed" || doc.State == "stopped", fmt.Sprintf("%+v", doc)
	})
	return doc
}

// waitTask waits until unit's task of operation id is in state want.
func waitTask(t *testing.T, s *e2etest.Sandbox, id, unit, want string, timeout time.Duration) {
	t.Helper()
	poll.Within(t, fmt.Sprintf("task %s of operation %s %s", unit, id, want), timeout, func() (bool, string) {
		doc := showOp(t, s, id)
		return doc.taskState(unit) == want, fmt.Sprintf("%+v", doc)
	})
}

// waitCheckpoint waits until unit's task of operation id has run and
// stored a checkpoint (reindex stores one a step).
func waitCheckpoint(t *testing.T, s *e2etest.Sandbox, id, unit string) {
	t.Helper()
	poll.Within(t, "a checkpoint of "+unit+"'s task", 2*time.Minute, func() (bool, string) {
		out := s.OK(t, "show-task", id, unit, "--format", "json")
		return strings.Contains(out, `"step"`) && strings.Contains(out, `"running"`), out
	})
}

// runOp runs ctl run with args and returns the operation's id.
func runOp(t *testing.T, s *e2etest.Sandbox, args ...string) string {
	t.Helper()
	out := s.OK(t, append([]string{"run"}, args...)...)
	m := regexp.MustCompile(`^operation (\d+): `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ctl run %s said %q, want an operation", strings.Join(args, " "), out)
	}
	return m[1]
}

// runningWatch follows an operation's tasks in etcd from a revision on,
// and keeps the most that were running (running, pausing or stopping)
// at once at any revision.
type runningWatch struct {
	mu      sync.Mutex
	most    int
	changes int
	stop    func()
	done    chan struct{}
}

func watchRunning(t *testing.T, client *clientv3.Client, ns string, id int64, from int64) *runningWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWatch{stop: cancel, done: make(chan struct{})}
	states := map[string]pb.TaskState{}
	prefix := ns + state.TasksPrefix(id)
	go func() {
		defer close(w.done)
		for resp := range client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
			if resp.Err() != nil {
				t.Errorf("watching operation %d's tasks: %v", id, resp.Err())
				return
			}
			evs := resp.Events
			for i := 0; i < len(evs); {
				rev := evs[i].Kv.ModRevision
				for ; i < len(evs) && evs[i].Kv.ModRevision == rev; i++ {
					task := &pb.Task{}
					if err := proto.Unmarshal(evs[i].Kv.Value, task); err == nil && evs[i].Type == clientv3.EventTypePut {
						states[strings.TrimPrefix(string(evs[i].Kv.Key), prefix)] = task.State
					}
				}
				n := 0
				for _, st := range states {
					switch st {
					case pb.TaskState_TASK_STATE_RUNNING, pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_STOPPING:
						n++
					}
				}
				w.mu.Lock()
				w.most, w.changes = max(w.most, n), w.changes+1
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *runningWatch) result() (most, changes int) {
	w.stop()
	<-w.done
	return w.most, w.changes
}

// TestOperationsRunOnAgents runs the demo kv charm's actions on three
// units with real machine agents: a safe action runs at once and every
// task ends done with its results; the long, checkpointing reindex runs
// at most two at once (its max-parallel; checked from a watch of etcd at
// every revision), one unit's task is paused and resumed and goes on from
// its checkpoint, its logs are followed live; a stopped task stays
// stopped.
func TestOperationsRunOnAgents(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	// The default --task-lost-after: nothing is lost here, and a window of
	// seconds would lose tasks whose heartbeat a loaded machine delays.
	client, _ := startOnEtcd(t, s)
	const ns = rolloutNS
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "3")
	s.OK(t, "wait", "--timeout", "3m")

	// keys: safe, at once; ctl run --wait ends when every task has.
	out := s.OK(t, "run", "kv", "keys", "--wait", "--timeout", "2m")
	id := regexp.MustCompile(`operation (\d+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("ctl run kv keys --wait said %q", out)
	}
	doc := showOp(t, s, id[1])
	if doc.State != "done" || len(doc.Tasks) != 3 {
		t.Fatalf("keys on kv: %+v, want done with three tasks", doc)
	}
	for _, task := range doc.Tasks {
		if task.State != "done" || task.Results["count"] == "" {
			t.Errorf("keys on %s: %+v, want done with a count", task.Unit, task)
		}
	}

	// reindex: at most two at once; kv/0's paused, resumed, from its
	// checkpoint.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := client.Get(ctx, ns+"barrier")
	if err != nil {
		t.Fatal(err)
	}
	// 60 steps of 100 ms: 6 s at the least, so that kv/0 is paused after
	// its first checkpoint with most of its steps to go; few enough that a
	// loaded machine, where a checkpoint takes most of a second, runs the
	// three tasks in two rounds within the wait below.
	rid := runOp(t, s, "kv", "reindex", "steps=60", "step-ms=100")
	var n int64
	fmt.Sscan(rid, &n)
	watch := watchRunning(t, client, ns, n, before.Header.Revision+1)
	logs := startCtl(t, s, "logs", rid, "--follow")
	waitCheckpoint(t, s, rid, "kv/0")
	s.OK(t, "pause", rid, "kv/0")
	waitTask(t, s, rid, "kv/0", "paused", time.Minute)
	poll.Within(t, "ctl logs --follow to show steps while the operation runs", time.Minute, func() (bool, string) {
		return strings.Contains(logs.stdout.String(), ": step 10 of 60"), logs.String()
	})
	if showOp(t, s, rid).State != "running" {
		t.Errorf("operation %s ended while kv/0 was paused, want it running", rid)
	}
	s.OK(t, "resume", rid, "kv/0")
	if doc := waitOpEnd(t, s, rid, 3*time.Minute); doc.State != "done" {
		t.Fatalf("reindex on kv ended %+v, want done", doc)
	}
	for _, task := range showOp(t, s, rid).Tasks {
		resumed := task.Results["resumed-from"]
		switch {
		case task.Results["steps-done"] != "60":
			t.Errorf("reindex on %s: results %v, want steps-done 60", task.Unit, task.Results)
		case task.Unit == "kv/0" && (task.Attempt != 2 || resumed == "" || resumed == "0"):
			t.Errorf("reindex on kv/0: attempt %d, results %v; want attempt 2 resumed from its checkpoint", task.Attempt, task.Results)
		case task.Unit != "kv/0" && (task.Attempt != 1 || resumed != "0"):
			t.Errorf("reindex on %s: attempt %d, results %v; want one run from the start", task.Unit, task.Attempt, task.Results)
		}
	}
	most, changes := watch.result()
	t.Logf("reindex: at most %d tasks running at once over %d revisions of its tasks", most, changes)
	if most > 2 || most == 0 {
		t.Errorf("reindex had %d tasks running at once, want 1 or 2 (its max-parallel)", most)
	}
	logs.end(t, time.Minute)
	for _, unit := range []string{"kv/0", "kv/1", "kv/2"} {
		if !strings.Contains(logs.stdout.String(), unit+": step 60 of 60") && !strings.Contains(logs.stdout.String(), unit+": step 50 of 60") {
			t.Errorf("ctl logs --follow showed:\n%s\nwant %s's last steps", logs.stdout.String(), unit)
		}
	}

	// A stopped task stays stopped.
	sid := runOp(t, s, "kv/2", "reindex", "steps=2000", "step-ms=20")
	waitCheckpoint(t, s, sid, "kv/2")
	s.OK(t, "stop", sid)
	waitTask(t, s, sid, "kv/2", "stopped", time.Minute)
	r := s.Ctl("resume", sid, "kv/2")
	if r.Code != 1 || !strings.Contains(r.Stderr, "stop") {
		t.Errorf("%v\nwant resuming a stopped task refused, exit 1", r)
	}
	if doc := showOp(t, s, sid); doc.State != "stopped" {
		t.Errorf("operation %s: %+v, want stopped", sid, doc)
	}
}

// TestOperationsSurviveAgentAndControllerDeath: a machine agent killed
// with SIGKILL while its unit's task runs has the task lost within
// --task-lost-after and the detector's pass; started again, the agent
// runs the resumed task on from its checkpoint. A controller killed
// while a task runs loses nothing: started again, the task ends done,
// run once.
func TestOperationsSurviveAgentAndControllerDeath(t *testing.T) {
	// Not parallel: a 5 s lost-task window while its agent is killed and
	// started again wants a machine no busier than the test makes it.
	needCharms(t)
	s := newSandbox(t)
	c := s.StartController(t, "--task-lost-after", taskLostAfter.String())
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "1")
	s.OK(t, "wait", "--timeout", "3m")
	u, _ := s.Status(t).Unit("kv/0")
	pidFile := filepath.Join(c.MachinesDir(), u.Machine, "pid")
	agent := e2etest.ReadPID(t, pidFile)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agent))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")

	// A few checkpoints a second: each is a hook tool's process, a call
	// and a transaction, which a loaded machine makes slowly.
	id := runOp(t, s, "kv/0", "reindex", "steps=40", "step-ms=150")
	waitCheckpoint(t, s, id, "kv/0")
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitTask(t, s, id, "kv/0", "lost", taskLostAfter+time.Minute)
	t.Logf("kv/0's task lost %v after its machine agent was killed (--task-lost-after %v)", time.Since(killed).Round(100*time.Millisecond), taskLostAfter)

	// The machine agent, started again as its provider started it.
	restartAgent(t, s, u.Machine, args)
	s.OK(t, "resume", id, "kv/0")
	if doc := waitOpEnd(t, s, id, 5*time.Minute); doc.State != "done" {
		t.Fatalf("the resumed task ended %+v, want done", doc)
	}
	task := showOp(t, s, id).Tasks[0]
	if task.Attempt != 2 || task.Results["resumed-from"] == "" || task.Results["resumed-from"] == "0" || task.Results["steps-done"] != "40" {
		t.Errorf("the resumed task: attempt %d, results %v; want attempt 2, all steps, resumed from its checkpoint", task.Attempt, task.Results)
	}

	// The controller killed while a task runs. 60 steps: the task must
	// outlive the controller's restart (a loaded machine takes seconds),
	// so that this shows a running task kept, not a finished one reported.
	id = runOp(t, s, "kv/0", "reindex", "steps=60", "step-ms=150")
	waitCheckpoint(t, s, id, "kv/0")
	c.Kill(t)
	time.Sleep(2 * time.Second) // the task goes on without a controller
	// Started again with a lost-task window longer than an agent may take
	// to reach it on a loaded machine (reconnecting, then its heartbeat's
	// backoff): what this shows is that the restart loses nothing, not how
	// soon an agent comes back.
	c.Args[slices.Index(c.Args, "--task-lost-after")+1] = "30s"
	c.Start(t)
	if doc := waitOpEnd(t, s, id, 5*time.Minute); doc.State != "done" {
		t.Fatalf("the task across the controller's restart ended %+v, want done", doc)
	}
	task = showOp(t, s, id).Tasks[0]
	if task.Attempt != 1 || task.Results["resumed-from"] != "0" || task.Results["steps-done"] != "60" {
		t.Errorf("the task across the controller's restart: attempt %d, results %v; want one run of every step", task.Attempt, task.Results)
	}
}
