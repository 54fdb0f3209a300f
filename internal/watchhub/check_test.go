package watchhub_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/state"
)

// reference records every change of a namespace through a raw etcd watch
// of its own, from a revision at which the namespace was empty: what the
// streams are checked against.
type reference struct {
	w clientv3.Watcher

	mu     sync.Mutex
	events []state.Event
	rev    int64 // every change up to rev is in events
	err    error
}

func record(t *testing.T, ns string, from int64) *reference {
	t.Helper()
	r := &reference{rev: from, w: namespace.NewWatcher(etcdtest.Client(t).Watcher, ns)}
	ctx, cancel := context.WithCancel(context.Background())
	wch := r.w.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithProgressNotify())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wch {
			r.mu.Lock()
			if err := resp.Err(); err != nil {
				r.err = err
			}
			for _, e := range resp.Events {
				ev := state.Event{Type: state.EventPut, Key: string(e.Kv.Key), Value: e.Kv.Value, CreateRevision: e.Kv.CreateRevision, ModRevision: e.Kv.ModRevision}
				if e.Type == clientv3.EventTypeDelete {
					ev.Type = state.EventDelete
				}
				r.events = append(r.events, ev)
				r.rev = ev.ModRevision
			}
			if resp.IsProgressNotify() && resp.Header.Revision > r.rev {
				r.rev = resp.Header.Revision
			}
			r.mu.Unlock()
		}
	}()
	// Not r.w.Close: that would close the shared client's watcher.
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// upTo waits until the reference has every change up to rev (asking etcd
// for progress, since the namespace may have none at rev), and returns the
// changes it has.
func (r *reference) upTo(rev int64) ([]state.Event, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		evs, at, err := r.events, r.rev, r.err
		r.mu.Unlock()
		switch {
		case err != nil:
			return nil, fmt.Errorf("reference watch: %w", err)
		case at >= rev:
			return evs, nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("reference watch did not reach revision %d in 30 s (at %d)", rev, at)
		}
		if err := r.w.RequestProgress(context.Background()); err != nil {
			return nil, fmt.Errorf("RequestProgress: %w", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checker checks one stream's batches against the reference: each Reset
// lists exactly the keys the stream covers at its revision, and between
// resets the stream brings exactly the changes after it, in order, each
// batch bringing every change up to its revision.
type checker struct {
	name   string
	match  func(key string) bool
	ref    *reference
	next   int // index in the reference of the next change to expect
	last   int64
	seen   map[string]state.Event
	resets int
	events int
}

func newChecker(name string, ref *reference, match func(string) bool) *checker {
	return &checker{name: name, ref: ref, match: match, seen: map[string]state.Event{}}
}

func prefixMatch(p string) func(string) bool {
	return func(k string) bool { return strings.HasPrefix(k, p) }
}
func keyMatch(key string) func(string) bool { return func(k string) bool { return k == key } }

func sameEvent(a, b state.Event) bool {
	return a.Type == b.Type && a.Key == b.Key && a.ModRevision == b.ModRevision && bytes.Equal(a.Value, b.Value) &&
		(a.Type == state.EventDelete || a.CreateRevision == b.CreateRevision)
}

// stateAt is what the keys the checker covers held at rev.
func (c *checker) stateAt(evs []state.Event, rev int64) map[string]state.Event {
	out := map[string]state.Event{}
	for _, e := range evs {
		if e.ModRevision > rev {
			break
		}
		if !c.match(e.Key) {
			continue
		}
		if e.Type == state.EventDelete {
			delete(out, e.Key)
		} else {
			out[e.Key] = e
		}
	}
	return out
}

// resumeAt sets the checker to expect the changes after rev.
func (c *checker) resumeAt(rev int64) error {
	evs, err := c.ref.upTo(rev)
	if err != nil {
		return err
	}
	c.seen = c.stateAt(evs, rev)
	c.next = 0
	for c.next < len(evs) && evs[c.next].ModRevision <= rev {
		c.next++
	}
	c.last = rev
	return nil
}

func (c *checker) observe(b state.WatchBatch) error {
	if b.Revision < c.last {
		return fmt.Errorf("%s: revision went back from %d to %d", c.name, c.last, b.Revision)
	}
	evs, err := c.ref.upTo(b.Revision)
	if err != nil {
		return err
	}
	if b.Reset {
		c.resets++
		want := c.stateAt(evs, b.Revision)
		if len(want) != len(b.Events) {
			return fmt.Errorf("%s: reset at %d lists %d keys, want %d", c.name, b.Revision, len(b.Events), len(want))
		}
		c.seen = map[string]state.Event{}
		for _, e := range b.Events {
			if w, ok := want[e.Key]; !ok || !sameEvent(e, w) {
				return fmt.Errorf("%s: reset at %d lists %+v, want %+v", c.name, b.Revision, e, w)
			}
			c.seen[e.Key] = e
		}
		c.next = 0
		for c.next < len(evs) && evs[c.next].ModRevision <= b.Revision {
			c.next++
		}
		c.last = b.Revision
		return nil
	}
	for _, e := range b.Events {
		for c.next < len(evs) && !c.match(evs[c.next].Key) {
			c.next++
		}
		if c.next >= len(evs) {
			return fmt.Errorf("%s: change %+v (batch at %d) that the reference does not have", c.name, e, b.Revision)
		}
		if want := evs[c.next]; !sameEvent(e, want) {
			return fmt.Errorf("%s: change %s %s@%d, want %s %s@%d (after %d)", c.name, typ(e), e.Key, e.ModRevision, typ(want), want.Key, want.ModRevision, c.last)
		}
		c.next++
		c.events++
		if e.Type == state.EventDelete {
			delete(c.seen, e.Key)
		} else {
			c.seen[e.Key] = e
		}
	}
	for c.next < len(evs) && evs[c.next].ModRevision <= b.Revision {
		if c.match(evs[c.next].Key) {
			return fmt.Errorf("%s: batch at %d without change %s %s@%d", c.name, b.Revision, typ(evs[c.next]), evs[c.next].Key, evs[c.next].ModRevision)
		}
		c.next++
	}
	c.last = b.Revision
	return nil
}

func typ(e state.Event) string {
	if e.Type == state.EventDelete {
		return "delete"
	}
	return "put"
}
