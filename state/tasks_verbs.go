package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A task's moves (T1), each a function here:
//
//	PENDING (admitted)          StartTask        RUNNING (attempt+1)
//	RUNNING/PAUSING/STOPPING    FinishTask       DONE or FAILED; PAUSED from PAUSING, STOPPED from STOPPING or RUNNING
//	RUNNING                     ReportTaskLost   LOST (PAUSING → PAUSED, STOPPING → STOPPED)
//	RUNNING                     pause            PAUSING
//	PENDING                     pause            PAUSED
//	RUNNING/PAUSING             stop             STOPPING
//	PENDING/PAUSED/LOST         stop             STOPPED
//	PAUSED/FAILED/LOST          resume           PENDING (admitted or queued); a FAILED operation runs again
//
// A report of the task's agent (finish, lost, checkpoint) names the
// attempt it is about, and one of an earlier attempt is refused (T2).

// taskName is how a refusal names a task.
func taskName(id int64, unit string) string {
	return fmt.Sprintf("task %s of operation %d", unit, id)
}

// taskRead is a task as an attempt read it, with its open reference
// (refs/op-open/<op>/<unit>; nil once closed).
type taskRead struct {
	unit string
	t    *record[*pb.Task]
	ref  *mvccpb.KeyValue
}

// admitted says whether a pending task holds a slot (or needs none).
func (tr *taskRead) admitted() bool {
	return tr.ref != nil && string(tr.ref.Value) == taskAdmitted
}

// refuseMove is T1's refusal of verb on a task in state st.
func refuseMove(id int64, unit string, st pb.TaskState, verb, want string) error {
	if st == pb.TaskState_TASK_STATE_STOPPED && verb == "resumed" {
		return refused("T1", "%s is stopped: stopping is final", taskName(id, unit))
	}
	return refused("T1", "%s is %s: only %s task can be %s", taskName(id, unit), TaskStateName(st), want, verb)
}

// StartTask starts the named unit's admitted pending task of operation
// id, on machine, the unit's (T2): RUNNING, its attempt counted, the
// machine's heartbeat written now (the machine's agent is calling). The
// unit must be alive.
func (s *State) StartTask(ctx context.Context, id int64, unit, machine string) (*pb.Task, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	if err := checkMachineID(machine); err != nil {
		return nil, err
	}
	var out *pb.Task
	err := s.apply(ctx, "start "+taskName(id, unit), func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(TaskKey(id, unit)), get(opOpenRef(id, unit)), get(UnitKey(unit)))
		if err != nil {
			return nil, err
		}
		tr, err := taskFrom(r, 0, id, unit)
		if err != nil {
			return nil, err
		}
		t := tr.t.v
		switch {
		case t.State != pb.TaskState_TASK_STATE_PENDING:
			return nil, refuseMove(id, unit, t.State, "started", "a pending")
		case !tr.admitted():
			return nil, refused("T1", "%s is queued: it starts when a slot of the operation's max-parallel frees", taskName(id, unit))
		}
		u, err := decode[pb.Unit](r.one(2))
		if err != nil {
			return nil, err
		}
		switch {
		case u == nil:
			return nil, refused("T1", "%s: unit %s is gone", taskName(id, unit), unit)
		case u.v.Life != pb.Life_LIFE_ALIVE:
			return nil, refused("T1", "%s: unit %s is %s: its tasks do not start", taskName(id, unit), unit, lifeName(u.v.Life))
		case u.v.MachineId != machine:
			return nil, refused("T2", "%s: unit %s is not on machine %s", taskName(id, unit), unit, machine)
		}
		now := s.now().UnixNano()
		next := protoClone(t)
		next.State, next.Attempt, next.Machine = pb.TaskState_TASK_STATE_RUNNING, t.Attempt+1, machine
		next.StartedUnixNano, next.ChangedUnixNano, next.FinishedUnixNano = now, now, 0
		next.Message, next.Results = "", nil
		c := &change{}
		c.ifMod(tr.t.key, tr.t.mod)
		c.ifMod(u.key, u.mod)
		c.put(tr.t.key, next)
		c.putRaw(opOpenRef(id, unit), taskRunning)
		c.putRaw(unitTaskRef(unit, id), taskRunning)
		c.putRaw(machineRunningRef(machine, id, unit), "")
		c.put(HeartbeatKey(machine), &pb.TaskHeartbeat{UnixNano: now})
		out = next
		return c, nil
	})
	return out, err
}

