package controller

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Presence keeps the calling agent present while its stream lives and its
// pings keep coming: the controller holds the agent's leased presence key,
// which goes at once when the stream ends and, if this controller dies,
// when the lease runs out.
func (a *agentServer) Presence(stream pb.AgentService_PresenceServer) error {
	ctx := stream.Context()
	c := callerFrom(ctx)
	tag := names.MachineTag(c.id)
	if c.kind == names.KindUnit {
		tag = names.UnitTag(c.id)
	}
	ttl := a.s.cfg.PresenceTimeout
	p, err := a.s.st.Present(ctx, tag, ttl)
	if err != nil {
		return err
	}
	defer p.Close()
	interval := max(ttl/3, 100*time.Millisecond)
	if err := stream.Send(&pb.PresenceResponse{PingIntervalMs: interval.Milliseconds()}); err != nil {
		return err
	}
	// An agent silent for ttl (stopped, or cut off with its connection
	// still up) is absent from then on: the timer takes its key away.
	// The stream itself ends at the agent's next ping, or with its
	// connection, so that waiting for either costs no goroutine beside
	// the handler's (a thousand agents' pings had one each).
	expire := time.AfterFunc(ttl, p.Close)
	defer expire.Stop()
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if !expire.Stop() {
			return status.Errorf(codes.DeadlineExceeded, "no ping from %s for %s", c, ttl)
		}
		select {
		case <-p.Lost():
			return status.Error(codes.Unavailable, "presence lapsed: reconnect")
		default:
		}
		expire.Reset(ttl)
		if err := stream.Send(&pb.PresenceResponse{PingIntervalMs: interval.Milliseconds()}); err != nil {
			return err
		}
	}
}
