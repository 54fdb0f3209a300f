package agentwatch

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ManyWatcher is what a Mux needs: WatchMany, and Watch for a controller
// that lacks WatchMany.
type ManyWatcher interface {
	Watcher
	WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error)
}

// Follower follows watch subjects, each with the contract of the
// package's Follow: a Mux, or a Mux followed as another agent (As).
type Follower interface {
	Follow(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse), logger hclog.Logger)
}

// Mux follows watch subjects on one WatchMany stream, so that the
// controller holds one stream rather than one a subject. An agent makes
// one, from its own AgentService client, and calls Follow for each of
// its subjects. Other agents can share the stream: a machine agent hands
// each unit agent it runs As, which follows subjects as that unit, whose
// credential each of its subscriptions carries.
//
// The stream is opened by the first Follow and closed when the last one
// returns; when it breaks it is opened again, backing off to 5 s, and
// every subscription resumes after the last revision it received. A
// controller that does not know WatchMany (Unimplemented) is watched a
// stream a subject, as Follow does.
type Mux struct {
	api    ManyWatcher
	logger hclog.Logger

	mu      sync.Mutex
	subs    map[*muxSub]struct{}
	byID    map[int64]*muxSub // the subscriptions live on the current stream
	nextID  int64
	running bool // the stream's goroutine runs
	stream  *muxStream
	// stop ends the current stream's goroutine's attempt (the stream, or
	// its pause before the next): the last Follow returned.
	stop context.CancelFunc
	// unimplemented says the controller lacks WatchMany.
	unimplemented bool
}

// NewMux returns a Mux watching through api; logger takes what concerns
// the stream as a whole.
func NewMux(api ManyWatcher, logger hclog.Logger) *Mux {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Mux{api: api, logger: logger, subs: map[*muxSub]struct{}{}, byID: map[int64]*muxSub{}}
}

// muxSub is one Follow's subscription. Its fields are guarded by the Mux's
// lock.
type muxSub struct {
	subject *pb.WatchSubject
	// as is the credential of the agent the subscription is for, nil for
	// the Mux's own; api watches for that agent on a stream a subject,
	// should the controller lack WatchMany.
	as  *pb.AgentCredential
	api Watcher
	// after is the revision of the last response received: what the
	// subscription resumes after.
	after int64
	// id is the subscription's on the current stream, 0 when it has none.
	id int64
	// parked says the controller ended the subscription: it waits for its
	// Follow to subscribe again, after a pause.
	parked bool
	// queue holds the responses received, not yet applied; ended the
	// error the controller ended the subscription with, not yet seen.
	queue []*pb.WatchResponse
	ended error
	wake  chan struct{}
}

func (s *muxSub) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// errUnimplemented ends the subscriptions of a Mux whose controller lacks
// WatchMany.
var errUnimplemented = errors.New("the controller does not serve WatchMany")

// Follow has the contract of the package's Follow, on the Mux's stream:
// it delivers every response of the subject's watch to apply, in order,
// in the calling goroutine, until ctx ends. It never gives up: after the
// stream breaks it resumes after the last revision delivered; a subject
// the controller refuses is retried slowly (backing off to 5 s), and said
// so in the log. When ctx ends the subscription ends; apply is not called
// after Follow returns.
func (m *Mux) Follow(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse), logger hclog.Logger) {
	m.follow(ctx, subject, nil, m.api, apply, logger)
}

// As returns a Follower whose subjects are followed on the Mux's stream
// as the agent whose credential is cred: the controller authorizes and
// serves them for that agent. api is that agent's own client (calls made
// with cred), used only should the controller lack WatchMany.
func (m *Mux) As(cred pki.Credential, api Watcher) Follower {
	return muxAs{m: m, as: &pb.AgentCredential{Tag: cred.Tag, Secret: cred.Secret}, api: api}
}

type muxAs struct {
	m   *Mux
	as  *pb.AgentCredential
	api Watcher
}

