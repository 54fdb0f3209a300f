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
	pings := make(chan error, 1)
	go func() {
		for {
			_, err := stream.Recv()
			select {
			case pings <- err:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	if err := stream.Send(&pb.PresenceResponse{PingIntervalMs: interval.Milliseconds()}); err != nil {
		return err
	}
	timer := time.NewTimer(ttl)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.Lost():
			return status.Error(codes.Unavailable, "presence lapsed: reconnect")
		case <-timer.C:
			return status.Errorf(codes.DeadlineExceeded, "no ping from %s for %s", c, ttl)
		case err := <-pings:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			if err != nil {
				return err
			}
			timer.Reset(ttl)
			if err := stream.Send(&pb.PresenceResponse{PingIntervalMs: interval.Milliseconds()}); err != nil {
				return err
			}
		}
	}
}
