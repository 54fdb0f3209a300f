package state

import (
	"context"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Operation returns operation id.
func (s *State) Operation(ctx context.Context, id int64) (*pb.Operation, error) {
	return s.cachedOperation(ctx, id)
}

// OperationsFilter selects operations for Operations.
type OperationsFilter struct {
	// State, when set, is the state they are in; Service the service
	// they run on.
	State   pb.OperationState
	Service string
	// After skips the operations up to that id; Limit is how many to
	// return, 100 when zero, at most 1,000.
	After int64
	Limit int
}

// operationsPage is how many records one read of Operations returns: a
// record of 10,000 targets is some 150 KB.
const operationsPage = 16

// Operations returns the operations the filter selects, oldest first.
func (s *State) Operations(ctx context.Context, f OperationsFilter) ([]*pb.Operation, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	if f.Service != "" {
		if err := checkServiceName(f.Service); err != nil {
			return nil, err
		}
	}
	start := operationsPrefix
	if f.After > 0 {
		start = OperationKey(f.After) + "\x00"
	}
	var out []*pb.Operation
	for len(out) < limit {
		resp, err := s.readRange(ctx, getOp{Key: start, End: prefixEnd(operationsPrefix), Limit: operationsPage})
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			op, err := decode[pb.Operation](kv)
			if err != nil {
				return nil, err
			}
			if (f.State == 0 || op.v.State == f.State) && (f.Service == "" || op.v.Service == f.Service) && len(out) < limit {
				out = append(out, op.v)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return out, nil
}

// Task returns the named unit's task of operation id.
func (s *State) Task(ctx context.Context, id int64, unit string) (*pb.Task, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(TaskKey(id, unit)))
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
	return t.v, nil
}

// Tasks returns up to limit (100 when zero, at most 1,000) of operation
// id's tasks, by unit, after the named unit ("" for the first).
func (s *State) Tasks(ctx context.Context, id int64, after string, limit int) ([]*pb.Task, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	start := TasksPrefix(id)
	if after != "" {
		start = TaskKey(id, after) + "\x00"
	}
	resp, err := s.readRange(ctx, getOp{Key: start, End: prefixEnd(TasksPrefix(id)), Limit: int64(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Task, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		t, err := decode[pb.Task](kv)
		if err != nil {
			return nil, err
		}
		out = append(out, t.v)
	}
	return out, nil
}

// TaskCounts counts operation id's tasks by state, from references rather
// than the tasks' records: the open ones by their references' values
// (pending counts the admitted and the queued), the failed and stopped
// by theirs, and the done as the rest of the tasks' keys.
func (s *State) TaskCounts(ctx context.Context, id int64) (map[pb.TaskState]int64, error) {
	count := getCount
	r, err := s.read(ctx, count(TasksPrefix(id)), count(opFailedPrefix(id)), count(opStoppedPrefix(id)))
	if err != nil {
		return nil, err
	}
	open, err := s.listRev(ctx, opOpenPrefix(id), false, r.rev)
	if err != nil {
		return nil, err
	}
	out := map[pb.TaskState]int64{
		pb.TaskState_TASK_STATE_FAILED:  r.ranges[1].Count,
		pb.TaskState_TASK_STATE_STOPPED: r.ranges[2].Count,
		pb.TaskState_TASK_STATE_DONE:    r.ranges[0].Count - r.ranges[1].Count - r.ranges[2].Count - int64(len(open)),
	}
	for _, kv := range open {
		out[refValueState(string(kv.Value))]++
	}
	for st, n := range out {
		if n == 0 {
			delete(out, st)
		}
	}
	return out, nil
}

// refValueState is the state an open task's reference value says.
func refValueState(v string) pb.TaskState {
	switch v {
	case taskQueued, taskAdmitted:
		return pb.TaskState_TASK_STATE_PENDING
	case taskRunning:
		return pb.TaskState_TASK_STATE_RUNNING
	case taskPausing:
		return pb.TaskState_TASK_STATE_PAUSING
	case taskPaused:
		return pb.TaskState_TASK_STATE_PAUSED
	case taskStopping:
		return pb.TaskState_TASK_STATE_STOPPING
	case taskLost:
		return pb.TaskState_TASK_STATE_LOST
	}
	return pb.TaskState_TASK_STATE_UNSPECIFIED
}

// OperationsSummary is the line ctl status shows of the operations.
type OperationsSummary struct {
	Running, AwaitingApproval, Approved int
	// LostTasks counts the lost tasks of all operations.
	LostTasks int64
}

// OperationsSummary counts the open operations by state, and the lost
// tasks, from their references.
func (s *State) OperationsSummary(ctx context.Context) (OperationsSummary, error) {
	var sum OperationsSummary
	r, err := s.read(ctx, getPrefix(opRefOpen, MaxOpenOperations+1), getCount(refLostTasks))
	if err != nil {
		return sum, err
	}
	for _, kv := range r.all(0) {
		switch string(kv.Value) {
		case OperationStateName(pb.OperationState_OPERATION_STATE_RUNNING):
			sum.Running++
		case OperationStateName(pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL):
			sum.AwaitingApproval++
		case OperationStateName(pb.OperationState_OPERATION_STATE_APPROVED):
			sum.Approved++
		}
	}
	sum.LostTasks = r.ranges[1].Count
	return sum, nil
}

// UnitTasks returns the named unit's open tasks: operation id → what its
// agent is to do ("pending": start it; "queued", "running", "pausing",
// "paused", "stopping", "lost").
func (s *State) UnitTasks(ctx context.Context, unit string) (map[int64]string, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, getPrefix(UnitTasksPrefix(unit), MaxOpenTasksPerUnit*2))
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	for _, kv := range r.all(0) {
		id, err := parseOpID(strings.TrimPrefix(string(kv.Key), UnitTasksPrefix(unit)))
		if err != nil {
			return nil, invalidf("corrupt reference %s", kv.Key)
		}
		out[id] = string(kv.Value)
	}
	return out, nil
}
