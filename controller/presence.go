package controller

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Presence keeps the calling agent present while its stream lives and its
// pings keep coming: the controller holds the agent's leased presence key,
// which goes at once when the stream ends and, if this controller dies,
// when the lease runs out.
//
// The key is fenced to one agent instance, which the stream's first
// request names (state.PresentAs): a second instance of the agent is
// refused (FailedPrecondition) while the first is present. An agent's next
// run, naming the instance before it, takes the key over at once; the
// stream of the instance taken over (a copy of the agent's data directory
// running elsewhere, say) ends at its next ping, once this controller's
// copy of the presence keys shows the key changed since its stream put it
// (presenceHolders), and its reconnection is refused.
func (a *agentServer) Presence(stream pb.AgentService_PresenceServer) error {
	ctx := stream.Context()
	c := callerFrom(ctx)
	tag := names.MachineTag(c.id)
	if c.kind == names.KindUnit {
		tag = names.UnitTag(c.id)
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		return err
	}
	claim := state.PresenceClaim{Instance: first.GetInstance(), Previous: first.GetPreviousInstance()}
	ttl := a.s.cfg.PresenceTimeout
	p, err := a.s.st.PresentAs(ctx, tag, claim, ttl)
	if err != nil {
		if claim.Instance != "" && errors.Is(err, state.ErrRefused) {
			a.s.logger.Warn("a second agent instance is refused", "agent", tag, "instance", claim.Instance, "error", err)
		}
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
		if claim.Instance != "" && a.s.holders.changedSince(tag, p.Revision()) {
			// Taken over by another instance, or put again by this one
			// through another stream: this stream is not the agent's
			// presence any more. Reconnecting, the agent learns which.
			return status.Errorf(codes.Unavailable, "the presence of %s changed since this stream took it: reconnect", c)
		}
		expire.Reset(ttl)
		if err := stream.Send(&pb.PresenceResponse{PingIntervalMs: interval.Milliseconds()}); err != nil {
			return err
		}
	}
}

// presenceHolders is the controller's copy of the revision at which each
// presence key last changed (put or deleted), kept by one stream of the
// watch hub, so that a presence stream's handler can tell at each ping,
// without reading etcd, whether its agent's key is still the one it put.
// Until its first listing, and after the hub stops, it knows nothing, and
// no stream is ended on its word.
type presenceHolders struct {
	hub    *watchhub.Hub
	logger hclog.Logger

	mu      sync.RWMutex
	ready   bool
	changed map[string]int64 // by tag: the revision of the key's last change
}

func newPresenceHolders(hub *watchhub.Hub, logger hclog.Logger) *presenceHolders {
	return &presenceHolders{hub: hub, logger: logger}
}

// changedSince says whether tag's presence key is known to have changed
// after revision rev (the revision at which a stream put it).
func (h *presenceHolders) changedSince(tag string, rev int64) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.ready && h.changed[tag] > rev
}

// run follows the presence keys until ctx ends or the hub stops.
func (h *presenceHolders) run(ctx context.Context) {
	followPrefix(ctx, h.hub, state.PresencePrefix, "presence copy", "a presence taken over is noticed when its agent reconnects", h.logger, h.apply, h.forget)
}

func (h *presenceHolders) apply(b state.WatchBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.Reset {
		h.changed = make(map[string]int64, len(b.Events))
		h.ready = true
	}
	if !h.ready {
		return
	}
	for _, e := range b.Events {
		// A delete's mod revision is the delete's.
		h.changed[strings.TrimPrefix(e.Key, state.PresencePrefix)] = e.ModRevision
	}
}

// forget empties the copy until its next listing.
func (h *presenceHolders) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready, h.changed = false, nil
}
