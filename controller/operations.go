package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Operations over the OperatorService: a charm's action run on some of a
// service's units (docs/ARCHITECTURE.md, Operations and tasks). The
// controller resolves the targets and validates the parameters against
// the service's charm's actions; state records the operation and keeps
// every rule of its approval, execution and tasks.

// maxPageSize bounds a page of operations or of an operation's tasks.
const maxPageSize = 1000

// ListActions lists the actions of a service's charm.
func (s *Server) ListActions(ctx context.Context, req *pb.ListActionsRequest) (*pb.ListActionsResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	svc, acts, err := s.serviceActions(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListActionsResponse{Service: svc.Name, Charm: svc.Charm}
	for _, name := range acts.Names() {
		spec := acts.Specs[name]
		schema, err := json.Marshal(spec.Schema)
		if err != nil {
			return nil, fmt.Errorf("action %s's schema: %w", name, err)
		}
		resp.Actions = append(resp.Actions, &pb.ActionInfo{
			Name: name, Description: spec.Description, Safe: spec.Safe, Approvers: spec.Approvers,
			Parallel: spec.Parallel, MaxParallel: int32(spec.MaxParallel), TimeoutMs: spec.Timeout.Milliseconds(),
			PauseGraceMs: spec.PauseGrace.Milliseconds(), ParamsSchemaJson: schema,
		})
	}
	return resp, nil
}

// serviceActions reads a service and the actions of the charm it runs.
func (s *Server) serviceActions(ctx context.Context, service string) (*pb.Service, *charm.Actions, error) {
	svc, err := s.st.Service(ctx, service)
	if err != nil {
		return nil, nil, err
	}
	rec, err := s.st.Charm(ctx, svc.Charm.GetName(), svc.Charm.GetRevision())
	if err != nil {
		return nil, nil, err
	}
	acts, err := s.actions.get(rec)
	if err != nil {
		return nil, nil, err
	}
	return svc, acts, nil
}

// RunAction makes an operation of an action on units of one service.
func (s *Server) RunAction(ctx context.Context, req *pb.RunActionRequest) (*pb.RunActionResponse, error) {
	switch {
	case !charm.ValidActionName(req.Action):
		return nil, invalid("invalid action name %q", req.Action)
	case len(req.Targets) == 0:
		return nil, invalid("run %s: name the units to run it on, or their service", req.Action)
	case len(req.Targets) > state.MaxOperationTargets:
		return nil, invalid("run %s: %d targets, at most %d", req.Action, len(req.Targets), state.MaxOperationTargets)
	case len(req.ParamsJson) > state.MaxParamsBytes:
		return nil, invalid("run %s: the parameters are %d bytes, over the %d KiB limit", req.Action, len(req.ParamsJson), state.MaxParamsBytes>>10)
	case req.MaxParallel < 0:
		return nil, invalid("run %s: max-parallel %d: want 1 or more, or 0 for the action's own", req.Action, req.MaxParallel)
	}
	service, err := targetsService(req.Targets)
	if err != nil {
		return nil, err
	}
	svc, acts, err := s.serviceActions(ctx, service)
	if err != nil {
		return nil, err
	}
	spec, ok := acts.Specs[req.Action]
	if !ok {
		_, err := acts.Validate(req.Action, nil) // names the charm's actions
		return nil, fmt.Errorf("service %s: %w", service, err)
	}
	units, err := s.targetUnits(ctx, service, req.Targets)
	if err != nil {
		return nil, err
	}
	params, err := decodeParams(req.ParamsJson)
	if err != nil {
		return nil, invalid("run %s: %v", req.Action, err)
	}
	maxParallel := spec.MaxParallel
	if n := int(req.MaxParallel); n > 0 {
		if spec.MaxParallel > 0 && n > spec.MaxParallel {
			return nil, invalid("run %s: max-parallel %d: the action runs on at most %d units at once", req.Action, n, spec.MaxParallel)
		}
		maxParallel = n
	}
	c := callerFrom(ctx)
	n := state.NewOperation{
		Service: service, Action: req.Action, Units: units, Charm: svc.Charm, Requester: c.id,
		Approvers: spec.Approvers, Safe: spec.Safe, Parallel: spec.Parallel, Timeout: spec.Timeout,
		MaxParallel: maxParallel, PauseGrace: spec.PauseGrace, ApprovalTTL: s.cfg.ApprovalTTL,
	}
	validated, verr := acts.Validate(req.Action, params)
	if verr != nil {
		list := charm.Violations(verr)
		if len(list) == 0 {
			// Not the schema's verdict (parameters JSON cannot hold, or
			// too large): refused, nothing recorded.
			return nil, verr
		}
		if n.ParamsJSON, err = charm.CanonicalJSON(params); err != nil {
			return nil, err
		}
		n.Invalid = list
		op, err := s.st.CreateOperation(ctx, n)
		if err != nil {
			return nil, err
		}
		auditTargets(ctx, opTarget(op.Id))
		st, _ := status.New(codes.InvalidArgument, fmt.Sprintf("operation %d: %s on %s is invalid, nothing runs: %s",
			op.Id, op.Action, op.Service, strings.Join(list, "; "))).WithDetails(operationBrief(op))
		return nil, st.Err()
	}
	if n.ParamsJSON, err = charm.CanonicalJSON(validated); err != nil {
		return nil, err
	}
	op, err := s.st.CreateOperation(ctx, n)
	if op == nil {
		return nil, err
	}
	auditTargets(ctx, opTarget(op.Id))
	if err != nil {
		// Recorded and running: the leader's operations worker makes
		// the tasks this call could not.
		s.logger.Warn("operation made, its tasks not all", "operation", op.Id, "error", err)
	}
	resp := &pb.RunActionResponse{Operation: op}
	if op.State == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL {
		resp.WhoMayApprove = state.WhoMayApprove(op)
	}
	return resp, nil
}

// targetsService is the one service an operation's targets name: units of
// it, or itself.
func targetsService(targets []string) (string, error) {
	service := ""
	for _, t := range targets {
		svc := t
		if strings.Contains(t, "/") {
			if err := names.CheckUnit(t); err != nil {
				return "", invalid("target %q: %v", t, err)
			}
			svc = names.UnitService(t)
		} else if err := names.CheckService(t); err != nil {
			return "", invalid("target %q: %v", t, err)
		}
		switch {
		case service == "":
			service = svc
		case svc != service:
			return "", invalid("targets of services %s and %s: an operation runs on units of one service", service, svc)
		}
	}
	return service, nil
}

// targetUnits is the units the targets name: each unit, and every unit
// of the service when it is named, once each.
func (s *Server) targetUnits(ctx context.Context, service string, targets []string) ([]string, error) {
	seen := map[string]bool{}
	for _, t := range targets {
		if t != service {
			seen[t] = true
			continue
		}
		units, err := s.st.Units(ctx, service)
		if err != nil {
			return nil, err
		}
		if len(units) == 0 {
			return nil, status.Errorf(codes.FailedPrecondition, "service %s has no units to run an action on", service)
		}
		for _, u := range units {
			seen[u.Name] = true
		}
	}
	if len(seen) > state.MaxOperationTargets {
		return nil, invalid("service %s: %d target units, at most %d", service, len(seen), state.MaxOperationTargets)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// decodeParams reads a request's parameters: a JSON object, or nothing.
func decodeParams(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var params map[string]any
	if err := d.Decode(&params); err != nil {
		return nil, fmt.Errorf("the parameters are not a JSON object: %v", err)
	}
	if d.More() {
		return nil, errors.New("the parameters are not one JSON object: something follows it")
	}
	if params == nil {
		params = map[string]any{}
	}
	return params, nil
}

func opTarget(id int64) string { return fmt.Sprintf("operation:%d", id) }

// auditTargets adds targets to the call's audit entry, if it has one.
func auditTargets(ctx context.Context, targets ...string) {
	if a := state.AuditFrom(ctx); a != nil {
		a.AddTargets(targets...)
	}
}

// auditOperation reads operation id and names its service in the call's
// audit entry, before the call's change writes it.
func (s *Server) auditOperation(ctx context.Context, id int64) (*pb.Operation, error) {
	if id <= 0 {
		return nil, invalid("invalid operation id %d", id)
	}
	op, err := s.st.Operation(ctx, id)
	if err != nil {
		return nil, err
	}
	auditTargets(ctx, "service:"+op.Service)
	return op, nil
}

func operationBrief(op *pb.Operation) *pb.OperationBrief {
	return &pb.OperationBrief{
		Id: op.Id, Service: op.Service, Action: op.Action, State: op.State, Requester: op.Requester,
		Units: int32(len(op.Units)), CreatedUnixNano: op.CreatedUnixNano, FinishedUnixNano: op.FinishedUnixNano,
		Approver: op.Approver,
	}
}

// ListOperations lists operations, newest first.
func (s *Server) ListOperations(ctx context.Context, req *pb.ListOperationsRequest) (*pb.ListOperationsResponse, error) {
	switch {
	case req.Limit < 0 || req.Limit > maxPageSize:
		return nil, invalid("limit %d: want 1 to %d, or 0 for 100", req.Limit, maxPageSize)
	case req.Before < 0:
		return nil, invalid("invalid operation id %d", req.Before)
	case pb.OperationState_name[int32(req.State)] == "":
		return nil, invalid("unknown operation state %d", req.State)
	}
	if req.Service != "" {
		if err := checkServiceName(req.Service); err != nil {
			return nil, err
		}
	}
	limit := int(req.Limit)
	if limit == 0 {
		limit = 100
	}
	ops, err := s.st.RecentOperations(ctx, req.State, req.Service, req.Before, limit)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListOperationsResponse{}
	for _, op := range ops {
		resp.Operations = append(resp.Operations, operationBrief(op))
	}
	if len(ops) == limit && ops[len(ops)-1].Id > 1 {
		resp.Next = ops[len(ops)-1].Id
	}
	return resp, nil
}

// ShowOperation shows an operation and a page of its tasks.
func (s *Server) ShowOperation(ctx context.Context, req *pb.ShowOperationRequest) (*pb.ShowOperationResponse, error) {
	switch {
	case req.Id <= 0:
		return nil, invalid("invalid operation id %d", req.Id)
	case req.Limit < 0 || req.Limit > maxPageSize:
		return nil, invalid("limit %d: want 1 to %d, or 0 for %d", req.Limit, maxPageSize, maxPageSize)
	case req.After != "" && !names.ValidUnit(req.After):
		return nil, invalid("invalid unit name %q", req.After)
	}
	limit := int(req.Limit)
	if limit == 0 {
		limit = maxPageSize
	}
	op, err := s.st.Operation(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	tasks, err := s.st.Tasks(ctx, req.Id, req.After, limit)
	if err != nil {
		return nil, err
	}
	counts, err := s.st.TaskCounts(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	infos, err := s.taskInfos(ctx, tasks)
	if err != nil {
		return nil, err
	}
	resp := &pb.ShowOperationResponse{Operation: op, Tasks: infos, TaskCounts: map[string]int64{}}
	for st, n := range counts {
		resp.TaskCounts[state.TaskStateName(st)] = n
	}
	if len(tasks) == limit {
		resp.Next = tasks[len(tasks)-1].Unit
	}
	if op.State == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL {
		resp.WhoMayApprove = state.WhoMayApprove(op)
	}
	return resp, nil
}

// taskOnMachine says whether a task in state st runs on its machine, whose
// heartbeat then tells whether it lives.
func taskOnMachine(st pb.TaskState) bool {
	switch st {
	case pb.TaskState_TASK_STATE_RUNNING, pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_STOPPING:
		return true
	}
	return false
}

// taskInfos adds to tasks the age of their machines' heartbeats.
func (s *Server) taskInfos(ctx context.Context, tasks []*pb.Task) ([]*pb.TaskInfo, error) {
	var machines []string
	for _, t := range tasks {
		if taskOnMachine(t.State) && t.Machine != "" && !slices.Contains(machines, t.Machine) {
			machines = append(machines, t.Machine)
		}
	}
	beats, err := s.st.Heartbeats(ctx, machines)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]*pb.TaskInfo, 0, len(tasks))
	for _, t := range tasks {
		info := &pb.TaskInfo{Task: t}
		if taskOnMachine(t.State) {
			info.HeartbeatAgeMs = -1
			if at, ok := beats[t.Machine]; ok {
				info.HeartbeatAgeMs = max(now.Sub(at), 0).Milliseconds()
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// ShowTask shows one unit's task of an operation.
func (s *Server) ShowTask(ctx context.Context, req *pb.ShowTaskRequest) (*pb.ShowTaskResponse, error) {
	if req.Id <= 0 {
		return nil, invalid("invalid operation id %d", req.Id)
	}
	if err := names.CheckUnit(req.Unit); err != nil {
		return nil, invalid("%v", err)
	}
	t, err := s.st.Task(ctx, req.Id, req.Unit)
	if err != nil {
		return nil, err
	}
	infos, err := s.taskInfos(ctx, []*pb.Task{t})
	if err != nil {
		return nil, err
	}
	cp, err := s.st.Checkpoint(ctx, req.Id, req.Unit)
	if err != nil {
		return nil, err
	}
	infos[0].CheckpointKeys = slices.Sorted(maps.Keys(cp))
	return &pb.ShowTaskResponse{Task: infos[0]}, nil
}

// ApproveOperation approves an operation as the caller, who saw its
// digest; state checks that the caller may (A2).
func (s *Server) ApproveOperation(ctx context.Context, req *pb.ApproveOperationRequest) (*pb.ApproveOperationResponse, error) {
	if req.Digest == "" {
		return nil, invalid("approve operation %d: no digest: name the digest of what you approve (ctl show-operation shows it)", req.Id)
	}
	if _, err := s.auditOperation(ctx, req.Id); err != nil {
		return nil, err
	}
	op, err := s.st.ApproveOperation(ctx, req.Id, callerFrom(ctx).id, req.Digest)
	if err != nil {
		return nil, err
	}
	return &pb.ApproveOperationResponse{Operation: op}, nil
}

// RejectOperation rejects an operation awaiting approval (A4).
func (s *Server) RejectOperation(ctx context.Context, req *pb.RejectOperationRequest) (*pb.RejectOperationResponse, error) {
	if _, err := s.auditOperation(ctx, req.Id); err != nil {
		return nil, err
	}
	op, err := s.st.RejectOperation(ctx, req.Id, callerFrom(ctx).id, req.Reason)
	if err != nil {
		return nil, err
	}
	return &pb.RejectOperationResponse{Operation: op}, nil
}

// ExecuteOperation runs an approved operation, as its requester or an
// admin (A3).
func (s *Server) ExecuteOperation(ctx context.Context, req *pb.ExecuteOperationRequest) (*pb.ExecuteOperationResponse, error) {
	if _, err := s.auditOperation(ctx, req.Id); err != nil {
		return nil, err
	}
	c := callerFrom(ctx)
	op, err := s.st.ExecuteOperation(ctx, req.Id, c.id, c.role == admin)
	if err != nil && (op == nil || op.State != pb.OperationState_OPERATION_STATE_RUNNING) {
		return nil, err
	}
	if err != nil {
		s.logger.Warn("operation executed, its tasks not all made", "operation", op.Id, "error", err)
	}
	return &pb.ExecuteOperationResponse{Operation: op}, nil
}

// PauseTasks pauses an operation's tasks.
func (s *Server) PauseTasks(ctx context.Context, req *pb.PauseTasksRequest) (*pb.PauseTasksResponse, error) {
	res, err := s.taskVerb(ctx, req.Id, req.Units, s.st.PauseOperation)
	if err != nil {
		return nil, err
	}
	return &pb.PauseTasksResponse{Result: res}, nil
}

// ResumeTasks resumes an operation's paused, failed and lost tasks.
func (s *Server) ResumeTasks(ctx context.Context, req *pb.ResumeTasksRequest) (*pb.ResumeTasksResponse, error) {
	res, err := s.taskVerb(ctx, req.Id, req.Units, s.st.ResumeOperation)
	if err != nil {
		return nil, err
	}
	return &pb.ResumeTasksResponse{Result: res}, nil
}

// StopTasks stops an operation's tasks, for good.
func (s *Server) StopTasks(ctx context.Context, req *pb.StopTasksRequest) (*pb.StopTasksResponse, error) {
	res, err := s.taskVerb(ctx, req.Id, req.Units, s.st.StopOperation)
	if err != nil {
		return nil, err
	}
	return &pb.StopTasksResponse{Result: res}, nil
}

// taskVerb checks a verb's request and has state move the tasks.
func (s *Server) taskVerb(ctx context.Context, id int64, units []string,
	verb func(context.Context, int64, []string) (*state.VerbResult, error)) (*pb.TaskVerbResult, error) {
	if len(units) > state.MaxOperationTargets {
		return nil, invalid("%d units, at most %d", len(units), state.MaxOperationTargets)
	}
	for _, u := range units {
		if err := names.CheckUnit(u); err != nil {
			return nil, invalid("%v", err)
		}
	}
	if _, err := s.auditOperation(ctx, id); err != nil {
		return nil, err
	}
	res, err := verb(ctx, id, units)
	if err != nil {
		return nil, err
	}
	out := &pb.TaskVerbResult{Changed: res.Changed, Already: res.Already}
	for _, r := range res.Refused {
		out.Refused = append(out.Refused, &pb.TaskRefused{Unit: r.Unit, Message: r.Err.Error()})
	}
	return out, nil
}

// operationsStatus is the line of operations in the model's status.
func (s *Server) operationsStatus(ctx context.Context) (*pb.OperationsStatus, error) {
	sum, err := s.st.OperationsSummary(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.OperationsStatus{Running: int32(sum.Running), AwaitingApproval: int32(sum.AwaitingApproval),
		Approved: int32(sum.Approved), LostTasks: sum.LostTasks}, nil
}
