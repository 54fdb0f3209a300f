package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The fuzzer's calls of the operations' and the users' RPCs
// (TestFuzzOperatorAPI, fuzz_test.go).

// operationCall makes one call of the operations' RPCs: on the demo kv
// charm's actions, its services' units and the operations made.
func (fz *fuzzer) operationCall(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	action := []string{"keys", "backup", "reindex", "restore", randomString(rnd)}[rnd.IntN(5)]
	params := []string{"", "{}", `{"name":"n"}`, `{"name":"Bad Name","compress":"yes"}`, `{"steps":1,"step-ms":0}`,
		"[1]", "null", `{"name":`, randomString(rnd)}[rnd.IntN(9)]
	id := func() int64 {
		if rnd.IntN(3) == 0 {
			return int64Edge(rnd)
		}
		if n, err := strconv.ParseInt(fz.known(rnd, "operation"), 10, 64); err == nil {
			return n
		}
		return 1 + rnd.Int64N(5)
	}
	units := func() []string {
		var out []string
		for range rnd.IntN(4) {
			out = append(out, fz.name(rnd, "unit"))
		}
		return out
	}
	switch rnd.IntN(12) {
	case 10:
		in := &pb.TaskLogsRequest{Operation: id(), Unit: fz.name(rnd, "unit"), Follow: rnd.IntN(2) == 0, TailBytes: int64Edge(rnd)}
		if rnd.IntN(2) == 0 {
			in.Unit, in.TailBytes = "", 0
		}
		return "TaskLogs", in, fz.taskLogs(ctx, in)
	case 0:
		in := &pb.ListActionsRequest{Service: fz.name(rnd, "service")}
		_, err := fz.op.ListActions(ctx, in)
		return "ListActions", in, err
	case 1, 2:
		in := &pb.RunActionRequest{Action: action, ParamsJson: []byte(params), MaxParallel: count32(rnd)}
		for range 1 + rnd.IntN(3) {
			in.Targets = append(in.Targets, fz.name(rnd, []string{"service", "unit"}[rnd.IntN(2)]))
		}
		if rnd.IntN(5) == 0 {
			in.Targets = nil
		}
		resp, err := fz.op.RunAction(ctx, in)
		if err == nil {
			fz.remember("operation", strconv.FormatInt(resp.GetOperation().GetId(), 10))
		}
		return "RunAction", in, err
	case 3:
		in := &pb.ListOperationsRequest{State: pb.OperationState(rnd.IntN(12) - 1), Service: fz.name(rnd, "service"),
			Limit: int32(int64Edge(rnd)), Before: int64Edge(rnd)}
		if rnd.IntN(2) == 0 {
			in.State, in.Service, in.Limit, in.Before = 0, "", 0, 0
		}
		_, err := fz.op.ListOperations(ctx, in)
		return "ListOperations", in, err
	case 4:
		in := &pb.ShowOperationRequest{Id: id(), After: fz.name(rnd, "unit"), Limit: int32(int64Edge(rnd))}
		if rnd.IntN(2) == 0 {
			in.After, in.Limit = "", 0
		}
		_, err := fz.op.ShowOperation(ctx, in)
		return "ShowOperation", in, err
	case 5:
		in := &pb.ShowTaskRequest{Id: id(), Unit: fz.name(rnd, "unit")}
		_, err := fz.op.ShowTask(ctx, in)
		return "ShowTask", in, err
	case 6:
		// The fuzzer's user requested what it made: approving its own is
		// refused, as is a digest it never saw.
		in := &pb.ApproveOperationRequest{Id: id(), Digest: []string{"", strings.Repeat("0", 64), randomString(rnd)}[rnd.IntN(3)]}
		if show, err := fz.op.ShowOperation(ctx, &pb.ShowOperationRequest{Id: in.Id, Limit: 1}); err == nil && rnd.IntN(2) == 0 {
			in.Digest = show.GetOperation().GetDigest()
		}
		_, err := fz.op.ApproveOperation(ctx, in)
		return "ApproveOperation", in, err
	case 7:
		in := &pb.RejectOperationRequest{Id: id(), Reason: randomString(rnd)}
		_, err := fz.op.RejectOperation(ctx, in)
		return "RejectOperation", in, err
	case 8:
		in := &pb.ExecuteOperationRequest{Id: id()}
		_, err := fz.op.ExecuteOperation(ctx, in)
		return "ExecuteOperation", in, err
	case 9:
		in := &pb.PauseTasksRequest{Id: id(), Units: units()}
		_, err := fz.op.PauseTasks(ctx, in)
		return "PauseTasks", in, err
	}
	if rnd.IntN(2) == 0 {
		in := &pb.ResumeTasksRequest{Id: id(), Units: units()}
		_, err := fz.op.ResumeTasks(ctx, in)
		return "ResumeTasks", in, err
	}
	in := &pb.StopTasksRequest{Id: id(), Units: units()}
	_, err := fz.op.StopTasks(ctx, in)
	return "StopTasks", in, err
}

