package leader_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/leader"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// candidate runs one candidate on its own client, counting the terms in
// which it leads, until stop.
type candidate struct {
	id      string
	client  *clientv3.Client
	leading atomic.Bool
	terms   atomic.Int32
	cancel  context.CancelFunc
	done    chan struct{}
}

func startCandidate(t *testing.T, client *clientv3.Client, election, id string, others *atomic.Int32) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{id: id, client: client, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		leader.Run(ctx, leader.Config{Client: client, Election: election, ID: id, TTL: 2 * time.Second}, func(ctx context.Context) error {
			if n := others.Add(1); n > 1 {
				t.Errorf("%s elected while %d others lead", id, n-1)
			}
			c.leading.Store(true)
			c.terms.Add(1)
			<-ctx.Done()
			c.leading.Store(false)
			others.Add(-1)
			return nil
		})
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *candidate) stop() {
	c.cancel()
	<-c.done
}

// waitLeader waits until one of cs leads, and returns it.
func waitLeader(t *testing.T, cs ...*candidate) *candidate {
	t.Helper()
	var leading *candidate
	poll.Until(t, fmt.Sprintf("a leader among %d candidates", len(cs)), func() bool {
		for _, c := range cs {
			if c.leading.Load() {
				leading = c
				return true
			}
		}
		return false
	})
	return leading
}

// waitCandidacies waits until the election holds n candidacies, the
// values of its keys, and returns them.
func waitCandidacies(t *testing.T, c *clientv3.Client, election string, n int) []string {
	t.Helper()
	var ids []string
	poll.UntilSays(t, fmt.Sprintf("%d candidacies in the election", n), func() (bool, string) {
		resp, err := c.Get(etcdtest.Context(t), election+"/", clientv3.WithPrefix())
		if err != nil {
			return false, err.Error()
		}
		ids = ids[:0]
		for _, kv := range resp.Kvs {
			ids = append(ids, string(kv.Value))
		}
		return len(ids) == n, fmt.Sprintf("candidacies %q", ids)
	})
	return ids
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := etcdtest.Server(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// One of several candidates leads; when it stops it resigns, so another
// takes over without waiting for the TTL, and Leader names whoever leads.
func TestOneLeaderAndHandover(t *testing.T) {
	election := etcdtest.Namespace(t) + "workers"
	var leading atomic.Int32
	var cs []*candidate
	for _, id := range []string{"a", "b", "c"} {
		cs = append(cs, startCandidate(t, etcdtest.Client(t), election, id, &leading))
	}
	first := waitLeader(t, cs...)
	ctx := etcdtest.Context(t)
	if id, err := leader.Leader(ctx, etcdtest.Client(t), election); err != nil || id != first.id {
		t.Fatalf("Leader = %q, %v; want %q", id, err, first.id)
	}
	var rest []*candidate
	for _, c := range cs {
		if c != first {
			rest = append(rest, c)
		}
	}
	first.stop()
	// Stopped, it has left the election (not waiting for its lease to
	// lapse): the next candidate in line is the leader already.
	if id, err := leader.Leader(ctx, etcdtest.Client(t), election); err != nil || id == first.id || id == "" {
		t.Errorf("Leader after %s stopped = %q, %v; want one of the others at once", first.id, id, err)
	}
	next := waitLeader(t, rest...)
	t.Logf("%s took over from %s", next.id, first.id)
}

// A leader whose process dies (its client gone without resigning) is
// replaced once its lease expires.
func TestTakeoverAfterCrash(t *testing.T) {
	election := etcdtest.Namespace(t) + "workers"
	var leading atomic.Int32
	crashing := newClient(t)
	a := startCandidate(t, crashing, election, "a", &leading)
	waitLeader(t, a)
	b := startCandidate(t, etcdtest.Client(t), election, "b", &leading)
	// b stands behind a: its candidacy is in the election, a leads.
	waitCandidacies(t, etcdtest.Client(t), election, 2)
	if id, err := leader.Leader(etcdtest.Context(t), etcdtest.Client(t), election); err != nil || id != "a" {
		t.Fatalf("Leader with b's candidacy in = %q, %v; want a", id, err)
	}
	if b.leading.Load() {
		t.Fatal("b leads while a does")
	}
	// The crash: a's connection to etcd goes, its lease is not revoked;
	// b leads once it lapses.
	crashing.Close()
	waitLeader(t, b)
}

// A candidate started again under the ID of one that crashed (a controller
// restarted) takes the crashed run's candidacy out of the election at
// once, rather than wait for its lease to lapse; another ID's candidacy,
// older, it leaves alone, and leads once that one goes.
func TestRestartEndsTheCrashedRunsCandidacy(t *testing.T) {
	election := etcdtest.Namespace(t) + "workers"
	ctx := etcdtest.Context(t)
	c := etcdtest.Client(t)
	// Candidacies as crashes leave them: keys under leases a minute long.
	candidacy := func(id string) clientv3.LeaseID {
		t.Helper()
		lease, err := c.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, fmt.Sprintf("%s/%x", election, lease.ID), id, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		return lease.ID
	}
	other := candidacy("b")
	mine := candidacy("a")
	var leading atomic.Int32
	a := startCandidate(t, c, election, "a", &leading)
	// a's crashed run's candidacy goes, its new one stands behind b's.
	poll.UntilSays(t, "a's crashed run's lease revoked", func() (bool, string) {
		ttl, err := c.TimeToLive(ctx, mine)
		if err != nil {
			return false, err.Error()
		}
		return ttl.TTL <= 0, fmt.Sprintf("TTL %d", ttl.TTL)
	})
	waitCandidacies(t, c, election, 2)
	if id, err := leader.Leader(ctx, c, election); err != nil || id != "b" {
		t.Fatalf("Leader with a's new candidacy in = %q, %v; want b", id, err)
	}
	if a.leading.Load() {
		t.Fatal("a leads while b's older candidacy stands")
	}
	if ttl, err := c.TimeToLive(ctx, other); err != nil || ttl.TTL <= 0 {
		t.Fatalf("b's lease: %v, %v; want it left alone", ttl, err)
	}
	if _, err := c.Revoke(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, a)
}

// Candidates coming and going at random never lead two at a time.
func TestNeverTwoLeaders(t *testing.T) {
	election := etcdtest.Namespace(t) + "workers"
	var leading atomic.Int32
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 5 {
				c := startCandidate(t, etcdtest.Client(t), election, string(rune('a'+i))+string(rune('0'+j)), &leading)
				time.Sleep(time.Duration(50+i*30) * time.Millisecond)
				c.stop()
			}
		}()
	}
	wg.Wait()
}
