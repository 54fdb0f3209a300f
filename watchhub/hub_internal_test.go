package watchhub

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/etcdtest"
	"github.com/lifelinehq/lifeline/state"
)

// The hub's own watch losing changes to compaction cannot be arranged
// with a live etcd watch; this test hands the hub the Reset batch its
// source would send then.
func TestChangesLostToCompactionResetEveryStream(t *testing.T) {
	ns := etcdtest.Namespace(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	kv := namespace.NewKV(etcdtest.Client(t).KV, ns)
	ctx := etcdtest.Context(t)
	h, err := New(Config{Source: st})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- h.Run(hctx) }()
	defer func() { cancel(); <-done }()

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
