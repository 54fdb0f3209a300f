package machineagent

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// keepPresent keeps a presence stream open to the controller, pinging as
// often as it asks, reconnecting with backoff until ctx ends or the
// controller refuses the machine to this instance (FailedPrecondition:
// another one is present), which it sends on fenced.
func (a *Agent) keepPresent(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	previous := a.previous
	for ctx.Err() == nil {
		err := a.presence(ctx, bo, &previous)
		a.setPresent(false)
		if ctx.Err() != nil {
			return
		}
		switch status.Code(err) {
		case codes.FailedPrecondition:
			a.logger.Error("the controller holds the machine for another agent instance: this one stops", "error", err)
			a.fenced <- err
			return
		case codes.Unauthenticated, codes.PermissionDenied:
			a.logger.Warn("the controller refuses the machine's presence; trying again", "error", err)
		default:
			a.logger.Debug("presence interrupted; reconnecting", "error", err)
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

// presence holds the machine's presence on one stream until it breaks.
// Its first request names the agent's instance and, until the controller
// has once taken it, the instance before it (*previous).
func (a *Agent) presence(ctx context.Context, bo backoff.BackOff, previous *string) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.cfg.API.Presence(pctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.PresenceRequest{Instance: a.instance, PreviousInstance: *previous}); err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	*previous = ""
	bo.Reset()
	a.setPresent(true)
	interval := time.Duration(resp.PingIntervalMs) * time.Millisecond
	errs := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				errs <- err
				return
			}
		}
	}()
	t := time.NewTicker(max(interval, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stream.CloseSend()
			return ctx.Err()
		case err := <-errs:
			return err
		case <-t.C:
			if err := stream.Send(&pb.PresenceRequest{}); err != nil {
				return err
			}
		}
	}
}

// setPresent records whether the agent holds its machine's presence.
func (a *Agent) setPresent(present bool) {
	a.presentMu.Lock()
	defer a.presentMu.Unlock()
	switch {
	case present && !a.present:
		close(a.presentNow)
	case !present && a.present:
		a.presentNow = make(chan struct{})
	}
	a.present = present
}

// whenPresent returns a channel closed while the agent holds its
// machine's presence.
func (a *Agent) whenPresent() <-chan struct{} {
	a.presentMu.Lock()
	defer a.presentMu.Unlock()
	return a.presentNow
}

// fenced is Run's error once another instance holds the machine.
func fenced(refusal error) error {
	return fmt.Errorf("%w: %s", ErrFenced, statusMessage(refusal))
}
