package watchhub

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/state"
)

// runHub runs a hub on a State of a namespace of its own, its source what
// source makes of that State, until the test ends; it returns the test's
// context and a KV of the namespace.
func runHub(t *testing.T, source func(*state.State) Source) (context.Context, clientv3.KV, *Hub) {
	t.Helper()
	ns := etcdtest.Namespace(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	h, err := New(Config{Source: source(st)})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- h.Run(hctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx, namespace.NewKV(etcdtest.Client(t).KV, ns), h
}

// The hub's own watch losing changes to compaction cannot be arranged
// with a live etcd watch; this test hands the hub the Reset batch its
// source would send then.
func TestChangesLostToCompactionResetEveryStream(t *testing.T) {
	ctx, kv, h := runHub(t, func(st *state.State) Source { return st })

	if _, err := kv.Put(ctx, "k/1", "a"); err != nil {
		t.Fatal(err)
	}
	s, err := h.Watch(ctx, "k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if b, err := s.Next(ctx); err != nil || !b.Reset || len(b.Events) != 1 {
		t.Fatalf("first Next = %+v, %v; want a listing of k/1", b, err)
	}
	resp, err := kv.Put(ctx, "k/2", "b")
	if err != nil {
		t.Fatal(err)
	}
	for h.Stats().Revision < resp.Header.Revision {
		time.Sleep(time.Millisecond)
	}
	h.dispatch(state.WatchBatch{Revision: resp.Header.Revision, Reset: true})

	nctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	b, err := s.Next(nctx)
	if err != nil || !b.Reset || len(b.Events) != 2 || b.Revision < resp.Header.Revision {
		t.Fatalf("Next after the hub lost changes = %+v, %v; want a listing of k/1 and k/2 at or after %d", b, err, resp.Header.Revision)
	}
	if st := h.Stats(); st.RingEvents != 0 || st.Overflows != 1 {
		t.Errorf("stats = %+v, want an empty ring and the stream reset", st)
	}
	// A stream resuming from before the loss goes to etcd.
	s2, err := h.Watch(ctx, "k/", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st := h.Stats(); st.Fallbacks != 1 {
		t.Errorf("stats = %+v, want the stream resuming from before the loss to catch up from etcd", st)
	}
}

// staleSource answers its first stale ListMany calls as of the revision
// before the current one, without the change made at the current one: a
// read in the moment etcd has sent a write's change to its watchers and
// not yet made the write visible to reads.
type staleSource struct {
	*state.State
	stale int
	calls int
}

func (s *staleSource) ListMany(ctx context.Context, specs []state.ListSpec) ([][]state.Event, int64, error) {
	evs, at, err := s.State.ListMany(ctx, specs)
	s.calls++
	if err != nil || s.calls > s.stale {
		return evs, at, err
	}
	for i := range evs {
		var kept []state.Event
		for _, e := range evs[i] {
			if e.ModRevision < at {
				kept = append(kept, e)
			}
		}
		evs[i] = kept
	}
	return evs, at - 1, nil
}

// A listing read before the changes the hub had handed out were visible
// to reads is read again: the stream, registered after the hub handed out
// k/2, would otherwise never see it.
func TestListingReadBeforeHandedOutChangesIsReadAgain(t *testing.T) {
	ctx, kv, h := runHub(t, func(st *state.State) Source { return &staleSource{State: st, stale: 2} })

	if _, err := kv.Put(ctx, "k/1", "a"); err != nil {
		t.Fatal(err)
	}
	resp, err := kv.Put(ctx, "k/2", "b")
	if err != nil {
		t.Fatal(err)
	}
	for h.Stats().Revision < resp.Header.Revision {
		time.Sleep(time.Millisecond)
	}
	s, err := h.Watch(ctx, "k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Next(ctx)
	if err != nil || !b.Reset || len(b.Events) != 2 || b.Revision < resp.Header.Revision {
		t.Fatalf("first Next = %+v, %v; want a listing of k/1 and k/2 at or after %d", b, err, resp.Header.Revision)
	}
	if n := h.Stats().ListedAgain; n != 2 {
		t.Errorf("%d listings read again, want 2", n)
	}
}