func (f muxAs) Follow(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse), logger hclog.Logger) {
	f.m.follow(ctx, subject, f.as, f.api, apply, logger)
}

// follow is Follow as the agent whose credential is as (nil: the Mux's
// own), watching through api should the controller lack WatchMany.
func (m *Mux) follow(ctx context.Context, subject *pb.WatchSubject, as *pb.AgentCredential, api Watcher, apply func(*pb.WatchResponse), logger hclog.Logger) {
	s := &muxSub{subject: subject, as: as, api: api, wake: make(chan struct{}, 1)}
	if !m.add(s) {
		Follow(ctx, api, subject, apply, logger)
		return
	}
	defer m.remove(s)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return
		}
		m.mu.Lock()
		queue, ended, after := s.queue, s.ended, s.after
		s.queue, s.ended = nil, nil
		m.mu.Unlock()
		for _, resp := range queue {
			if ctx.Err() != nil {
				return
			}
			bo.Reset()
			apply(resp)
		}
		if ended == nil {
			continue
		}
		if errors.Is(ended, errUnimplemented) {
			m.remove(s)
			follow(ctx, s.api, subject, after, apply, logger)
			return
		}
		switch status.Code(ended) {
		case codes.PermissionDenied, codes.NotFound, codes.InvalidArgument, codes.Unauthenticated:
			logger.Warn("watch refused", "subject", subject.String(), "error", ended)
		default:
			logger.Debug("watch interrupted; resuming", "subject", subject.String(), "after", after, "error", ended)
		}
		if !sleep(ctx, bo.NextBackOff()) {
			return
		}
		m.resubscribe(s)
	}
}

// add registers s, subscribing it on the current stream, or starting the
// stream; false when the controller lacks WatchMany.
func (m *Mux) add(s *muxSub) bool {
	m.mu.Lock()
	if m.unimplemented {
		m.mu.Unlock()
		return false
	}
	m.subs[s] = struct{}{}
	if !m.running {
		m.running = true
		go m.run()
	}
	st, req := m.subscribeLocked(s)
	m.mu.Unlock()
	st.send(req)
	return true
}

// resubscribe subscribes s again after the controller ended it.
func (m *Mux) resubscribe(s *muxSub) {
	m.mu.Lock()
	s.parked = false
	st, req := m.subscribeLocked(s)
	m.mu.Unlock()
	st.send(req)
}

// subscribeLocked gives s an id on the current stream, if one is open,
// and returns the request to send on it (nil stream and request if none).
func (m *Mux) subscribeLocked(s *muxSub) (*muxStream, *pb.WatchManyRequest) {
	if m.stream == nil || s.parked || s.id != 0 {
		return nil, nil
	}
	m.nextID++
	s.id = m.nextID
	m.byID[s.id] = s
	return m.stream, &pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{
		Id: s.id, Subject: s.subject, AfterRevision: s.after, As: s.as,
	}}}
}

// remove unregisters s, unsubscribing it, and ends the stream when no
// subscription is left.
func (m *Mux) remove(s *muxSub) {
	m.mu.Lock()
	if _, ok := m.subs[s]; !ok {
		m.mu.Unlock()
		return
	}
	delete(m.subs, s)
	var st *muxStream
	var req *pb.WatchManyRequest
	if s.id != 0 {
		delete(m.byID, s.id)
		st, req = m.stream, &pb.WatchManyRequest{Request: &pb.WatchManyRequest_Unsubscribe{Unsubscribe: &pb.WatchUnsubscribe{Id: s.id}}}
		s.id = 0
	}
	if len(m.subs) == 0 && m.stop != nil {
		m.stop()
		st = nil
	}
	m.mu.Unlock()
	st.send(req)
}

