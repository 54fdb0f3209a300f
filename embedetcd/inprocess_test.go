package embedetcd_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/embedetcd"
)

// TestInProcessWatchersDoNotShareEvents runs several namespaced watches of
// the same keys over the in-process client. etcd hands every watcher of a
// key the same event in memory; the namespace wrapper strips its prefix
// from the event's key in place, so without a copy each watcher after the
// first would see a key stripped twice (and the race detector a race).
func TestInProcessWatchersDoNotShareEvents(t *testing.T) {
	dir, err := os.MkdirTemp("", "ll-embed-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := embedetcd.Start(embedetcd.Config{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
