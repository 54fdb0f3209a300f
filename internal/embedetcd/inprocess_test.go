package embedetcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
)

// startServer starts a member for the test, in a short temporary path (its
// socket's path must stay short); it stops with the test, if not before.
func startServer(t *testing.T) *embedetcd.Server {
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
	return s
}

// startMember starts a member for the test and returns its in-process
// client; both end with the test.
func startMember(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := startServer(t).Client()
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
	s := startServer(t)
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
	ctx, cancel := context.WithCancel(context.Background())
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
		// A round takes well under a second on an idle machine; the
		// bound is for a loaded one with the race detector.
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			// Stuck for good: the deferred closes may not return either.
			panic(fmt.Sprintf("round %d: watches still waiting for their history after 2 minutes", round))
		}
	}
}

// TestInProcessReadsAnswerAsTheMemberDoes asks the in-process client,
// whose reads are served from the member's store directly, and a client
// over the socket the same reads, and wants the same answers: keys,
// values, revisions, counts, limits, the errors of compacted and future
// revisions, a read-only transaction's; and each writer reads its own
// writes at once, while others write.
func TestInProcessReadsAnswerAsTheMemberDoes(t *testing.T) {
	s := startServer(t)
	in, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{s.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var first int64
	for i := range 30 {
		resp, err := in.Put(ctx, fmt.Sprintf("k/%02d", i), fmt.Sprint("v", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = resp.Header.Revision
		}
	}
	if _, err := in.Delete(ctx, "k/07"); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Put(ctx, "k/03", "again"); err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		name string
		key  string
		opts []clientv3.OpOption
	}{
		{"a key", "k/03", nil},
		{"a missing key", "k/07", nil},
		{"a prefix", "k/", []clientv3.OpOption{clientv3.WithPrefix()}},
		{"a prefix with a limit", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(5)}},
		{"a limit the range does not reach", "k/2", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(50)}},
		{"keys only", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3)}},
		{"a count", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}},
		{"from a key on", "k/25", []clientv3.OpOption{clientv3.WithFromKey()}},
		{"at an old revision", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(first + 5)}},
		{"sorted, by etcd's own code", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(4)}},
		{"a future revision", "k/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(first + 1000)}},
	}
	same := func(name string, a, b *clientv3.GetResponse) {
		t.Helper()
		if a.Header.Revision != b.Header.Revision || a.More != b.More || a.Count != b.Count || len(a.Kvs) != len(b.Kvs) {
			t.Fatalf("%s: in process at %d (more %v, count %d, %d keys), over the socket at %d (more %v, count %d, %d keys)",
				name, a.Header.Revision, a.More, a.Count, len(a.Kvs), b.Header.Revision, b.More, b.Count, len(b.Kvs))
		}
		for i := range a.Kvs {
			if a.Kvs[i].String() != b.Kvs[i].String() {
				t.Fatalf("%s: key %d in process %v, over the socket %v", name, i, a.Kvs[i], b.Kvs[i])
			}
		}
	}
	for _, r := range reads {
		a, aerr := in.Get(ctx, r.key, r.opts...)
		b, berr := out.Get(ctx, r.key, r.opts...)
		if fmt.Sprint(aerr) != fmt.Sprint(berr) {
			t.Fatalf("%s: in process %v, over the socket %v", r.name, aerr, berr)
		}
		if aerr == nil {
			same(r.name, a, b)
		}
		// The same as the one read of a transaction that only reads.
		ta, aerr := in.Txn(ctx).Then(clientv3.OpGet(r.key, r.opts...), clientv3.OpGet("k/01")).Commit()
		tb, berr := out.Txn(ctx).Then(clientv3.OpGet(r.key, r.opts...), clientv3.OpGet("k/01")).Commit()
		if fmt.Sprint(aerr) != fmt.Sprint(berr) {
			t.Fatalf("%s in a transaction: in process %v, over the socket %v", r.name, aerr, berr)
		}
		if aerr == nil {
			for i := range ta.Responses {
				same(r.name+" in a transaction", (*clientv3.GetResponse)(ta.Responses[i].GetResponseRange()), (*clientv3.GetResponse)(tb.Responses[i].GetResponseRange()))
			}
		}
	}
	cond, err := in.Txn(ctx).If(clientv3.Compare(clientv3.Value("k/03"), "=", "again")).Then(clientv3.OpGet("k/04")).Else(clientv3.OpGet("k/05")).Commit()
	if err != nil || !cond.Succeeded || string(cond.Responses[0].GetResponseRange().Kvs[0].Value) != "v4" {
		t.Fatalf("a read with a condition = %v, %v; want k/04 read", cond, err)
	}

	if _, err := in.Compact(ctx, first+10); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Get(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(first+2)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("a read at a compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}

	// Each writer reads its own last write at once.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("w/%d", w)
			for i := range 200 {
				if _, err := in.Put(ctx, key, fmt.Sprint(i)); err != nil {
					t.Error(err)
					return
				}
				resp, err := in.Get(ctx, key)
				if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(i) {
					t.Errorf("%s read after its write of %d: %v, %v", key, i, resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()

	s.Close()
	if _, err := in.Get(ctx, "k/03"); err == nil {
		t.Fatal("a read after the member stopped succeeded")
	}
}
