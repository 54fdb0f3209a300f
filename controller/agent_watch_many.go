package controller

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

const (
	// maxSubscriptions bounds one agent's live subscriptions on a
	// WatchMany stream. A unit agent has about eight, and two more per
	// relation.
	maxSubscriptions = 1000
	// maxStreamSubscriptions bounds all the live subscriptions of one
	// stream, which a machine agent shares with the unit agents it runs.
	maxStreamSubscriptions = 50000
	// maxRefusals bounds the refusals waiting to be sent on one stream: a
	// client that sends bad requests without reading is cut off.
	maxRefusals = 1000
	// pollBatches is how many batches one subscription sends before the
	// others have their turn.
	pollBatches = 16
)

// WatchMany serves all of an agent's watch subjects on one stream. Each
// subscription is the stream's caller's, or the agent's whose credential
// it carries (WatchSubscribe.as: a machine agent carries its unit
// agents' subscriptions); its subject is authorized for that agent as
// Watch authorizes it, when subscribed, and is then served as Watch
// serves it (the same translation and progress rule), each response
// tagged with the subscription's id. A subscription
// refused or failing ends on its own, with a WatchEnd; bad requests (a
// negative revision, an id in use, an unknown id to unsubscribe) end the
// id they name with InvalidArgument. The stream ends when the client goes
// away, or with Unavailable when the controller stops.
//
// Two goroutines serve a stream, however many subscriptions it carries:
// one receives the client's requests and authorizes them; the handler's
// sends, reading the subscriptions' hub streams (watchhub's polled
// streams, which wake it when they have news). A client slow to read
// holds up only its own stream; meanwhile its subscriptions' hub streams
// queue, each up to the hub's bound, past which it lists again, and all
// of them up to the stream's and its credential's budgets (watchlimit.go),
// past which the stream is cut with ResourceExhausted. A credential may
// hold only so many watch streams at once.
func (a *agentServer) WatchMany(stream pb.AgentService_WatchManyServer) error {
	ctx := stream.Context()
	m := &watchMany{
		a: a, c: callerFrom(ctx), hub: a.s.cfg.Watches,
		wake: make(chan struct{}, 1),
		subs: map[int64]*subscription{}, held: map[caller]int{},
	}
	budget, end, err := a.s.watchers.open(m.c)
	if err != nil {
		return err
	}
	defer end() // after close, below: once its hub streams are closed
	m.budget = budget
	a.s.metrics.watchRPCs.Add(1)
	defer a.s.metrics.watchRPCs.Add(-1)
	// The receiver reads until the stream ends, which is after this
	// handler returns; it starts no subscription once closed is set.
	received := make(chan error, 1)
	go func() { received <- m.receive(ctx, stream) }()
	defer m.close()
	for {
		m.mu.Lock()
		ends, closing, ready, cutOff := m.ends, m.closing, m.ready, m.cutOff
		m.ends, m.closing, m.ready = nil, nil, nil
		for _, s := range ready {
			s.readied = false
		}
		m.mu.Unlock()
		if cutOff != nil {
			return cutOff
		}
		for _, s := range closing {
			s.hs.Close()
		}
		for _, end := range ends {
			if err := stream.Send(end); err != nil {
				return err
			}
		}
		m.listTogether(ctx, ready)
		for _, s := range ready {
			if err := m.poll(ctx, stream, s); err != nil {
				return err
			}
		}
		select {
		case <-m.wake:
		case err := <-received:
			if errors.Is(err, io.EOF) {
				return nil // the client is done
			}
			return err
		case <-m.hub.Done():
			return errHubStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchMany is one WatchMany stream.
type watchMany struct {
	a   *agentServer
	c   caller
	hub *watchhub.Hub
	// budget is what the stream's hub streams are charged to: past it,
	// the stream is cut (watchlimit.go).
	budget *watchhub.Budget
	// wake is signalled, without blocking, when the sender has work:
	// ends, subscriptions to close or to poll.
	wake chan struct{}

	mu   sync.Mutex
	subs map[int64]*subscription
	// held counts the live subscriptions of each agent.
	held map[caller]int
	// ready are the live subscriptions to poll; ends the refusals to send;
	// closing the subscriptions ended by the receiver, whose hub streams
	// the sender closes.
	ready   []*subscription
	ends    []*pb.WatchManyResponse
	closing []*subscription
	closed  bool
	// cutOff, once set, ends the stream.
	cutOff error
}

// subscription is one subject of a WatchMany stream. Its hub stream is
// the sender's alone once the subscription is live.
type subscription struct {
	id       int64
	c        caller
	w        *watch
	hs       *watchhub.Stream
	progress progressThrottle
	// live says the subscription is in subs (it is served); ended that it
	// ended (unsubscribed, refused, failed); readied that it is in ready.
	// Guarded by the stream's lock.
	live, ended, readied bool
}

func (m *watchMany) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// readyLocked puts s in line to be polled, once.
func (m *watchMany) readyLocked(s *subscription) {
	if s.live && !s.ended && !s.readied {
		s.readied = true
		m.ready = append(m.ready, s)
	}
}

// close ends every subscription, when the handler returns.
func (m *watchMany) close() {
	m.mu.Lock()
	m.closed = true
	closing := m.closing
	for _, s := range m.subs {
		closing = append(closing, s)
	}
	m.subs, m.ready, m.closing = nil, nil, nil
	m.mu.Unlock()
	for _, s := range closing {
		s.hs.Close()
	}
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
			m.unsubscribe(r.Unsubscribe.GetId())
		default:
			m.refuse(0, invalid("watch request with neither subscribe nor unsubscribe"))
		}
	}
}

func (m *watchMany) subscribe(ctx context.Context, req *pb.WatchSubscribe) {
	id, after := req.GetId(), req.GetAfterRevision()
	if after < 0 {
		m.refuse(id, invalid("invalid revision %d to resume after: want 0 or a revision received earlier", after))
		return
	}
	m.mu.Lock()
	if old, ok := m.subs[id]; ok {
		// The id's subscription ends too: an end means nothing more
		// comes for the id.
		m.endLocked(old)
		m.mu.Unlock()
		m.refuse(id, invalid("subscription %d is in use: subscribe under an id not used before", id))
		return
	}
	m.mu.Unlock()
	c, err := m.callerOf(ctx, req)
	if err != nil {
		m.refuse(id, err)
		return
	}
	m.mu.Lock()
	held, total := m.held[c], len(m.subs)
	m.mu.Unlock()
	switch {
	case held >= maxSubscriptions:
		m.refuse(id, status.Errorf(codes.ResourceExhausted, "%s has %d watch subscriptions on this stream, the most allowed", c, maxSubscriptions))
		return
	case total >= maxStreamSubscriptions:
		m.refuse(id, status.Errorf(codes.ResourceExhausted, "this watch stream carries %d subscriptions, the most allowed", maxStreamSubscriptions))
		return
	}
	w, err := m.a.watchOf(ctx, c, req.GetSubject())
	if err != nil {
		m.refuse(id, err)
		return
	}
	s := &subscription{id: id, c: c, w: w}
	wake := func() {
		m.mu.Lock()
		m.readyLocked(s)
		m.mu.Unlock()
		m.signal()
	}
	if w.key != "" {
		s.hs, err = m.budget.Polled(ctx, w.key, false, after, wake)
	} else {
		s.hs, err = m.budget.Polled(ctx, w.prefix, true, after, wake)
	}
	if err != nil {
		m.refuse(id, watchErr(ctx, err))
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.hs.Close()
		return
	}
	m.subs[id] = s
	m.held[c]++
	s.live = true
	m.readyLocked(s) // to list, or to resume
	m.mu.Unlock()
	m.signal()
}

// callerOf says whose subscription req is: the stream's caller's, or
// that of the agent whose credential it carries.
func (m *watchMany) callerOf(ctx context.Context, req *pb.WatchSubscribe) (caller, error) {
	as := req.GetAs()
	if as == nil {
		return m.c, nil
	}
	c, err := m.a.s.verify(ctx, pki.Credential{Tag: as.GetTag(), Secret: as.GetSecret()})
	if err != nil {
		return caller{}, err
	}
	if !admits(c.kind, pb.AgentService_WatchMany_FullMethodName) {
		return caller{}, denied("%s may not watch as an agent", c)
	}
	return c, nil
}

func (m *watchMany) unsubscribe(id int64) {
	m.mu.Lock()
	s, ok := m.subs[id]
	if ok {
		m.endLocked(s)
	}
	m.mu.Unlock()
	if !ok {
		m.refuse(id, invalid("no subscription %d to unsubscribe from", id))
	}
	m.signal()
}

// endLocked ends a live subscription: the sender sends nothing more for
// it and closes its hub stream.
func (m *watchMany) endLocked(s *subscription) {
	s.ended = true
	delete(m.subs, s.id)
	if m.held[s.c]--; m.held[s.c] <= 0 {
		delete(m.held, s.c)
	}
	m.closing = append(m.closing, s)
}

// refuse has the sender end id with err. A client that does not read its
// refusals is cut off.
func (m *watchMany) refuse(id int64, err error) {
	m.mu.Lock()
	if len(m.ends) < maxRefusals {
		m.ends = append(m.ends, endOf(id, err))
	} else {
		m.cutOff = status.Errorf(codes.ResourceExhausted, "%s sent %d refused watch requests without reading their refusals", m.c, len(m.ends))
	}
	m.mu.Unlock()
	m.signal()
}

func endOf(id int64, err error) *pb.WatchManyResponse {
	st := status.Convert(toStatus(err))
	return &pb.WatchManyResponse{Id: id, Response: &pb.WatchManyResponse_End{End: &pb.WatchEnd{Code: int32(st.Code()), Message: st.Message()}}}
}

// poll sends what s's hub stream has, as Watch would: up to pollBatches
// batches, and then puts s back in line. An error it returns ends the
// stream.
func (m *watchMany) poll(ctx context.Context, stream pb.AgentService_WatchManyServer, s *subscription) error {
	for range pollBatches {
		m.mu.Lock()
		ended := s.ended
		m.mu.Unlock()
		if ended {
			return nil
		}
		b, ok, err := s.hs.TryNext(ctx)
		if err != nil {
			if errors.Is(err, watchhub.ErrClosed) {
				return errHubStopped
			}
			if errors.Is(err, watchhub.ErrCut) {
				return watchErr(ctx, err) // the whole stream
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return m.fail(stream, s, watchErr(ctx, err))
		}
		if !ok {
			return nil
		}
		resp, err := s.w.translate(ctx, b)
		if err != nil {
			return m.fail(stream, s, err)
		}
		if s.progress.hold(resp, m.hub.Mark()) {
			continue
		}
		if err := stream.Send(&pb.WatchManyResponse{Id: s.id, Response: &pb.WatchManyResponse_Watch{Watch: resp}}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.readyLocked(s)
	m.mu.Unlock()
	m.signal()
	return nil
}

// listTogether reads at once the listings the subscriptions about to be
// polled need (new ones, and those reset): an agent starting subscribes
// to eight subjects or more, a machine agent for its units too, in one
// burst.
func (m *watchMany) listTogether(ctx context.Context, ready []*subscription) {
	if len(ready) < 2 {
		return
	}
	streams := make([]*watchhub.Stream, 0, len(ready))
	m.mu.Lock()
	for _, s := range ready {
		if !s.ended {
			streams = append(streams, s.hs)
		}
	}
	m.mu.Unlock()
	m.hub.List(ctx, streams)
}

// fail ends s alone after err, telling the client.
func (m *watchMany) fail(stream pb.AgentService_WatchManyServer, s *subscription, err error) error {
	m.mu.Lock()
	ended := s.ended
	if !ended {
		m.endLocked(s)
	}
	m.mu.Unlock()
	m.signal()
	if ended {
		return nil // unsubscribed meanwhile
	}
	return stream.Send(endOf(s.id, err))
}