// taskFrom reads the task and its open reference from r's answers i and
// i+1 (get(TaskKey), get(opOpenRef)).
func taskFrom(r *reads, i int, id int64, unit string) (*taskRead, error) {
	t, err := decode[pb.Task](r.one(i))
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, notFoundf("%s not found", taskName(id, unit))
	}
	return &taskRead{unit: unit, t: t, ref: r.one(i + 1)}, nil
}

// readOneTask reads, for an attempt that changes one task of operation
// id, the operation's shared keys and the task: it returns the change the
// attempt builds, the ledger over it, and the task.
func (s *State) readOneTask(ctx context.Context, id int64, unit string) (*change, *opLedger, *taskRead, error) {
	r, err := s.read(ctx, append(s.ledgerGets(id, 1), get(TaskKey(id, unit)), get(opOpenRef(id, unit)))...)
	if err != nil {
		return nil, nil, nil, err
	}
	c := &change{}
	l, err := s.newLedger(ctx, c, r, 0, id)
	if err != nil {
		return nil, nil, nil, err
	}
	tr, err := taskFrom(r, ledgerReads, id, unit)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, l, tr, nil
}

// TaskReport is a task's agent's report of how its attempt ended.
type TaskReport struct {
	Operation int64
	Unit      string
	Attempt   int64
	// Outcome is DONE, FAILED, PAUSED (the process ended for a pause) or
	// STOPPED (for a stop, or the unit dying).
	Outcome pb.TaskState
	Results map[string]string
	// Message says why it failed or stopped; cut to MaxTaskMessageBytes.
	Message string
}

// cutMessage cuts m to MaxTaskMessageBytes.
func cutMessage(m string) string {
	if len(m) <= MaxTaskMessageBytes {
		return m
	}
	return strings.ToValidUTF8(m[:MaxTaskMessageBytes-3], "") + "..."
}

// mapBytes is what a map of strings holds, keys and values.
func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// checkAttempt is T2: a report of the task's current attempt.
func checkAttempt(id int64, unit string, t *pb.Task, attempt int64) error {
	if attempt != t.Attempt {
		return refused("T2", "%s is at attempt %d: the report of attempt %d is stale", taskName(id, unit), t.Attempt, attempt)
	}
	return nil
}

// FinishTask records how a task's attempt ended: from RUNNING, DONE or
// FAILED (or STOPPED, the unit dying); from PAUSING, PAUSED unless it
// ended DONE or FAILED first; from STOPPING, STOPPED unless DONE or FAILED
// first. A closed task's last open sibling ends the operation.
func (s *State) FinishTask(ctx context.Context, rep TaskReport) (*pb.Task, error) {
	id, unit := rep.Operation, rep.Unit
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	switch rep.Outcome {
	case pb.TaskState_TASK_STATE_DONE, pb.TaskState_TASK_STATE_FAILED, pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_STOPPED:
	default:
		return nil, invalidf("a task ends done, failed, paused or stopped, not %s", TaskStateName(rep.Outcome))
	}
	if n := mapBytes(rep.Results); n > MaxResultsBytes {
		return nil, tooLarge("the task's results", n, MaxResultsBytes)
	}
	var out *pb.Task
	err := s.apply(ctx, "finish "+taskName(id, unit), func(ctx context.Context) (*change, error) {
		c, l, tr, err := s.readOneTask(ctx, id, unit)
		if err != nil {
			return nil, err
		}
		t := tr.t.v
		if !taskOnMachine(t.State) {
			return nil, refuseMove(id, unit, t.State, "finished", "a running, pausing or stopping")
		}
		if err := checkAttempt(id, unit, t, rep.Attempt); err != nil {
			return nil, err
		}
		end := rep.Outcome
		switch {
		case end == pb.TaskState_TASK_STATE_DONE || end == pb.TaskState_TASK_STATE_FAILED:
		case t.State == pb.TaskState_TASK_STATE_STOPPING:
			end = pb.TaskState_TASK_STATE_STOPPED
		case t.State == pb.TaskState_TASK_STATE_PAUSING && end == pb.TaskState_TASK_STATE_PAUSED:
		case end == pb.TaskState_TASK_STATE_STOPPED:
		default:
			return nil, refused("T1", "%s is %s: it cannot end paused", taskName(id, unit), TaskStateName(t.State))
		}
		next := protoClone(t)
		next.State, next.Results, next.Message = end, rep.Results, cutMessage(rep.Message)
		if err := l.move(tr, next); err != nil {
			return nil, err
		}
		out = next
		return c, l.settle()
	})
	return out, err
}

