package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Heartbeat records that the machine's agent reported now (its tasks are
// alive): heartbeats/<machine>, by the State's clock. It reads nothing.
func (s *State) Heartbeat(ctx context.Context, machine string) error {
	if err := checkMachineID(machine); err != nil {
		return err
	}
	return s.apply(ctx, "heartbeat of machine "+machine, func(context.Context) (*change, error) {
		c := &change{}
		c.put(HeartbeatKey(machine), &pb.TaskHeartbeat{UnixNano: s.now().UnixNano()})
		return c, nil
	})
}

// DetectLostTasks marks LOST (PAUSED, STOPPED for a pausing or stopping
// one) every task running on a machine whose last heartbeat is older
// than lostAfter, each batch compared with the heartbeat it judged by (a
// heartbeat meanwhile voids it); and deletes the heartbeats older than
// lostAfter of machines running nothing. The leader calls it every few
// seconds; since is when it became leader: until it has led for
// lostAfter it marks nothing, giving agents time to reach it. It returns
// how many tasks it marked.
func (s *State) DetectLostTasks(ctx context.Context, lostAfter time.Duration, since time.Time) (int, error) {
	now := s.now()
	if now.Sub(since) < lostAfter {
		return 0, nil
	}
	hbs, err := s.listAll(ctx, heartbeatsPrefix, false)
	if err != nil {
		return 0, err
	}
	marked := 0
	var errs []error
	for _, kv := range hbs {
		hb, err := decode[pb.TaskHeartbeat](kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if now.Sub(time.Unix(0, hb.v.UnixNano)) <= lostAfter {
			continue
		}
		machine := strings.TrimPrefix(hb.key, heartbeatsPrefix)
		n, err := s.loseMachineTasks(ctx, machine, hb, lostAfter)
		marked += n
		if err != nil {
			errs = append(errs, fmt.Errorf("tasks of machine %s: %w", machine, err))
		}
	}
	return marked, errors.Join(errs...)
}

// loseMachineTasks marks the tasks running on a silent machine lost, or
// deletes its heartbeat when it runs none.
func (s *State) loseMachineTasks(ctx context.Context, machine string, hb *record[*pb.TaskHeartbeat], lostAfter time.Duration) (int, error) {
	refs, err := s.listAll(ctx, machineRunningPrefix(machine), true)
	if err != nil {
		return 0, err
	}
	if len(refs) == 0 {
		c := &change{}
		c.ifMod(hb.key, hb.mod)
		c.ifEmpty(machineRunningPrefix(machine))
		c.del(hb.key)
		_, err := s.commit(ctx, c)
		return 0, err
	}
	byOp := map[int64][]string{}
	for _, kv := range refs {
		opStr, unit, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), machineRunningPrefix(machine)), "/")
		id, err := parseOpID(opStr)
		if err != nil {
			return 0, invalidf("corrupt reference %s", kv.Key)
		}
		byOp[id] = append(byOp[id], unit)
	}
	why := fmt.Sprintf("no heartbeat from machine %s for %s", machine, lostAfter)
	v := verb{
		name: "lose",
		move: func(id int64, tr *taskRead) (*pb.Task, error) {
			if !taskOnMachine(tr.t.v.State) || tr.t.v.Machine != machine {
				return nil, nil
			}
			return lostTask(tr.t.v, why), nil
		},
		cost: func(_ pb.TaskState, slots bool) int {
			if slots {
				return 13
			}
			return 7
		},
		guard: func(c *change) { c.ifMod(hb.key, hb.mod) },
	}
	marked := 0
	for _, id := range slices.Sorted(maps.Keys(byOp)) {
		res, err := s.taskVerb(ctx, id, byOp[id], v)
		if res != nil {
			marked += len(res.Changed)
		}
		if err != nil {
			return marked, err
		}
	}
	return marked, nil
}

// SetCheckpoint merges values into the named unit's checkpoint of
// operation id while its task runs (running, pausing or stopping) at
// attempt (T2): at most MaxCheckpointBytes in all.
func (s *State) SetCheckpoint(ctx context.Context, id int64, unit string, attempt int64, values map[string]string) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	return s.apply(ctx, "checkpoint "+taskName(id, unit), func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(TaskKey(id, unit)), get(CheckpointKey(id, unit)))
		if err != nil {
			return nil, err
		}
		t, err := decode[pb.Task](r.one(0))
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, notFoundf("%s not found", taskName(id, unit))
		}
		if !taskOnMachine(t.v.State) {
			return nil, refuseMove(id, unit, t.v.State, "checkpointed", "a running, pausing or stopping")
		}
		if err := checkAttempt(id, unit, t.v, attempt); err != nil {
			return nil, err
		}
		cp, err := decode[pb.Checkpoint](r.one(1))
		if err != nil {
			return nil, err
		}
		next := &pb.Checkpoint{Values: map[string]string{}}
		var mod int64
		if cp != nil {
			maps.Copy(next.Values, cp.v.Values)
			mod = cp.mod
		}
		maps.Copy(next.Values, values)
		if n := mapBytes(next.Values); n > MaxCheckpointBytes {
			return nil, tooLarge("the task's checkpoint", n, MaxCheckpointBytes)
		}
		c := &change{}
		c.ifMod(t.key, t.mod)
		c.ifMod(CheckpointKey(id, unit), mod)
		c.put(CheckpointKey(id, unit), next)
		return c, nil
	})
}