// showCall shows a unit or a machine (made, gone, made up or of every
// edge), or reads the debug log of some.
func (fz *fuzzer) showCall(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	if rnd.IntN(3) == 0 {
		return fz.debugLog(ctx, rnd)
	}
	if rnd.IntN(2) == 0 {
		in := &pb.ShowUnitRequest{Unit: fz.name(rnd, "unit")}
		if rnd.IntN(3) == 0 {
			in.History = int32(int64Edge(rnd))
		}
		_, err := fz.op.ShowUnit(ctx, in)
		return "ShowUnit", in, err
	}
	in := &pb.ShowMachineRequest{Machine: fz.name(rnd, "machine")}
	_, err := fz.op.ShowMachine(ctx, in)
	return "ShowMachine", in, err
}

// revisionCall makes one call of the revisions' RPCs: on the services
// made, revisions kept, pruned, never made and of every edge.
func (fz *fuzzer) revisionCall(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	if rnd.IntN(2) == 0 {
		return fz.rolloutCall(ctx, rnd)
	}
	n := 1 + rnd.Int64N(12)
	if rnd.IntN(3) == 0 {
		n = int64Edge(rnd)
	}
	switch rnd.IntN(3) {
	case 0:
		in := &pb.ListRevisionsRequest{Service: fz.name(rnd, "service")}
		_, err := fz.op.ListRevisions(ctx, in)
		return "ListRevisions", in, err
	case 1:
		in := &pb.ShowRevisionRequest{Service: fz.name(rnd, "service"), Number: n}
		_, err := fz.op.ShowRevision(ctx, in)
		return "ShowRevision", in, err
	}
	if rnd.IntN(4) == 0 {
		in := &pb.RefreshServiceRequest{Service: fz.name(rnd, "service"), Charm: fz.name(rnd, "charm"), Revision: n,
			SwitchCharm: rnd.IntN(2) == 0, Config: map[string]string{fz.name(rnd, "option"): fz.name(rnd, "value")}}
		_, err := fz.op.RefreshService(ctx, in)
		return "RefreshService", in, err
	}
	in := &pb.RollbackServiceRequest{Service: fz.name(rnd, "service"), To: n}
	if rnd.IntN(2) == 0 {
		in.To = 0
	}
	_, err := fz.op.RollbackService(ctx, in)
	return "RollbackService", in, err
}

// rolloutCall makes one call of the rollouts' RPCs: policies of every
// field set or not, with values good, bad and of every edge, and the verbs
// on the services made.
func (fz *fuzzer) rolloutCall(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	service := fz.name(rnd, "service")
	// Each verb as often as the others: a slow machine makes few calls,
	// and the fuzzer runs until it has called every RPC.
	switch rnd.IntN(9) {
	case 8:
		in := &pb.ClaimOwnershipRequest{Manifest: fz.name(rnd, "service")}
		for range rnd.IntN(4) {
			kind := []string{"service", "machine", "relation", "", randomString(rnd)}[rnd.IntN(5)]
			in.Entities = append(in.Entities, &pb.OwnedEntity{Kind: kind, Id: fz.name(rnd, kind), Resource: fz.name(rnd, "service")})
		}
		_, err := fz.op.ClaimOwnership(ctx, in)
		return "ClaimOwnership", in, err
	case 0, 1:
		in := &pb.SetRolloutPolicyRequest{Service: service}
		if rnd.IntN(2) == 0 {
			mp := []string{"1", "3", "50%", "100%", "0", "0%", "101%", "-1", "%", "1.5", randomString(rnd)}[rnd.IntN(11)]
			in.MaxParallel = &mp
		}
		edge := func() *int64 {
			if rnd.IntN(2) == 0 {
				return nil
			}
			v := int64Edge(rnd)
			return &v
		}
		in.Canary, in.MinHealthyMs, in.DeadlineMs = edge(), edge(), edge()
		if rnd.IntN(3) == 0 {
			b := rnd.IntN(2) == 0
			in.AutoRevert = &b
		}
		if rnd.IntN(3) == 0 {
			g := []string{"none", "orly", "", "Bad Gate", randomString(rnd)}[rnd.IntN(5)]
			in.Gate = &g
		}
		_, err := fz.op.SetRolloutPolicy(ctx, in)
		return "SetRolloutPolicy", in, err
	case 2:
		in := &pb.GetRolloutPolicyRequest{Service: service}
		_, err := fz.op.GetRolloutPolicy(ctx, in)
		return "GetRolloutPolicy", in, err
	case 3:
		in := &pb.RolloutStatusRequest{Service: service}
		_, err := fz.op.RolloutStatus(ctx, in)
		return "RolloutStatus", in, err
	case 4:
		in := &pb.PauseRolloutRequest{Service: service}
		_, err := fz.op.PauseRollout(ctx, in)
		return "PauseRollout", in, err
	case 5:
		in := &pb.ResumeRolloutRequest{Service: service}
		_, err := fz.op.ResumeRollout(ctx, in)
		return "ResumeRollout", in, err
	case 6:
		in := &pb.PromoteRolloutRequest{Service: service}
		_, err := fz.op.PromoteRollout(ctx, in)
		return "PromoteRollout", in, err
	}
	in := &pb.AbortRolloutRequest{Service: service}
	_, err := fz.op.AbortRollout(ctx, in)
	return "AbortRollout", in, err
}