// move adds to the ledger's change task tr's move to next (its record,
// state set, the rest of it as it is to be written): the references of
// both states, the slot, the queue, the closing.
func (l *opLedger) move(tr *taskRead, next *pb.Task) error {
	t := tr.t.v
	now := l.s.now().UnixNano()
	next.ChangedUnixNano = now
	l.c.ifMod(tr.t.key, tr.t.mod)
	if t.State == pb.TaskState_TASK_STATE_PENDING {
		// Its admission changes its references, not its record.
		l.c.ifMod(string(tr.ref.Key), tr.ref.ModRevision)
	}
	l.c.put(tr.t.key, next)
	if !taskOpen(next.State) {
		next.FinishedUnixNano = now
		return l.close(t, tr.admitted(), next.State)
	}
	switch next.State {
	case pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_STOPPING:
		// Still on its machine, holding its slot.
	case pb.TaskState_TASK_STATE_PAUSED:
		if err := l.leave(t, tr.admitted()); err != nil {
			return err
		}
	case pb.TaskState_TASK_STATE_LOST:
		if err := l.leave(t, tr.admitted()); err != nil {
			return err
		}
		l.c.putRaw(lostRef(l.id, t.Unit), "")
	case pb.TaskState_TASK_STATE_PENDING:
		// Resumed: from PAUSED or LOST (open, without a slot) or FAILED
		// (reopen).
		if t.State == pb.TaskState_TASK_STATE_LOST {
			l.c.del(lostRef(l.id, t.Unit))
		}
		l.setRefs(t.Unit, taskRefValue(next.State, l.take(t.Unit)))
		return nil
	}
	l.setRefs(t.Unit, taskRefValue(next.State, false))
	return nil
}

// ReportTaskLost records that a task's attempt was lost (why: "no
// heartbeat from machine 3 for 1m0s", "the agent restarted"): RUNNING
// becomes LOST, resumable; PAUSING becomes PAUSED and STOPPING STOPPED,
// what was asked of it. attempt 0 is any attempt.
func (s *State) ReportTaskLost(ctx context.Context, id int64, unit string, attempt int64, why string) (*pb.Task, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	var out *pb.Task
	err := s.apply(ctx, "report "+taskName(id, unit)+" lost", func(ctx context.Context) (*change, error) {
		c, l, tr, err := s.readOneTask(ctx, id, unit)
		if err != nil {
			return nil, err
		}
		if !taskOnMachine(tr.t.v.State) {
			return nil, refuseMove(id, unit, tr.t.v.State, "lost", "a running, pausing or stopping")
		}
		if attempt != 0 {
			if err := checkAttempt(id, unit, tr.t.v, attempt); err != nil {
				return nil, err
			}
		}
		out = lostTask(tr.t.v, why)
		if err := l.move(tr, out); err != nil {
			return nil, err
		}
		return c, l.settle()
	})
	return out, err
}

// lostTask is t's record once lost.
func lostTask(t *pb.Task, why string) *pb.Task {
	next := protoClone(t)
	next.Message = cutMessage(why)
	switch t.State {
	case pb.TaskState_TASK_STATE_PAUSING:
		next.State = pb.TaskState_TASK_STATE_PAUSED
	case pb.TaskState_TASK_STATE_STOPPING:
		next.State = pb.TaskState_TASK_STATE_STOPPED
	default:
		next.State = pb.TaskState_TASK_STATE_LOST
	}
	return next
}

// TaskRefusal is a task a verb could not move, and why.
type TaskRefusal struct {
	Unit string
	Err  error
}

// VerbResult says what an operation-wide verb did to each task.
type VerbResult struct {
	// Changed are the units whose tasks it moved.
	Changed []string
	// Already are those whose tasks were where it leads (pausing or
	// paused, for a pause).
	Already []string
	// Refused are those it could not move, with T1's refusal; of a verb
	// on all the tasks, those in a state it does not apply to are left
	// out.
	Refused []TaskRefusal
}

