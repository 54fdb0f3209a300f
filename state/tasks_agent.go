package state

import (
	"context"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// StopDyingUnitTasks closes as STOPPED ("unit dying") the named unit's
// open tasks that do not run on its machine (pending, paused, lost): its
// agent asks once the unit is dying, when they could never start again.
// A unit's life never goes back, so the batches need not compare its
// record. A running task is its agent's to end (FinishTask). It returns
// how many it closed.
func (s *State) StopDyingUnitTasks(ctx context.Context, unit string) (int, error) {
	if err := checkUnitName(unit); err != nil {
		return 0, err
	}
	r, err := s.read(ctx, get(UnitKey(unit)), getPrefix(UnitTasksPrefix(unit), MaxOpenTasksPerUnit*2))
	if err != nil {
		return 0, err
	}
	u, err := decode[pb.Unit](r.one(0))
	if err != nil {
		return 0, err
	}
	switch {
	case u == nil:
		return 0, notFoundf("unit %s not found", unit)
	case u.v.Life == pb.Life_LIFE_ALIVE:
		return 0, refused("T1", "unit %s is alive: its tasks are stopped only once it is dying", unit)
	}
	v := verb{
		name: "stop the dying unit's",
		move: func(id int64, tr *taskRead) (*pb.Task, error) {
			if !taskOpen(tr.t.v.State) || taskOnMachine(tr.t.v.State) {
				return nil, nil
			}
			next := protoClone(tr.t.v)
			next.State, next.Message = pb.TaskState_TASK_STATE_STOPPED, "unit dying"
			return next, nil
		},
		cost: func(pb.TaskState, bool) int { return 14 },
	}
	stopped := 0
	for _, kv := range r.all(1) {
		switch string(kv.Value) {
		case taskRunning, taskPausing, taskStopping:
			continue
		}
		id, err := parseOpID(strings.TrimPrefix(string(kv.Key), UnitTasksPrefix(unit)))
		if err != nil {
			return stopped, invalidf("corrupt reference %s", kv.Key)
		}
		res, err := s.taskVerb(ctx, id, []string{unit}, v)
		if res != nil {
			stopped += len(res.Changed)
		}
		if err != nil {
			return stopped, err
		}
	}
	return stopped, nil
}
