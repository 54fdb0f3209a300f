package agentwatch

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Watcher is the one AgentService method Follow needs.
type Watcher interface {
	Watch(ctx context.Context, in *pb.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.WatchResponse], error)
}

// Follow delivers every response of the subject's watch to apply, until
// ctx ends. It never gives up: after an error it waits (backing off to 5 s)
// and resumes after the last revision delivered; a subject the controller
// refuses is retried slowly, and said so in the log, since a restarted
// controller or a new credential may accept it.
func Follow(ctx context.Context, api Watcher, subject *pb.WatchSubject, apply func(*pb.WatchResponse), logger hclog.Logger) {
	follow(ctx, api, subject, 0, apply, logger)
}

// follow is Follow, resuming after revision after.
func follow(ctx context.Context, api Watcher, subject *pb.WatchSubject, after int64, apply func(*pb.WatchResponse), logger hclog.Logger) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for ctx.Err() == nil {
		stream, err := api.Watch(ctx, &pb.WatchRequest{Subject: subject, AfterRevision: after})
		for err == nil {
			var resp *pb.WatchResponse
			if resp, err = stream.Recv(); err != nil {
				break
			}
			bo.Reset()
			after = resp.Revision
			apply(resp)
		}
		if ctx.Err() != nil {
			return
		}
		switch status.Code(err) {
		case codes.PermissionDenied, codes.NotFound, codes.InvalidArgument, codes.Unauthenticated:
			logger.Warn("watch refused", "subject", subject.String(), "error", err)
		case codes.ResourceExhausted:
			logger.Warn("watch cut by the controller; resuming", "subject", subject.String(), "after", after, "error", err)
		default:
			if !errors.Is(err, io.EOF) {
				logger.Debug("watch interrupted; resuming", "subject", subject.String(), "after", after, "error", err)
			}
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