// verb is an operator's verb on tasks: the move of one, given the task
// read and its unit's record and open tasks (read for resume only).
type verb struct {
	name string // "pause"
	// move returns the task's next record, nil with a nil error when it
	// is already there, or T1's refusal.
	move func(id int64, tr *taskRead) (*pb.Task, error)
	// wants says whether a task with that open reference value takes the
	// verb, for the verb on all tasks.
	wants func(value string) bool
	// failed: the verb applies to failed tasks too (resume).
	failed bool
	// cost, when set, bounds the operations of one task's move instead
	// of taskCost.
	cost func(st pb.TaskState, slots bool) int
	// guard, when set, adds the comparisons the verb's transactions rely
	// on besides the tasks'.
	guard func(c *change)
}

var pauseVerb = verb{
	name: "pause",
	move: func(id int64, tr *taskRead) (*pb.Task, error) {
		next := protoClone(tr.t.v)
		switch tr.t.v.State {
		case pb.TaskState_TASK_STATE_RUNNING:
			next.State = pb.TaskState_TASK_STATE_PAUSING
		case pb.TaskState_TASK_STATE_PENDING:
			next.State = pb.TaskState_TASK_STATE_PAUSED
		case pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_PAUSED:
			return nil, nil
		default:
			return nil, refuseMove(id, tr.unit, tr.t.v.State, "paused", "a pending or running")
		}
		return next, nil
	},
	wants: func(v string) bool { return v == taskQueued || v == taskAdmitted || v == taskRunning },
}

var stopVerb = verb{
	name: "stop",
	move: func(id int64, tr *taskRead) (*pb.Task, error) {
		next := protoClone(tr.t.v)
		switch tr.t.v.State {
		case pb.TaskState_TASK_STATE_RUNNING, pb.TaskState_TASK_STATE_PAUSING:
			next.State = pb.TaskState_TASK_STATE_STOPPING
		case pb.TaskState_TASK_STATE_PENDING, pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_LOST:
			next.State, next.Message = pb.TaskState_TASK_STATE_STOPPED, "stopped by an operator"
		case pb.TaskState_TASK_STATE_STOPPING, pb.TaskState_TASK_STATE_STOPPED:
			return nil, nil
		default:
			return nil, refuseMove(id, tr.unit, tr.t.v.State, "stopped", "an open")
		}
		return next, nil
	},
	wants: func(v string) bool { return v != taskStopping },
}

var resumeVerb = verb{
	name: "resume",
	move: func(id int64, tr *taskRead) (*pb.Task, error) {
		next := protoClone(tr.t.v)
		switch tr.t.v.State {
		case pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_LOST, pb.TaskState_TASK_STATE_FAILED:
			next.State, next.Resumed, next.FinishedUnixNano = pb.TaskState_TASK_STATE_PENDING, next.Resumed+1, 0
		case pb.TaskState_TASK_STATE_PENDING, pb.TaskState_TASK_STATE_RUNNING:
			return nil, nil
		default:
			return nil, refuseMove(id, tr.unit, tr.t.v.State, "resumed", "a paused, failed or lost")
		}
		return next, nil
	},
	wants:  func(v string) bool { return v == taskPaused || v == taskLost },
	failed: true,
}

// PauseOperation pauses the named units' tasks of operation id, or all of
// them that can be when units is empty: a running one becomes PAUSING
// (its agent ends the process, then reports it PAUSED), a pending one
// PAUSED at once.
func (s *State) PauseOperation(ctx context.Context, id int64, units []string) (*VerbResult, error) {
	return s.taskVerb(ctx, id, units, pauseVerb)
}

// StopOperation stops the named units' tasks of operation id, or all its
// open ones when units is empty: a running or pausing one becomes
// STOPPING (its agent ends the process), the others STOPPED at once.
// Stopping is final.
func (s *State) StopOperation(ctx context.Context, id int64, units []string) (*VerbResult, error) {
	return s.taskVerb(ctx, id, units, stopVerb)
}

// ResumeOperation resumes the named units' tasks of operation id, or all
// its paused, lost and failed ones when units is empty: each becomes
// PENDING (admitted if a slot is free, else queued; a failed one's unit
// must be alive), and a FAILED operation RUNNING again.
func (s *State) ResumeOperation(ctx context.Context, id int64, units []string) (*VerbResult, error) {
	return s.taskVerb(ctx, id, units, resumeVerb)
}

// verbBatch is how many tasks one transaction of a verb reads; it moves
// as many of them as fit (taskCost).
const verbBatch = 16

// verbBudget is what a verb's transaction may hold of the tasks' moves:
// the rest is the operation's own (its record and open reference, the
// slots' and the queue's comparisons, the freed marker, the witness or
// the open tasks' comparison: 8 at most), a verb's guard (1) and an
// audit entry's.
const verbBudget = MaxTxnOps - auditOps - 10

