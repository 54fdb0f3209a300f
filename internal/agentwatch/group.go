package agentwatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Grouper is a Follower that can also follow subjects in a Group: a Mux,
// or a Mux followed as another agent (ForAgent).
type Grouper interface {
	Follower
	NewGroup() *Group
}

// Group follows one agent's subjects on a Mux's stream, applying all of
// their responses in the one goroutine that calls Run, where each Follow
// takes a goroutine of its own while it lasts. A unit agent follows seven
// subjects or more: at 10,000 units on a host, the goroutines' stacks
// alone, each grown as its Follow first ran, were a tenth of the agents'
// CPU deploying, on the scale harness. Should the
// controller lack WatchMany, each subject is followed on a stream of its
// own, in a goroutine of its own, and its applies still never overlap
// another's.
//
// Each subject's responses are applied in order, with the contract of
// Follow: a subject is followed until its context ends, through every
// interruption. Responses of different subjects come in no set order.
type Group struct {
	m   *Mux
	as  Credential
	api Watcher
	// wake is shared by the Group's followers: any of them with
	// something to apply wakes Run.
	wake chan struct{}

	mu      sync.Mutex
	members []*groupMember
	// alone counts the Follows on streams of their own (no WatchMany).
	alone sync.WaitGroup
	// applying is held while a response is applied: by Run, and by the
	// Follows on streams of their own, each in its own goroutine, so
	// that no two of the Group's applies overlap either way.
	applying sync.Mutex
}

// groupMember is one subject's Follow in a Group. Run alone touches its
// fields but for f, which is the Mux's.
type groupMember struct {
	ctx     context.Context
	subject *pb.WatchSubject
	apply   func(*pb.WatchResponse)
	logger  hclog.Logger
	f       *muxFollower
	bo      *backoff.ExponentialBackOff
	// pause, when set, subscribes again after the controller ended the
	// subscription.
	pause *time.Timer
}

// NewGroup returns a Group following as the Mux's own agent.
func (m *Mux) NewGroup() *Group { return m.newGroup(nil, m.api) }

// NewGroup returns a Group following as the agent f follows as.
func (f agentFollower) NewGroup() *Group { return f.m.newGroup(f.as, f.api) }

func (m *Mux) newGroup(as Credential, api Watcher) *Group {
	return &Group{m: m, as: as, api: api, wake: make(chan struct{}, 1)}
}

// Start follows subject until ctx ends, its responses applied by Run. It
// returns at once. Should the controller lack WatchMany, the subject is
// followed on a stream of its own, in a goroutine of its own (Follow).
func (g *Group) Start(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse), logger hclog.Logger) {
	f := newFollower(g.as, g.api, g.wake)
	if !g.m.add(f, subject) {
		g.followAlone(ctx, subject, 0, apply, logger)
		return
	}
	mb := &groupMember{ctx: ctx, subject: subject, apply: apply, logger: logger, f: f,
		bo: backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))}
	g.mu.Lock()
	g.members = append(g.members, mb)
	g.mu.Unlock()
	// add may have queued something for f already (a late joiner's
	// listing, or a first response quick to come) and woken a Run that
	// did not find mb among the members yet. Run is woken again, or what
	// is queued would wait for the Group's next news: for a unit agent in
	// an error state, whose resolved mark is all it follows that changes,
	// for ever. Anything queued after this look wakes a Run that finds mb.
	g.m.mu.Lock()
	pending := len(f.queue) > 0 || f.ended != nil
	g.m.mu.Unlock()
	if pending {
		g.notify()
	}
	context.AfterFunc(ctx, func() {
		g.m.remove(f)
		g.notify()
	})
}

// followAlone follows subject on a stream of its own, in a goroutine Run
// waits for.
func (g *Group) followAlone(ctx context.Context, subject *pb.WatchSubject, after int64, apply func(*pb.WatchResponse), logger hclog.Logger) {
	g.alone.Add(1)
	go func() {
		defer g.alone.Done()
		follow(ctx, g.api, subject, after, func(resp *pb.WatchResponse) {
			g.applying.Lock()
			defer g.applying.Unlock()
			apply(resp)
		}, logger)
	}()
}

func (g *Group) notify() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Run applies the Group's responses until ctx ends, then ends every
// subject's Follow; none is applied after it returns. The contexts given
// to Start must end when ctx does (be made from it).
func (g *Group) Run(ctx context.Context) {
	defer g.alone.Wait()
	defer func() {
		g.mu.Lock()
		members := g.members
		g.members = nil
		g.mu.Unlock()
		for _, mb := range members {
			g.m.remove(mb.f)
			if mb.pause != nil {
				mb.pause.Stop()
			}
		}
	}()
	for {
		select {
		case <-g.wake:
		case <-ctx.Done():
			return
		}
		g.mu.Lock()
		members := g.members
		g.mu.Unlock()
		var gone []*groupMember
		for _, mb := range members {
			if ctx.Err() != nil {
				return
			}
			if !g.serve(mb) {
				gone = append(gone, mb)
			}
		}
		if len(gone) > 0 {
			g.mu.Lock()
			keep := g.members[:0]
			for _, mb := range g.members {
				if !contains(gone, mb) {
					keep = append(keep, mb)
				}
			}
			clear(g.members[len(keep):])
			g.members = keep
			g.mu.Unlock()
		}
	}
}

func contains(list []*groupMember, mb *groupMember) bool {
	for _, x := range list {
		if x == mb {
			return true
		}
	}
	return false
}

// serve applies what mb's Follow has waiting, as Mux.follow's loop does,
// and says whether mb stays in the Group.
func (g *Group) serve(mb *groupMember) bool {
	if mb.ctx.Err() != nil {
		if mb.pause != nil {
			mb.pause.Stop()
		}
		return false
	}
	m, f := g.m, mb.f
	m.mu.Lock()
	queue, ended, after := f.queue, f.ended, f.sub.after
	f.queue, f.ended = nil, nil
	m.mu.Unlock()
	for _, resp := range queue {
		if mb.ctx.Err() != nil {
			return false
		}
		mb.bo.Reset()
		g.applying.Lock()
		mb.apply(resp)
		g.applying.Unlock()
	}
	if ended == nil {
		return true
	}
	if errors.Is(ended, errUnimplemented) {
		m.remove(f)
		g.followAlone(mb.ctx, mb.subject, after, mb.apply, mb.logger)
		return false
	}
	switch status.Code(ended) {
	case codes.PermissionDenied, codes.NotFound, codes.InvalidArgument, codes.Unauthenticated:
		mb.logger.Warn("watch refused", "subject", mb.subject.String(), "error", ended)
	default:
		mb.logger.Debug("watch interrupted; resuming", "subject", mb.subject.String(), "after", after, "error", ended)
	}
	if mb.pause != nil {
		mb.pause.Stop()
	}
	mb.pause = time.AfterFunc(mb.bo.NextBackOff(), func() { m.resubscribe(f) })
	return true
}