// taskLogs reads an operation's task logs, following them for a moment
// when asked to.
func (fz *fuzzer) taskLogs(ctx context.Context, in *pb.TaskLogsRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stream, err := fz.op.TaskLogs(ctx, in)
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF || ctx.Err() != nil && status.Code(err) == codes.DeadlineExceeded {
				return nil
			}
			return err
		}
	}
}

// debugLog reads the debug log with filters of every kind (units,
// services, machines, made-up names, levels, line counts), following it
// for a moment when asked to.
func (fz *fuzzer) debugLog(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	in := &pb.DebugLogRequest{Replay: rnd.IntN(3) == 0, Follow: rnd.IntN(3) == 0,
		Level: []string{"", "trace", "debug", "info", "warn", "error", "loud", randomString(rnd)}[rnd.IntN(8)]}
	if rnd.IntN(2) == 0 {
		in.Lines = int64Edge(rnd)
	}
	for range rnd.IntN(3) {
		in.Include = append(in.Include, fz.logEntity(rnd))
	}
	for range rnd.IntN(2) {
		in.Exclude = append(in.Exclude, fz.logEntity(rnd))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	stream, err := fz.op.DebugLog(ctx, in)
	if err != nil {
		return "DebugLog", in, err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF || ctx.Err() != nil && status.Code(err) == codes.DeadlineExceeded {
				return "DebugLog", in, nil
			}
			return "DebugLog", in, err
		}
	}
}

func (fz *fuzzer) logEntity(rnd *rand.Rand) string {
	switch rnd.IntN(4) {
	case 0:
		return "machine-" + fz.name(rnd, "machine")
	case 1:
		return "controller"
	}
	return fz.name(rnd, []string{"service", "unit"}[rnd.IntN(2)])
}

// userCall makes one call of the users' RPCs. The fuzzer's own user is
// admin, the last admin: its removal and demotion are refused, and it
// rotates its credential only to the one it holds (or to a malformed
// hash), so that it goes on calling.
func (fz *fuzzer) userCall(ctx context.Context, rnd *rand.Rand) (string, proto.Message, error) {
	role := pb.UserRole(rnd.IntN(5) - 1)
	switch rnd.IntN(8) {
	case 0:
		in := &pb.ListUsersRequest{}
		_, err := fz.op.ListUsers(ctx, in)
		return "ListUsers", in, err
	case 1:
		in := &pb.AddUserRequest{Name: fz.name(rnd, "user"), Role: role, ExpiresMs: int64Edge(rnd)}
		if rnd.IntN(2) == 0 {
			in.Name, in.ExpiresMs = fmt.Sprintf("u%d", fz.fresh.Add(1)), 0
		}
		resp, err := fz.op.AddUser(ctx, in)
		if err == nil {
			fz.remember("user", resp.GetUser().GetName())
		}
		return "AddUser", in, err
	case 2:
		in := &pb.RemoveUserRequest{Name: fz.name(rnd, "user")}
		_, err := fz.op.RemoveUser(ctx, in)
		return "RemoveUser", in, err
	case 3:
		in := &pb.SetUserRoleRequest{Name: fz.name(rnd, "user"), Role: role}
		_, err := fz.op.SetUserRole(ctx, in)
		return "SetUserRole", in, err
	case 4:
		in := &pb.WhoAmIRequest{}
		_, err := fz.op.WhoAmI(ctx, in)
		return "WhoAmI", in, err
	case 5:
		in := &pb.VersionRequest{}
		_, err := fz.op.Version(ctx, in)
		return "Version", in, err
	case 6:
		in := &pb.DashboardLoginRequest{}
		_, err := fz.op.DashboardLogin(ctx, in)
		return "DashboardLogin", in, err
	}
	in := &pb.RotateCredentialRequest{CredentialHash: fz.ownHash}
	if rnd.IntN(2) == 0 {
		in.CredentialHash = []string{"", "sha256:", "sha256:zz", randomString(rnd), fz.ownHash + "0"}[rnd.IntN(5)]
	}
	_, err := fz.op.RotateCredential(ctx, in)
	return "RotateCredential", in, err
}

// audit reads the audit log, following it for a moment when asked to.
func (fz *fuzzer) audit(ctx context.Context, in *pb.AuditRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	in.Follow = in.Limit%2 == 0
	stream, err := fz.op.Audit(ctx, in)
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if ctx.Err() != nil && status.Code(err) == codes.DeadlineExceeded {
				return nil
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