// taskCost bounds the operations of one task's move, from its state.
func taskCost(st pb.TaskState, slots bool) int {
	switch {
	case st == pb.TaskState_TASK_STATE_RUNNING:
		return 4
	case slots:
		return 14
	}
	return 9
}

func (s *State) taskVerb(ctx context.Context, id int64, units []string, v verb) (*VerbResult, error) {
	res := &VerbResult{}
	quiet := len(units) == 0
	if quiet {
		var err error
		if units, err = s.verbCandidates(ctx, id, v); err != nil {
			return nil, err
		}
	} else {
		units = slices.Clone(units)
		slices.Sort(units)
		units = slices.Compact(units)
		for _, u := range units {
			if err := checkUnitName(u); err != nil {
				return nil, err
			}
		}
	}
	op, err := s.cachedOperation(ctx, id)
	if err != nil {
		return nil, err
	}
	if op.MaxParallel > 0 || len(units) <= verbBatch {
		for len(units) > 0 {
			n := min(len(units), verbBatch)
			rest, err := s.verbTxn(ctx, id, units[:n], v, res, quiet)
			if err != nil {
				return res, err
			}
			units = append(rest, units[n:]...)
		}
		return res, nil
	}
	return s.taskVerbParallel(ctx, id, units, v, quiet)
}

// verbWorkers is how many transactions of one verb run at once on an
// operation without max_parallel. Their tasks are disjoint, and the keys
// they share (a witness, the open tasks' prefix, the operation's record)
// only a change that closes or reopens tasks compares: pausing or
// resuming 10,000 tasks one transaction after another took most of a
// minute, where their transactions can share etcd's rounds. With
// max_parallel every move of a slot compares the slots' prefix, so
// transactions at once would only conflict: they run one after another.
const verbWorkers = 4

// taskVerbParallel is taskVerb's loop with verbWorkers transactions at
// once, each batch of verbBatch units moved whole (a transaction's
// leftovers go again) by one worker. The first error stops the workers
// after their transactions in flight; the result holds every move made,
// its lists sorted.
func (s *State) taskVerbParallel(ctx context.Context, id int64, units []string, v verb, quiet bool) (*VerbResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := &VerbResult{}
	var mu sync.Mutex
	var first error
	batches := make(chan []string)
	var wg sync.WaitGroup
	for range verbWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				for len(b) > 0 && ctx.Err() == nil {
					part := &VerbResult{}
					rest, err := s.verbTxn(ctx, id, b, v, part, quiet)
					mu.Lock()
					res.Changed = append(res.Changed, part.Changed...)
					res.Already = append(res.Already, part.Already...)
					res.Refused = append(res.Refused, part.Refused...)
					if err != nil && first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					b = rest
				}
			}
		}()
	}
feed:
	for len(units) > 0 {
		n := min(len(units), verbBatch)
		select {
		case batches <- units[:n]:
			units = units[n:]
		case <-ctx.Done():
			break feed
		}
	}
	close(batches)
	wg.Wait()
	slices.Sort(res.Changed)
	slices.Sort(res.Already)
	slices.SortFunc(res.Refused, func(a, b TaskRefusal) int { return strings.Compare(a.Unit, b.Unit) })
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return res, first
}

// verbCandidates lists the units of operation id's tasks that may take v.
func (s *State) verbCandidates(ctx context.Context, id int64, v verb) ([]string, error) {
	if _, err := s.cachedOperation(ctx, id); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, opOpenPrefix(id), false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range kvs {
		if v.wants(string(kv.Value)) {
			out = append(out, strings.TrimPrefix(string(kv.Key), opOpenPrefix(id)))
		}
	}
	if v.failed {
		kvs, err := s.listAll(ctx, opFailedPrefix(id), true)
		if err != nil {
			return nil, err
		}
		out = append(out, keySuffixes(kvs, opFailedPrefix(id))...)
		slices.Sort(out)
	}
	return out, nil
}

