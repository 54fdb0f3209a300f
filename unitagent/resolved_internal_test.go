package unitagent

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// subjectsFollower records the subjects followed and the apply of each
// Follow still running.
type subjectsFollower struct {
	mu      sync.Mutex
	started []string
	running map[string]func(*pb.WatchResponse)
}

func (f *subjectsFollower) Follow(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse), _ hclog.Logger) {
	key := subject.String()
	f.mu.Lock()
	f.started = append(f.started, key)
	f.running[key] = apply
	f.mu.Unlock()
	<-ctx.Done()
	f.mu.Lock()
	delete(f.running, key)
	f.mu.Unlock()
}

func (f *subjectsFollower) apply(t *testing.T, subject *pb.WatchSubject) func(*pb.WatchResponse) {
	t.Helper()
	var apply func(*pb.WatchResponse)
	poll.Until(t, fmt.Sprintf("%v followed", subject), func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		apply = f.running[subject.String()]
		return apply != nil
	})
	return apply
}

// TestResolvedMarkWatchedOnlyInError: the agent follows its unit's
// resolved mark only while it needs it, in an error state; stopped, the
// watch forgets the mark, and a response late on its way is not applied.
func TestResolvedMarkWatchedOnlyInError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &subjectsFollower{running: map[string]func(*pb.WatchResponse){}}
	w := newWatcher(ctx, f, "kv/0", hclog.NewNullLogger())
	t.Cleanup(func() { cancel(); w.wait() })
	resolved := &pb.WatchSubject{Subject: &pb.WatchSubject_Resolved{Resolved: "kv/0"}}
	f.apply(t, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}})
	w.watchResolved(false)
	f.mu.Lock()
	for _, s := range f.started {
		if s == resolved.String() {
			t.Errorf("the resolved mark is followed before any error: %v", f.started)
		}
	}
	f.mu.Unlock()

	w.watchResolved(true)
	apply := f.apply(t, resolved)
	apply(&pb.WatchResponse{Revision: 5, Relisted: true, Changes: []*pb.WatchChange{
		{Id: "kv/0", Version: 5, Value: &pb.WatchChange_Resolved{Resolved: &pb.Resolved{Mode: pb.ResolvedMode_RESOLVED_MODE_RETRY}}},
	}})
	if got := w.snapshot().resolved; got != pb.ResolvedMode_RESOLVED_MODE_RETRY {
		t.Fatalf("resolved %v after the mark's listing, want RETRY", got)
	}
	w.watchResolved(true) // already followed: nothing new
	w.watchResolved(false)
	if got := w.snapshot().resolved; got != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
		t.Errorf("resolved %v once the watch stopped, want none", got)
	}
	// A response on its way when the watch stopped changes nothing.
	apply(&pb.WatchResponse{Revision: 6, Changes: []*pb.WatchChange{
		{Id: "kv/0", Version: 6, Value: &pb.WatchChange_Resolved{Resolved: &pb.Resolved{Mode: pb.ResolvedMode_RESOLVED_MODE_NO_RETRY}}},
	}})
	if got := w.snapshot().resolved; got != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
		t.Errorf("resolved %v from a response after the watch stopped, want none", got)
	}
	f.mu.Lock()
	n := 0
	for _, s := range f.started {
		if s == resolved.String() {
			n++
		}
	}
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("the resolved mark was subscribed %d times, want 1", n)
	}
}