// run keeps a stream open while there are subscriptions.
func (m *Mux) run() {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		m.mu.Lock()
		if len(m.subs) == 0 {
			m.running, m.stop = false, nil
			m.mu.Unlock()
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		m.stop = cancel
		m.mu.Unlock()
		err := m.serve(ctx, bo)
		m.mu.Lock()
		m.stream = nil
		m.byID = map[int64]*muxSub{}
		for s := range m.subs {
			s.id = 0
		}
		unimplemented := status.Code(err) == codes.Unimplemented
		if unimplemented {
			// Each Follow goes on a stream a subject.
			m.unimplemented = true
			for s := range m.subs {
				s.ended = errUnimplemented
				s.notify()
			}
		}
		m.mu.Unlock()
		if ctx.Err() == nil && !unimplemented {
			switch status.Code(err) {
			case codes.PermissionDenied, codes.Unauthenticated:
				m.logger.Warn("watch stream refused", "error", err)
			default:
				if !errors.Is(err, io.EOF) {
					m.logger.Debug("watch stream interrupted; resuming", "error", err)
				}
			}
			sleep(ctx, bo.NextBackOff())
		}
		cancel()
	}
}

// serve opens a stream, subscribes every subscription on it, and hands
// out what it receives until it breaks or ctx ends.
func (m *Mux) serve(ctx context.Context, bo backoff.BackOff) error {
	stream, err := m.api.WatchMany(ctx)
	if err != nil {
		return err
	}
	st := newMuxStream(ctx, stream)
	m.mu.Lock()
	m.stream = st
	var reqs []*pb.WatchManyRequest
	for s := range m.subs {
		if _, req := m.subscribeLocked(s); req != nil {
			reqs = append(reqs, req)
		}
	}
	m.mu.Unlock()
	for _, req := range reqs {
		st.send(req)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		bo.Reset()
		m.mu.Lock()
		s := m.byID[resp.GetId()]
		if s == nil {
			// Unsubscribed: a response on its way, or the end the
			// controller sends for an id it does not know.
			m.mu.Unlock()
			continue
		}
		switch r := resp.GetResponse().(type) {
		case *pb.WatchManyResponse_Watch:
			s.after = r.Watch.GetRevision()
			s.queue = append(s.queue, r.Watch)
		case *pb.WatchManyResponse_End:
			delete(m.byID, s.id)
			s.id, s.parked = 0, true
			s.ended = status.Error(codes.Code(r.End.GetCode()), r.End.GetMessage())
		}
		m.mu.Unlock()
		s.notify()
	}
}

// muxStream is an open WatchMany stream. Its requests are sent in order
// by a goroutine of its own (sender), not by the Follow that made them: a
// Follow never waits on the stream's flow control or on another's send,
// and ends when its context does. The sends run on one goroutine's stack,
// grown once, rather than on each new Follow's, grown afresh for its
// subscription: that growing was 8% of the agents' CPU deploying 10,000
// units without hooks (docs/PERFORMANCE.md, twelfth round).
type muxStream struct {
	stream grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	mu     sync.Mutex
	queue  []*pb.WatchManyRequest
	wake   chan struct{}
}

// newMuxStream starts stream's sender, which ends with ctx, the stream's.
func newMuxStream(ctx context.Context, stream grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]) *muxStream {
	st := &muxStream{stream: stream, wake: make(chan struct{}, 1)}
	go st.sender(ctx)
	return st
}

// send queues req for sending, if both are there. A failed send is not
// reported: the stream is broken, its receiver learns why, and the Mux
// subscribes everything again on the next.
func (st *muxStream) send(req *pb.WatchManyRequest) {
	if st == nil || req == nil {
		return
	}
	st.mu.Lock()
	st.queue = append(st.queue, req)
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// sender sends the queued requests in order until ctx ends or a send
// fails.
func (st *muxStream) sender(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.wake:
		}
		st.mu.Lock()
		queue := st.queue
		st.queue = nil
		st.mu.Unlock()
		for _, req := range queue {
			if err := st.stream.Send(req); err != nil {
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