// verbTxn moves as many of units' tasks as fit in one transaction and
// returns the units it left for another.
func (s *State) verbTxn(ctx context.Context, id int64, units []string, v verb, res *VerbResult, quiet bool) ([]string, error) {
	var rest, changed, already []string
	var refusals []TaskRefusal
	err := s.apply(ctx, fmt.Sprintf("%s tasks of operation %d", v.name, id), func(ctx context.Context) (*change, error) {
		rest, changed, already, refusals = nil, nil, nil, nil
		gets := s.ledgerGets(id, len(units))
		for _, u := range units {
			p := UnitTasksPrefix(u)
			gets = append(gets, get(TaskKey(id, u)), get(opOpenRef(id, u)), get(UnitKey(u)), getCount(p))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		l, err := s.newLedger(ctx, c, r, 0, id)
		if err != nil {
			return nil, err
		}
		trs := make([]*taskRead, len(units))
		order := make([]int, 0, len(units))
		for i, u := range units {
			tr, err := taskFrom(r, ledgerReads+4*i, id, u)
			if errors.Is(err, ErrNotFound) {
				refusals = append(refusals, TaskRefusal{Unit: u, Err: err})
				continue
			}
			if err != nil {
				return nil, err
			}
			trs[i] = tr
			order = append(order, i)
		}
		// The queued tasks first: a slot another frees is not given to a
		// task this change takes out of the queue.
		slices.SortStableFunc(order, func(a, b int) int {
			qa := trs[a].t.v.State == pb.TaskState_TASK_STATE_PENDING && !trs[a].admitted()
			qb := trs[b].t.v.State == pb.TaskState_TASK_STATE_PENDING && !trs[b].admitted()
			switch {
			case qa && !qb:
				return -1
			case qb && !qa:
				return 1
			}
			return 0
		})
		for n, i := range order {
			tr, u := trs[i], units[i]
			cost := taskCost
			if v.cost != nil {
				cost = v.cost
			}
			if c.size()+cost(tr.t.v.State, l.max > 0) > verbBudget {
				for _, j := range order[n:] {
					rest = append(rest, units[j])
				}
				break
			}
			next, err := v.move(id, tr)
			if err != nil {
				if !quiet {
					refusals = append(refusals, TaskRefusal{Unit: u, Err: err})
				}
				continue
			}
			if next == nil {
				already = append(already, u)
				continue
			}
			if tr.t.v.State == pb.TaskState_TASK_STATE_FAILED {
				if err := l.reopen(tr, r, ledgerReads+4*i+2); err != nil {
					refusals = append(refusals, TaskRefusal{Unit: u, Err: err})
					continue
				}
			}
			if err := l.move(tr, next); err != nil {
				return nil, err
			}
			changed = append(changed, u)
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		if v.guard != nil {
			v.guard(c)
		}
		return c, l.settle()
	})
	if err != nil {
		return nil, err
	}
	res.Changed = append(res.Changed, changed...)
	res.Already = append(res.Already, already...)
	res.Refused = append(res.Refused, refusals...)
	slices.Sort(rest)
	return rest, nil
}

// reopen adds to the change what a failed task needs to open again: its
// unit alive (its record compared) with fewer than MaxOpenTasksPerUnit
// open tasks (compared), its failed reference gone, and its operation
// RUNNING again if it had ended. r's answers i and i+1 are the unit's
// record and its open tasks' count.
func (l *opLedger) reopen(tr *taskRead, r *reads, i int) error {
	u, err := decode[pb.Unit](r.one(i))
	if err != nil {
		return err
	}
	switch {
	case u == nil:
		return refused("T1", "%s: unit %s is gone", taskName(l.id, tr.unit), tr.unit)
	case u.v.Life != pb.Life_LIFE_ALIVE:
		return refused("T1", "%s: unit %s is %s", taskName(l.id, tr.unit), tr.unit, lifeName(u.v.Life))
	case r.ranges[i+1].Count >= MaxOpenTasksPerUnit:
		return fullf("unit %s has %d open tasks, the most a unit may have", tr.unit, r.ranges[i+1].Count)
	}
	l.c.ifMod(u.key, u.mod)
	l.c.ifNoNewer(UnitTasksPrefix(tr.unit), r.rev)
	l.c.del(opFailedRef(l.id, tr.unit))
	l.opened++
	// The operation may be ending as the last of its other tasks closes.
	l.assertOp()
	if op := l.cur(); op.State != pb.OperationState_OPERATION_STATE_RUNNING {
		next := l.rewrite()
		next.State, next.FinishedUnixNano = pb.OperationState_OPERATION_STATE_RUNNING, 0
		l.c.putRaw(opOpenOpRef(l.id), OperationStateName(next.State))
	}
	return nil
}
