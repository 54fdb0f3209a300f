package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The calls of a unit's tasks. Each is the unit's own agent's, or its
// machine agent's (authorized as the unit's other calls are: taskUnit);
// state checks that the task's attempt is the current one and, to start
// one, that the unit is on the machine it names (T2).

// taskUnit returns the named unit when the caller is its agent or the
// agent of the machine it is on.
func (a *agentServer) taskUnit(ctx context.Context, c caller, name, verb string) (*pb.Unit, error) {
	if c.kind == names.KindMachine {
		return a.machineUnit(ctx, c, name, verb)
	}
	if err := ownUnit(c, name, verb); err != nil {
		return nil, err
	}
	return a.unitFound(ctx, name)
}

// checkTaskID checks an operation id.
func checkTaskID(id int64) error {
	if id <= 0 {
		return invalid("operation id %d: want a positive number", id)
	}
	return nil
}

// StartTask starts the unit's admitted pending task, on the unit's
// machine, and says what to run.
func (a *agentServer) StartTask(ctx context.Context, req *pb.StartTaskRequest) (*pb.StartTaskResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	u, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "start the tasks of")
	if err != nil {
		return nil, err
	}
	if u.MachineId == "" {
		return nil, failedPrecondition("unit %s is not assigned to a machine: its tasks cannot start", req.GetUnit())
	}
	t, err := a.s.st.StartTask(ctx, req.GetOperation(), req.GetUnit(), u.MachineId)
	if err != nil {
		return nil, err
	}
	op, err := a.s.st.Operation(ctx, req.GetOperation())
	if err != nil {
		return nil, fmt.Errorf("read operation %d: %w", req.GetOperation(), err)
	}
	resp := &pb.StartTaskResponse{
		Attempt: t.Attempt, Action: op.Action, ParamsJson: op.ParamsJson, Parallel: op.Parallel, Charm: op.Charm,
		TimeoutMs: time.Duration(op.TimeoutNs).Milliseconds(), PauseGraceMs: time.Duration(op.PauseGraceNs).Milliseconds(),
	}
	if t.Resumed > 0 {
		cp, err := a.s.st.Checkpoint(ctx, req.GetOperation(), req.GetUnit())
		if err != nil {
			return nil, fmt.Errorf("read the checkpoint of %s in operation %d: %w", req.GetUnit(), req.GetOperation(), err)
		}
		resp.Resumed = len(cp) > 0
	}
	return resp, nil
}

// FinishTask records how the task's attempt ended.
func (a *agentServer) FinishTask(ctx context.Context, req *pb.FinishTaskRequest) (*pb.FinishTaskResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "finish the tasks of"); err != nil {
		return nil, err
	}
	t, err := a.s.st.FinishTask(ctx, state.TaskReport{Operation: req.GetOperation(), Unit: req.GetUnit(), Attempt: req.GetAttempt(),
		Outcome: req.GetOutcome(), Results: req.GetResults(), Message: req.GetMessage()})
	if err != nil {
		return nil, err
	}
	return &pb.FinishTaskResponse{State: t.State}, nil
}

// ReportTaskLost records that the task's attempt was lost: its agent
// restarted while it ran. Attempt 0 is whichever attempt runs: an agent
// that lost its record of the task (it crashed as it started it).
func (a *agentServer) ReportTaskLost(ctx context.Context, req *pb.ReportTaskLostRequest) (*pb.ReportTaskLostResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	if req.GetAttempt() < 0 {
		return nil, invalid("attempt %d: want the attempt the agent ran, or 0 when it lost its record", req.GetAttempt())
	}
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "report the tasks of"); err != nil {
		return nil, err
	}
	if _, err := a.s.st.ReportTaskLost(ctx, req.GetOperation(), req.GetUnit(), req.GetAttempt(), req.GetWhy()); err != nil {
		return nil, err
	}
	return &pb.ReportTaskLostResponse{}, nil
}

// StopUnitTasks closes the dying unit's tasks that are not running.
func (a *agentServer) StopUnitTasks(ctx context.Context, req *pb.StopUnitTasksRequest) (*pb.StopUnitTasksResponse, error) {
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "stop the tasks of"); err != nil {
		return nil, err
	}
	n, err := a.s.st.StopDyingUnitTasks(ctx, req.GetUnit())
	if err != nil {
		return nil, err
	}
	return &pb.StopUnitTasksResponse{Stopped: int32(n)}, nil
}

// TaskHeartbeat records that the machine's running tasks are alive: its
// machine agent's call (or that of a unit on it whose agent runs alone).
func (a *agentServer) TaskHeartbeat(ctx context.Context, req *pb.TaskHeartbeatRequest) (*pb.TaskHeartbeatResponse, error) {
	c := callerFrom(ctx)
	if c.kind == names.KindUnit {
		if err := checkMachineID(req.GetMachine()); err != nil {
			return nil, err
		}
		u, err := a.unitFound(ctx, c.id)
		if err != nil {
			return nil, err
		}
		if u.MachineId != req.GetMachine() {
			return nil, denied("%s may not report the tasks of machine %s: it is not on it", c, req.GetMachine())
		}
	} else if err := ownMachine(c, req.GetMachine(), "report the tasks of"); err != nil {
		return nil, err
	}
	if err := a.s.st.Heartbeat(ctx, req.GetMachine()); err != nil {
		return nil, err
	}
	return &pb.TaskHeartbeatResponse{}, nil
}

// SetCheckpoint merges values into the task's checkpoint, durably.
func (a *agentServer) SetCheckpoint(ctx context.Context, req *pb.SetCheckpointRequest) (*pb.SetCheckpointResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "checkpoint the tasks of"); err != nil {
		return nil, err
	}
	if len(req.GetValues()) == 0 {
		return nil, invalid("a checkpoint needs values")
	}
	if err := a.s.st.SetCheckpoint(ctx, req.GetOperation(), req.GetUnit(), req.GetAttempt(), req.GetValues()); err != nil {
		return nil, err
	}
	return &pb.SetCheckpointResponse{}, nil
}

// GetCheckpoint returns the task's checkpoint.
func (a *agentServer) GetCheckpoint(ctx context.Context, req *pb.GetCheckpointRequest) (*pb.GetCheckpointResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "read the checkpoints of"); err != nil {
		return nil, err
	}
	cp, err := a.s.st.Checkpoint(ctx, req.GetOperation(), req.GetUnit())
	if err != nil {
		return nil, err
	}
	return &pb.GetCheckpointResponse{Values: cp}, nil
}

// AppendTaskLog adds a chunk of lines to the task's log.
func (a *agentServer) AppendTaskLog(ctx context.Context, req *pb.AppendTaskLogRequest) (*pb.AppendTaskLogResponse, error) {
	if err := checkTaskID(req.GetOperation()); err != nil {
		return nil, err
	}
	if _, err := a.taskUnit(ctx, callerFrom(ctx), req.GetUnit(), "write the task logs of"); err != nil {
		return nil, err
	}
	end, err := a.s.st.AppendTaskLog(ctx, req.GetOperation(), req.GetUnit(), req.GetAttempt(), req.GetChunk())
	if err != nil {
		return nil, err
	}
	return &pb.AppendTaskLogResponse{End: end}, nil
}
