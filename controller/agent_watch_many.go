package controller

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/watchhub"
)

const (
	// watchManyQueue bounds the responses waiting for a WatchMany stream's
	// sender. A subscription whose response cannot be queued waits, and
	// its hub stream queues meanwhile, up to the hub's bound, past which
	// it lists again: a slow client costs bounded memory.
	watchManyQueue = 16
	// maxSubscriptions bounds the live subscriptions of one WatchMany
	// stream. A unit agent has about eight, and two more per relation.
	maxSubscriptions = 1000
)

// WatchMany serves all of an agent's watch subjects on one stream. The
// caller is the one the stream was authenticated as; each subscription's
// subject is authorized as Watch authorizes it, when subscribed, and is
// then served as Watch serves it (the same translation and progress
// rule), each response tagged with the subscription's id. A subscription
// refused or failing ends on its own, with a WatchEnd; bad requests (a
// negative revision, an id in use, an unknown id to unsubscribe) end the
// id they name with InvalidArgument. The stream ends when the client goes
// away, or with Unavailable when the controller stops.
//
// Each live subscription is one goroutine reading its hub stream; all
// send through the one sender, the handler's goroutine, which drops what
// a subscription queued after it ended.
func (a *agentServer) WatchMany(stream pb.AgentService_WatchManyServer) error {
	m := &watchMany{
		a: a, c: callerFrom(stream.Context()),
		out:    make(chan watchManyOut, watchManyQueue),
		failed: make(chan error, 1),
		subs:   map[int64]*subscription{},
	}
	a.s.metrics.watchRPCs.Add(1)
	defer a.s.metrics.watchRPCs.Add(-1)
	ctx, cancel := context.WithCancel(stream.Context())
	// The receiver reads until the stream ends, which is after this
	// handler returns; it starts no subscription once closed is set.
	received := make(chan error, 1)
	go func() { received <- m.receive(ctx, stream) }()
	defer func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		cancel()
		m.wg.Wait()
	}()
	for {
		select {
		case o := <-m.out:
			if !o.end && o.s.ended.Load() {
				continue
			}
			if err := stream.Send(o.resp); err != nil {
				return err
			}
		case err := <-m.failed:
			return err
		case err := <-received:
			if errors.Is(err, io.EOF) {
				return nil // the client is done
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchMany is one WatchMany stream.
type watchMany struct {
	a   *agentServer
	c   caller
	out chan watchManyOut
	// failed takes the error that ends the whole stream.
	failed chan error
	wg     sync.WaitGroup

	mu     sync.Mutex
	subs   map[int64]*subscription
	closed bool
}

// subscription is one live subject of a WatchMany stream.
type subscription struct {
	id     int64
	cancel context.CancelFunc
	// ended is set once the subscription ended (unsubscribed, refused,
	// failed): the sender drops what it still queued.
	ended atomic.Bool
}

type watchManyOut struct {
	s    *subscription
	resp *pb.WatchManyResponse
	end  bool
}

// receive handles the client's requests until the stream ends.
func (m *watchMany) receive(ctx context.Context, stream pb.AgentService_WatchManyServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		switch r := req.GetRequest().(type) {
		case *pb.WatchManyRequest_Subscribe:
			m.subscribe(ctx, r.Subscribe)
		case *pb.WatchManyRequest_Unsubscribe:
			m.unsubscribe(ctx, r.Unsubscribe.GetId())
		default:
			m.refuse(ctx, 0, invalid("watch request with neither subscribe nor unsubscribe"))
		}
	}
}

func (m *watchMany) subscribe(ctx context.Context, req *pb.WatchSubscribe) {
	id := req.GetId()
	if req.GetAfterRevision() < 0 {
		m.refuse(ctx, id, invalid("invalid revision %d to resume after: want 0 or a revision received earlier", req.GetAfterRevision()))
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if old, ok := m.subs[id]; ok {
		// The id's subscription ends too: an end means nothing more
		// comes for the id.
		m.endLocked(old)
		m.mu.Unlock()
		m.refuse(ctx, id, invalid("subscription %d is in use: subscribe under an id not used before", id))
		return
	}
	if len(m.subs) >= maxSubscriptions {
		m.mu.Unlock()
		m.refuse(ctx, id, status.Errorf(codes.ResourceExhausted, "%s has %d watch subscriptions on this stream, the most allowed", m.c, maxSubscriptions))
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &subscription{id: id, cancel: cancel}
	m.subs[id] = s
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer cancel()
		m.follow(ctx, sctx, s, req.GetSubject(), req.GetAfterRevision())
	}()
}

func (m *watchMany) unsubscribe(ctx context.Context, id int64) {
	m.mu.Lock()
	s, ok := m.subs[id]
	if ok {
		m.endLocked(s)
	}
	m.mu.Unlock()
	if !ok {
		m.refuse(ctx, id, invalid("no subscription %d to unsubscribe from", id))
	}
}

// endLocked ends s: it sends nothing more, and its goroutine stops.
func (m *watchMany) endLocked(s *subscription) {
	s.ended.Store(true)
	s.cancel()
	if m.subs[s.id] == s {
		delete(m.subs, s.id)
	}
}

// refuse sends an end for id, for a request that started no subscription.
func (m *watchMany) refuse(ctx context.Context, id int64, err error) {
	m.queue(ctx, watchManyOut{s: &subscription{id: id}, end: true, resp: endOf(id, err)})
}

func endOf(id int64, err error) *pb.WatchManyResponse {
	st := status.Convert(toStatus(err))
	return &pb.WatchManyResponse{Id: id, Response: &pb.WatchManyResponse_End{End: &pb.WatchEnd{Code: int32(st.Code()), Message: st.Message()}}}
}

// queue hands o to the sender, unless ctx ends first.
func (m *watchMany) queue(ctx context.Context, o watchManyOut) bool {
	select {
	case m.out <- o:
		return true
	case <-ctx.Done():
		return false
	}
}

// follow serves one subscription until it ends: as Watch serves a stream.
// streamCtx is the stream's, ctx the subscription's.
func (m *watchMany) follow(streamCtx, ctx context.Context, s *subscription, subject *pb.WatchSubject, after int64) {
	a := m.a
	w, err := a.watchOf(ctx, m.c, subject)
	if err != nil {
		m.fail(streamCtx, ctx, s, err)
		return
	}
	var hs *watchhub.Stream
	if w.key != "" {
		hs, err = a.s.cfg.Watches.WatchKey(ctx, w.key, after)
	} else {
		hs, err = a.s.cfg.Watches.Watch(ctx, w.prefix, after)
	}
	if err != nil {
		m.fail(streamCtx, ctx, s, watchErr(ctx, err))
		return
	}
	defer hs.Close()
	var lastProgress time.Time
	for {
		b, err := hs.Next(ctx)
		if err != nil {
			m.fail(streamCtx, ctx, s, watchErr(ctx, err))
			return
		}
		resp, err := w.translate(ctx, b)
		if err != nil {
			m.fail(streamCtx, ctx, s, err)
			return
		}
		if !resp.Relisted && len(resp.Changes) == 0 {
			if time.Since(lastProgress) < progressEvery {
				continue
			}
			lastProgress = time.Now()
		}
		if !m.queue(ctx, watchManyOut{s: s, resp: &pb.WatchManyResponse{Id: s.id, Response: &pb.WatchManyResponse_Watch{Watch: resp}}}) {
			return
		}
	}
}

// fail ends s after err: the whole stream when the controller is stopping,
// else s alone, with an end for the client. Nothing is sent when s ended
// already (its context did).
func (m *watchMany) fail(streamCtx, ctx context.Context, s *subscription, err error) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, errHubStopped) {
		select {
		case m.failed <- err:
		default:
		}
		return
	}
	m.mu.Lock()
	m.endLocked(s)
	m.mu.Unlock()
	m.queue(streamCtx, watchManyOut{s: s, end: true, resp: endOf(s.id, err)})
}
