package dashboard

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// API is what the dashboard needs of the controller: its calls, made as a
// user (controller.Server).
type API interface {
	CallAs(ctx context.Context, user, method string, req any, handler func(ctx context.Context) (any, error)) (any, error)
	Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error)
	Resolved(ctx context.Context, req *pb.ResolvedRequest) (*pb.ResolvedResponse, error)
	WhoAmI(ctx context.Context, req *pb.WhoAmIRequest) (*pb.WhoAmIResponse, error)
	ShowUnit(ctx context.Context, req *pb.ShowUnitRequest) (*pb.ShowUnitResponse, error)

	RolloutStatus(ctx context.Context, req *pb.RolloutStatusRequest) (*pb.RolloutStatusResponse, error)
	GetConfig(ctx context.Context, req *pb.GetConfigRequest) (*pb.GetConfigResponse, error)
	ListRevisions(ctx context.Context, req *pb.ListRevisionsRequest) (*pb.ListRevisionsResponse, error)
	ListActions(ctx context.Context, req *pb.ListActionsRequest) (*pb.ListActionsResponse, error)
	RunAction(ctx context.Context, req *pb.RunActionRequest) (*pb.RunActionResponse, error)
	PauseRollout(ctx context.Context, req *pb.PauseRolloutRequest) (*pb.PauseRolloutResponse, error)
	ResumeRollout(ctx context.Context, req *pb.ResumeRolloutRequest) (*pb.ResumeRolloutResponse, error)
	PromoteRollout(ctx context.Context, req *pb.PromoteRolloutRequest) (*pb.PromoteRolloutResponse, error)
	AbortRollout(ctx context.Context, req *pb.AbortRolloutRequest) (*pb.AbortRolloutResponse, error)

	ListOperations(ctx context.Context, req *pb.ListOperationsRequest) (*pb.ListOperationsResponse, error)
	ShowOperation(ctx context.Context, req *pb.ShowOperationRequest) (*pb.ShowOperationResponse, error)
	ApproveOperation(ctx context.Context, req *pb.ApproveOperationRequest) (*pb.ApproveOperationResponse, error)
	RejectOperation(ctx context.Context, req *pb.RejectOperationRequest) (*pb.RejectOperationResponse, error)
	ExecuteOperation(ctx context.Context, req *pb.ExecuteOperationRequest) (*pb.ExecuteOperationResponse, error)
	PauseTasks(ctx context.Context, req *pb.PauseTasksRequest) (*pb.PauseTasksResponse, error)
	ResumeTasks(ctx context.Context, req *pb.ResumeTasksRequest) (*pb.ResumeTasksResponse, error)
	StopTasks(ctx context.Context, req *pb.StopTasksRequest) (*pb.StopTasksResponse, error)
	TaskLogs(req *pb.TaskLogsRequest, stream pb.OperatorService_TaskLogsServer) error
	Audit(req *pb.AuditRequest, stream pb.OperatorService_AuditServer) error
}

// call makes the unary call method as user through CallAs: authorized
// by the user's role and audited, as over gRPC.
func call[Req, Resp any](ctx context.Context, s *Server, user, method string, req Req, f func(context.Context, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	resp, err := s.cfg.API.CallAs(ctx, user, method, req, func(ctx context.Context) (any, error) { return f(ctx, req) })
	if err != nil {
		return zero, err
	}
	return resp.(Resp), nil
}

// collect makes the server-streaming call method as user through CallAs,
// handing each message to take. The calls the pages make do not follow:
// the request's own bounds (a limit, a tail) bound what they send.
func collect[Req any, Msg any](ctx context.Context, s *Server, user, method string, req Req,
	f func(Req, grpc.ServerStreamingServer[Msg]) error, take func(*Msg)) error {
	_, err := s.cfg.API.CallAs(ctx, user, method, req, func(ctx context.Context) (any, error) {
		return nil, f(req, &localStream[Msg]{ctx: ctx, take: take})
	})
	return err
}

// localStream is a server stream whose messages go to a function in the
// same process: the dashboard's way to make a streaming call.
type localStream[Msg any] struct {
	grpc.ServerStream
	ctx  context.Context
	take func(*Msg)
}

func (l *localStream[Msg]) Context() context.Context     { return l.ctx }
func (l *localStream[Msg]) SendHeader(metadata.MD) error { return nil }
func (l *localStream[Msg]) SetHeader(metadata.MD) error  { return nil }
func (l *localStream[Msg]) SetTrailer(metadata.MD)       {}
func (l *localStream[Msg]) Send(m *Msg) error {
	l.take(m)
	return l.ctx.Err()
}

func notFoundf(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

func invalidf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// answer answers a state-changing request that succeeded: msg as plain
// text, and the page to go on to, when there is one, in a header the
// page's script follows.
func answer(w http.ResponseWriter, _ *http.Request, msg, next string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if next != "" {
		w.Header().Set("X-Dashboard-Next", next)
	}
	fmt.Fprintln(w, msg)
}
