package embedetcd_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/embedetcd"
)

// startMember starts a member for the test and returns its client; both
// end with the test.
func startMember(t *testing.T) *clientv3.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-embed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := embedetcd.Start(embedetcd.Config{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestInProcessWatchersDoNotShareEvents runs several namespaced watches of
// the same keys over the member's client. In process, etcd hands every
// watcher of a key the same event in memory; the namespace wrapper strips
// its prefix from the event's key in place, so each watcher after the first
// would see a key stripped twice (and the race detector a race).
func TestInProcessWatchersDoNotShareEvents(t *testing.T) {
	c := startMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const watchers, keys = 4, 50
	w := namespace.NewWatcher(c.Watcher, "/ns/")
	chans := make([]clientv3.WatchChan, watchers)
	for i := range chans {
		chans[i] = w.Watch(ctx, "k/", clientv3.WithPrefix())
	}
	// Each watch is registered once it has seen a put made after it.
	kv := namespace.NewKV(c.KV, "/ns/")
	for i := 0; i < keys; i++ {
		if _, err := kv.Put(ctx, fmt.Sprintf("k/%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	for n, ch := range chans {
		seen := 0
		for seen < keys {
			resp, ok := <-ch
			if !ok {
				t.Fatalf("watch %d closed after %d events: %v", n, seen, ctx.Err())
			}
			for _, ev := range resp.Events {
				if want := fmt.Sprintf("k/%02d", seen); string(ev.Kv.Key) != want {
					t.Fatalf("watch %d: event %d for key %q, want %q", n, seen, ev.Kv.Key, want)
				}
				seen++
			}
		}
	}
}

// TestInProcessClientSurvivesTheServerStopping checks that calls on the
// in-process client end with an error, not a hang, once the member stops.
func TestInProcessClientSurvivesTheServerStopping(t *testing.T) {
	dir, err := os.MkdirTemp("", "ll-embed-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := embedetcd.Start(embedetcd.Config{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := c.Put(ctx, "k", "w"); err == nil {
		t.Fatal("a put after the member stopped succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("the put after the member stopped waited for its context")
	}
}

// TestInProcessClientWatchesChurn opens and cancels many watches that
// catch up on history while writes go on, as the watch hub's fallbacks do.
// etcd's in-process watch adapter joins client and server with unbuffered
// channels: a watch request the client sends while the server is sending
// it events can block both sides for good (seen at 10,000 units: the hub's
// watch stopped and no machine heard it was dying). The client's watches
// therefore go through the socket.
func TestInProcessClientWatchesChurn(t *testing.T) {
	c := startMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const history = 200
	for i := 0; i < history; i++ {
		if _, err := c.Put(ctx, fmt.Sprintf("k/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c.Put(ctx, fmt.Sprintf("k/w%d", i%100), "v")
		}
	}()
	defer func() { close(stop); <-writerDone }()
	// One watch that lives throughout, as the hub's does.
	main := c.Watch(ctx, "k/", clientv3.WithPrefix())
	go func() {
		for range main {
		}
	}()
	for round := 0; round < 20; round++ {
		done := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 50; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, wcancel := context.WithCancel(ctx)
				defer wcancel()
				seen := 0
				for resp := range c.Watch(wctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
					seen += len(resp.Events)
					if seen >= history {
						return
					}
				}
			}()
		}
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			// Stuck for good: the deferred closes may not return either.
			panic(fmt.Sprintf("round %d: watches still waiting for their history after 60 s", round))
		}
	}
}