// Checkpoint returns the named unit's checkpoint of operation id; empty
// when it has none.
func (s *State) Checkpoint(ctx context.Context, id int64, unit string) (map[string]string, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(CheckpointKey(id, unit)))
	if err != nil {
		return nil, err
	}
	cp, err := decode[pb.Checkpoint](r.one(0))
	if err != nil || cp == nil {
		return map[string]string{}, err
	}
	return cp.v.Values, nil
}

// MaterializePending makes the missing tasks of every running operation
// whose tasks are not all made (a controller stopped between batches),
// but for those this State is making already (the call that ran the
// operation): two runs at once would each make the same batches, and
// all but one retry. The leader's operations worker calls it.
func (s *State) MaterializePending(ctx context.Context) error {
	kvs, err := s.listAll(ctx, opRefOpen, false)
	if err != nil {
		return err
	}
	var errs []error
	for _, kv := range kvs {
		if string(kv.Value) != OperationStateName(pb.OperationState_OPERATION_STATE_RUNNING) {
			continue
		}
		id, err := parseOpID(strings.TrimPrefix(string(kv.Key), opRefOpen))
		if err != nil {
			errs = append(errs, invalidf("corrupt reference %s", kv.Key))
			continue
		}
		if s.making.busy(id) {
			continue
		}
		op, err := s.cachedOperation(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !op.TasksCreated {
			errs = append(errs, s.materializeTasks(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// operationFinished says whether an operation in state st has ended for
// good (but for a FAILED one's resume).
func operationFinished(st pb.OperationState) bool {
	return st != pb.OperationState_OPERATION_STATE_UNSPECIFIED && !operationOpen(st)
}

// pruneScan bounds the operations one PruneOperations looks at.
const pruneScan = 1000

// PruneOperations expires the operations awaiting approval or approved
// past their expiry, then deletes up to max operations (oldest first,
// among the first pruneScan) that ended before now − retention: each in
// one transaction with its tasks, checkpoints, task logs and references, never one
// with an open task. It returns how many it expired and deleted.
func (s *State) PruneOperations(ctx context.Context, retention time.Duration, max int) (expired, pruned int, err error) {
	kvs, err := s.listAll(ctx, opRefOpen, false)
	if err != nil {
		return 0, 0, err
	}
	for _, kv := range kvs {
		if string(kv.Value) == OperationStateName(pb.OperationState_OPERATION_STATE_RUNNING) {
			continue
		}
		lapsed := false
		id, err := parseOpID(strings.TrimPrefix(string(kv.Key), opRefOpen))
		if err != nil {
			return expired, 0, invalidf("corrupt reference %s", kv.Key)
		}
		err = s.apply(ctx, fmt.Sprintf("expire operation %d", id), func(ctx context.Context) (*change, error) {
			op, err := s.operation(ctx, id)
			if errors.Is(err, ErrNotFound) {
				return nil, errNothingToDo
			}
			if err != nil {
				return nil, err
			}
			if !operationOpen(op.v.State) || op.v.State == pb.OperationState_OPERATION_STATE_RUNNING || !s.expired(op.v) {
				return nil, errNothingToDo
			}
			c := &change{}
			s.expireOps(c, op)
			lapsed = true
			return c, nil
		})
		if err != nil {
			return expired, 0, err
		}
		if lapsed {
			expired++
		}
	}
	cutoff := s.now().Add(-retention).UnixNano()
	start, seen := operationsPrefix, 0
	for pruned < max && seen < pruneScan {
		resp, err := s.readRange(ctx, getOp{Key: start, End: prefixEnd(operationsPrefix), Limit: operationsPage})
		if err != nil {
			return expired, pruned, err
		}
		for _, kv := range resp.Kvs {
			seen++
			op, err := decode[pb.Operation](kv)
			if err != nil {
				return expired, pruned, err
			}
			if pruned >= max || !operationFinished(op.v.State) || op.v.FinishedUnixNano >= cutoff {
				continue
			}
			id := op.v.Id
			c := &change{}
			c.ifMod(op.key, op.mod)
			c.ifEmpty(opOpenPrefix(id))
			c.del(op.key)
			c.delPrefix(TasksPrefix(id))
			c.delPrefix(checkpointsPrefix + opID(id) + "/")
			c.delPrefix(TaskLogsPrefix(id))
			c.delPrefix(opFailedPrefix(id))
			c.delPrefix(opStoppedPrefix(id))
			c.del(opFreedRef(id))
			c.delPrefix(opMadePrefix(id))
			c.del(opOpenOpRef(id))
			ok, err := s.commit(ctx, c)
			if err != nil {
				return expired, pruned, err
			}
			if ok {
				pruned++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return expired, pruned, nil
}

// removedVerb stops every open task of a removed unit.
var removedVerb = verb{
	name: "stop the removed unit's",
	move: func(id int64, tr *taskRead) (*pb.Task, error) {
		if !taskOpen(tr.t.v.State) {
			return nil, nil
		}
		next := protoClone(tr.t.v)
		next.State, next.Message = pb.TaskState_TASK_STATE_STOPPED, "unit removed"
		return next, nil
	},
	cost: func(pb.TaskState, bool) int { return 14 },
}

// stopUnitTasks closes every open task of the named unit, removed, as
// STOPPED ("unit removed"): the cleaner's work of a unit-tasks item.
func (s *State) stopUnitTasks(ctx context.Context, unit string) error {
	kvs, err := s.listAll(ctx, UnitTasksPrefix(unit), true)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		id, err := parseOpID(strings.TrimPrefix(string(kv.Key), UnitTasksPrefix(unit)))
		if err != nil {
			return invalidf("corrupt reference %s", kv.Key)
		}
		if _, err := s.taskVerb(ctx, id, []string{unit}, removedVerb); err != nil {
			return err
		}
	}
	return nil
}
