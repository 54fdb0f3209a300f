package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// opsRandomSteps is how many steps TestOperationsRandomized takes, across
// its goroutines.
const opsRandomSteps = 1500

// TestOperationsRandomized runs operators' verbs on operations (create,
// approve, execute, pause, resume, stop), agents' reports on tasks (start,
// finish, lost, checkpoints, heartbeats), the leader's detector, pruner
// and materializer, and units destroyed and removed with the cleaner
// behind them, from several goroutines at once. A monitor checks the
// invariants at every committed revision, and a watch checks at every
// revision that no operation has more tasks holding a slot, or running,
// than its max_parallel.
func TestOperationsRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	addUser(t, ctx, st, "alice", operator, time.Now())
	addUser(t, ctx, st, "bob", operator, time.Now())
	addService(t, ctx, st, "kv", kvEndpoints)
	ms, err := st.AddMachines(ctx, 3)
	must(t, "AddMachines", err)
	for _, m := range ms {
		addUnits(t, ctx, st, "kv", 8, state.Placement{Machine: m.Id})
	}
	mon := statetest.Start(t, st)
	bound := watchSlots(ctx, st)

	var steps atomic.Int64
	counts := make([]map[string]int, 4)
	var wg sync.WaitGroup
	for w := range counts {
		counts[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for steps.Add(1) <= opsRandomSteps {
				what, err := opsStep(ctx, st, rng)
				switch {
				case err == nil:
					counts[w][what]++
				case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrFull),
					errors.Is(err, state.ErrAborted):
					counts[w][what+" refused"]++
				default:
					t.Errorf("%s: %v", what, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	_, err = state.NewCleaner(st, time.Second).Pass(ctx)
	must(t, "Cleaner.Pass", err)
	mon.Stop(t)
	violations, revisions := bound.stop()
	for i, v := range violations {
		if i == 10 {
			t.Errorf("... and %d more", len(violations)-10)
			break
		}
		t.Error(v)
	}
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("seed %d; steps: %v; max_parallel checked at %d revisions; %+v", seed, total, revisions, st.Stats())
	if total["start"] == 0 || total["finish"] == 0 || total["pause"] == 0 || total["resume"] == 0 {
		t.Errorf("steps %v: want tasks started, finished, paused and resumed", total)
	}
}

// opsStep takes one random step and says which.
func opsStep(ctx context.Context, st *state.State, rng *rand.Rand) (string, error) {
	unit := func() string { return fmt.Sprintf("kv/%d", rng.IntN(13)) }
	// someUnits are a few of the units there, now and then one that is
	// not.
	someUnits := func() []string {
		all, err := st.Units(ctx, "kv")
		if err != nil || len(all) == 0 || rng.IntN(10) == 0 {
			return []string{unit()}
		}
		var us []string
		n := 1 + rng.IntN(5)
		if rng.IntN(5) == 0 {
			// Enough for the tasks to be made in several parts at once.
			n = 9 + rng.IntN(24)
		}
		for range n {
			us = append(us, all[rng.IntN(len(all))].Name)
		}
		return us
	}
	opID := func() int64 {
		ops, err := st.Operations(ctx, state.OperationsFilter{Limit: 1000})
		if err != nil || len(ops) == 0 {
			return 1
		}
		return ops[len(ops)-1-rng.IntN(min(len(ops), 4))].Id
	}
	// task picks an open task of a unit's, as its agent would, among
	// those whose references say one of values.
	task := func(values ...string) *pb.Task {
		all, err := st.Units(ctx, "kv")
		if err != nil || len(all) == 0 {
			return nil
		}
		u := all[rng.IntN(len(all))].Name
		refs, err := st.UnitTasks(ctx, u)
		if err != nil {
			return nil
		}
		var ids []int64
		for id, v := range refs {
			if slices.Contains(values, v) {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		slices.Sort(ids)
		tk, err := st.Task(ctx, ids[rng.IntN(len(ids))], u)
		if err != nil {
			return nil
		}
		return tk
	}
	switch n := rng.IntN(1000); {
	case n < 100:
		units := someUnits()
		if rng.IntN(3) == 0 {
			all, err := st.Units(ctx, "kv")
			if err != nil {
				return "create", err
			}
			units = nil
			for _, u := range all {
				units = append(units, u.Name)
			}
		}
		_, err := st.CreateOperation(ctx, state.NewOperation{Service: "kv", Action: "backup", Units: units,
			Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Requester: "alice", Safe: rng.IntN(3) > 0, MaxParallel: rng.IntN(4)})
		return "create", err
	case n < 120:
		id := opID()
		op, err := st.Operation(ctx, id)
		if err != nil {
			return "approve", err
		}
		if _, err := st.ApproveOperation(ctx, id, []string{"admin", "bob"}[rng.IntN(2)], op.Digest); err != nil {
			return "approve", err
		}
		_, err = st.ExecuteOperation(ctx, id, "alice", false)
		return "execute", err
	case n < 350:
		tk := task("pending")
		if tk == nil {
			return "no task to start", nil
		}
		u, err := st.Unit(ctx, tk.Unit)
		if err != nil {
			return "start", err
		}
		_, err = st.StartTask(ctx, tk.Operation, tk.Unit, u.MachineId)
		return "start", err
	case n < 580:
		tk := task("running", "pausing", "stopping")
		if tk == nil {
			return "no task to finish", nil
		}
		switch rng.IntN(8) {
		case 0, 1:
			return "checkpoint", st.SetCheckpoint(ctx, tk.Operation, tk.Unit, tk.Attempt, map[string]string{"at": fmt.Sprint(rng.IntN(100))})
		case 2:
			// Chunks of up to 16 KiB, so that some tasks' logs are trimmed.
			line := strings.Repeat("x", 1+rng.IntN(state.MaxTaskLogChunkBytes))
			_, err := st.AppendTaskLog(ctx, tk.Operation, tk.Unit, tk.Attempt, []byte(line))
			return "log", err
		}
		ends := []pb.TaskState{pb.TaskState_TASK_STATE_DONE, pb.TaskState_TASK_STATE_FAILED, pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_STOPPED}
		_, err := st.FinishTask(ctx, state.TaskReport{Operation: tk.Operation, Unit: tk.Unit, Attempt: tk.Attempt, Outcome: ends[rng.IntN(len(ends))]})
		return "finish", err
	case n < 610:
		tk := task("running")
		if tk == nil {
			return "lost", nil
		}
		_, err := st.ReportTaskLost(ctx, tk.Operation, tk.Unit, tk.Attempt, "the agent restarted")
		return "lost", err
	case n < 700:
		var units []string
		if rng.IntN(2) == 0 {
			units = someUnits()
		}
		_, err := st.PauseOperation(ctx, opID(), units)
		return "pause", err
	case n < 800:
		var units []string
		if rng.IntN(2) == 0 {
			units = someUnits()
		}
		_, err := st.ResumeOperation(ctx, opID(), units)
		return "resume", err
	case n < 840:
		_, err := st.StopOperation(ctx, opID(), someUnits())
		return "stop", err
	case n < 880, n >= 960:
		return "heartbeat", st.Heartbeat(ctx, fmt.Sprint(rng.IntN(3)))
	case n < 900:
		_, err := st.DetectLostTasks(ctx, 20*time.Millisecond, time.Time{})
		return "detect", err
	case n < 920:
		_, _, err := st.PruneOperations(ctx, 0, 2)
		return "prune", err
	case n < 930:
		return "materialize", st.MaterializePending(ctx)
	case n < 934:
		return "destroy unit", st.DestroyUnit(ctx, unit(), state.DestroyOptions{})
	case n < 938:
		u := unit()
		if err := st.EnsureUnitDead(ctx, u); err != nil {
			return "remove unit", err
		}
		return "remove unit", st.RemoveUnit(ctx, u)
	default: // 938 to 960
		_, err := state.NewCleaner(st, time.Second).Pass(ctx)
		return "clean", err
	}
}

// slotWatch checks, at every revision a watch of the whole namespace
// delivers, that no operation has more slot references or more tasks on
// their machines than its max_parallel.
type slotWatch struct {
	cancel     context.CancelFunc
	done       chan struct{}
	violations []string
	revisions  int
}

func watchSlots(ctx context.Context, st *state.State) *slotWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &slotWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		values := map[string][]byte{}
		for b := range st.Watch(ctx, "", 0) {
			if b.Reset {
				clear(values)
			}
			for _, e := range b.Events {
				if e.Type == state.EventDelete {
					delete(values, e.Key)
				} else {
					values[e.Key] = e.Value
				}
			}
			if len(b.Events) > 0 {
				w.revisions++
				w.check(b.Revision, values)
			}
		}
	}()
	return w
}

func (w *slotWatch) check(rev int64, values map[string][]byte) {
	slots, running := map[string]int{}, map[string]int{}
	for k, v := range values {
		switch {
		case strings.HasPrefix(k, "refs/op-slots/"):
			op, _, _ := strings.Cut(strings.TrimPrefix(k, "refs/op-slots/"), "/")
			slots[op]++
		case strings.HasPrefix(k, "tasks/"):
			tk := &pb.Task{}
			if proto.Unmarshal(v, tk) == nil && (tk.State == pb.TaskState_TASK_STATE_RUNNING ||
				tk.State == pb.TaskState_TASK_STATE_PAUSING || tk.State == pb.TaskState_TASK_STATE_STOPPING) {
				op, _, _ := strings.Cut(strings.TrimPrefix(k, "tasks/"), "/")
				running[op]++
			}
		}
	}
	for k, v := range values {
		if !strings.HasPrefix(k, state.OperationsPrefix) {
			continue
		}
		op := &pb.Operation{}
		if proto.Unmarshal(v, op) != nil || op.MaxParallel == 0 {
			continue
		}
		id := strings.TrimPrefix(k, state.OperationsPrefix)
		if slots[id] > int(op.MaxParallel) || running[id] > int(op.MaxParallel) {
			w.violations = append(w.violations, fmt.Sprintf("revision %d: operation %d has %d slots taken and %d tasks running, max-parallel %d",
				rev, op.Id, slots[id], running[id], op.MaxParallel))
		}
	}
}

// stop ends the watch and returns what it found.
func (w *slotWatch) stop() ([]string, int) {
	w.cancel()
	<-w.done
	return w.violations, w.revisions
}
