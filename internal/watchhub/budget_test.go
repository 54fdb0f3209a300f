package watchhub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/watchhub"
)

// value is a value of n bytes.
func value(n int) string { return strings.Repeat("v", n) }

// waitCut polls a stream that is not read otherwise until it returns
// ErrCut, and returns the cut.
func waitCut(t *testing.T, s *watchhub.Stream) *watchhub.CutError {
	t.Helper()
	var cut *watchhub.CutError
	poll.Until(t, "the stream cut", func() bool {
		_, _, err := s.TryNext(context.Background())
		if err == nil {
			return false
		}
		if !errors.As(err, &cut) || !errors.Is(err, watchhub.ErrCut) {
			t.Fatalf("TryNext = %v, want a *CutError", err)
		}
		return true
	})
	return cut
}

// TestBudgetCutsAStreamThatFallsBehind: streams nobody reads hold the
// changes queued for them until their budget is full; then the budget is
// cut: what they held is dropped at once, they return a *CutError, and
// the hub holds nothing for them. A stream of another budget goes on.
func TestBudgetCutsAStreamThatFallsBehind(t *testing.T) {
	for _, tc := range []struct {
		name       string
		over       string
		stream     int64 // the stream's budget
		parent     int64 // its parent's, 0 for none
		queueBytes int64 // the hub's
	}{
		{"stream", watchhub.OverStream, 64 << 10, 0, 0},
		{"parent", watchhub.OverParent, 1 << 30, 64 << 10, 0},
		{"hub", watchhub.OverHub, 1 << 30, 0, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, watchhub.Config{QueueBytes: tc.queueBytes})
			var parent *watchhub.Budget
			if tc.parent > 0 {
				parent = f.hub.NewBudget(tc.parent, nil, nil)
			}
			var cuts atomic.Int32
			slow := f.hub.NewBudget(tc.stream, parent, func(*watchhub.CutError) { cuts.Add(1) })
			defer slow.Close()
			var streams []*watchhub.Stream
			for i := range 4 {
				s, err := slow.Polled(f.ctx, "k/", true, 0, func() {})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if i == 0 {
					// Listed: from now on changes queue for it.
					if _, ok, err := s.TryNext(f.ctx); err != nil || !ok {
						t.Fatalf("TryNext = %v, %v; want the listing", ok, err)
					}
				}
				streams = append(streams, s)
			}
			other := f.watch("k/", true, 0)
			f.next(other) // its listing

			var rev int64
			for i := 0; i < 40 && slow.Err() == nil; i++ {
				rev = f.put("k/"+strconv.Itoa(i%3), value(4<<10))
				f.caughtUp(rev)
			}
			err := slow.Err()
			var cut *watchhub.CutError
			if !errors.As(err, &cut) || cut.Over != tc.over {
				t.Fatalf("the slow budget's Err() = %v, want cut over its %s", err, tc.over)
			}
			if got := waitCut(t, streams[0]); got.Over != tc.over {
				t.Errorf("cut stream returns %v, want over its %s", got, tc.over)
			}
			if n := cuts.Load(); n != 1 {
				t.Errorf("onCut called %d times, want once", n)
			}
			if now, peak := slow.Used(); now != 0 || peak == 0 || peak > 72<<10 {
				t.Errorf("slow budget Used() = %d now, %d at most; want nothing now, at most about 64 KiB before", now, peak)
			}
			st := f.hub.Stats()
			if n := map[string]int64{watchhub.OverStream: st.CutsStream, watchhub.OverParent: st.CutsParent, watchhub.OverHub: st.CutsHub}[tc.over]; n != 1 {
				t.Errorf("hub Stats() = %+v, want one cut over the %s", st, tc.over)
			}
			// Nothing more is queued for the cut streams, and none is made.
			rev = f.put("k/x", value(4<<10))
			f.caughtUp(rev)
			if now, _ := slow.Used(); now != 0 {
				t.Errorf("slow budget holds %d bytes after the cut, want none", now)
			}
			if _, err := slow.Polled(f.ctx, "k/", true, rev, func() {}); !errors.Is(err, watchhub.ErrCut) {
				t.Errorf("Polled on a cut budget = %v, want ErrCut", err)
			}
			// The other stream follows every change in order, and once
			// it has read them the hub holds nothing.
			var got []int64
			for len(got) == 0 || got[len(got)-1] < rev {
				for _, e := range f.next(other).Events {
					got = append(got, e.ModRevision)
				}
			}
			if !slices.IsSorted(got) {
				t.Errorf("the other stream's revisions %v are out of order", got)
			}
			if held := f.hub.Stats().Held; held != 0 {
				t.Errorf("hub Stats().Held = %d with the slow streams cut and the other one read, want 0", held)
			}
		})
	}
}

// TestBudgetReleasesWhatStreamsTake: a stream that reads what is queued
// for it is never cut, however much passes through it, and its budget
// holds nothing once it has read everything or is closed.
func TestBudgetReleasesWhatStreamsTake(t *testing.T) {
	f := newFixture(t, watchhub.Config{QueueBytes: 32 << 10})
	b := f.hub.NewBudget(32<<10, f.hub.NewBudget(32<<10, nil, nil), nil)
	defer b.Close()
	s, err := b.Watch(f.ctx, "k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	next(t, s) // listing
	var rev int64
	for i := range 50 {
		rev = f.put("k/"+strconv.Itoa(i%3), value(4<<10))
		if b := next(t, s); b.Revision != rev {
			t.Fatalf("batch at %d, want %d", b.Revision, rev)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatalf("budget of a stream that reads: %v", err)
	}
	if now, _ := b.Used(); now != 0 {
		t.Errorf("Used() = %d with everything read, want 0", now)
	}
	f.caughtUp(f.put("k/0", value(4<<10)))
	s.Close()
	if now, _ := b.Used(); now != 0 || f.hub.Stats().Held != 0 {
		t.Errorf("after Close: Used() = %d, hub Held %d; want 0", now, f.hub.Stats().Held)
	}
}

// TestStreamCatchingUpPastItsBudgetListsAfresh: a stream resuming from a
// revision the ring no longer holds catches up from etcd; what etcd sends
// it ahead of its reader is held for it, within its budget. Past the
// budget the stream is not cut: it stops reading etcd and, when read,
// lists afresh, so that a client that fell behind always catches up.
func TestStreamCatchingUpPastItsBudgetListsAfresh(t *testing.T) {
	f := newFixture(t, watchhub.Config{RingEvents: 4})
	start := f.put("k/start", "x")
	var rev int64
	// More revisions than etcd sends a watcher catching up in two
	// batches (1,000 revisions each): one handed to the stream, one held
	// for it, and the next past its budget.
	for i := range 2500 {
		rev = f.put("k/"+strconv.Itoa(i%3), value(1<<10))
	}
	f.caughtUp(rev)
	b := f.hub.NewBudget(64<<10, nil, nil)
	defer b.Close()
	wake := make(chan struct{}, 1)
	s, err := b.Polled(f.ctx, "k/", true, start, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f.hub.Stats().Fallbacks != 1 {
		t.Fatalf("hub Stats() = %+v, want one fallback to etcd", f.hub.Stats())
	}
	// Not read yet: what etcd sends is read ahead, a batch whatever its
	// size while the budget holds nothing, and no further.
	poll.UntilSays(t, "the stream's read-ahead stopped (Afresh 1)", func() (bool, string) {
		st := f.hub.Stats()
		return st.Afresh != 0, fmt.Sprintf("hub Stats() = %+v", st)
	})
	if now, peak := b.Used(); peak > 1200<<10 || now > 1200<<10 {
		t.Errorf("read ahead: Used() = %d now, %d at most; want no more than etcd's first batch, about 1 MiB", now, peak)
	}
	// Read: changes in order, then, the budget having been full, a
	// listing of every key at its latest.
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	last := start
	for {
		batch, err := pollNext(ctx, s, wake)
		if err != nil {
			t.Fatalf("TryNext: %v", err)
		}
		if batch.Revision < last {
			t.Fatalf("batch at revision %d after %d", batch.Revision, last)
		}
		last = batch.Revision
		if batch.Reset {
			if !slices.Equal(keys(batch), []string{"k/0", "k/1", "k/2", "k/start"}) || batch.Revision < rev {
				t.Errorf("listing = %v at %d, want every key at %d or later", keys(batch), batch.Revision, rev)
			}
			break
		}
		if batch.Revision >= rev {
			t.Fatalf("caught up to %d without listing afresh: the read-ahead went past the budget", batch.Revision)
		}
	}
	if err := b.Err(); err != nil {
		t.Errorf("budget of a stream catching up: %v, want it not cut", err)
	}
	if now, _ := b.Used(); now != 0 {
		t.Errorf("Used() = %d once caught up, want 0", now)
	}
}

// TestListingsReadTogetherWithinTheBudget: listings Hub.List reads for
// streams about to list are held for them until returned, within their
// budget; those it cannot hold are left for each stream to list on its
// own. None is cut, and each lists.
func TestListingsReadTogetherWithinTheBudget(t *testing.T) {
	f := newFixture(t, watchhub.Config{})
	var rev int64
	for i := range 8 {
		rev = f.put("k/"+strconv.Itoa(i), value(4<<10))
	}
	f.caughtUp(rev)
	b := f.hub.NewBudget(64<<10, nil, nil)
	defer b.Close()
	var streams []*watchhub.Stream
	for range 4 { // 4 listings of 8 values of 4 KiB each: past 64 KiB
		s, err := b.Polled(f.ctx, "k/", true, 0, func() {})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		streams = append(streams, s)
	}
	f.hub.List(f.ctx, streams)
	if now, _ := b.Used(); now == 0 || now > 64<<10 {
		t.Errorf("after List, Used() = %d, want the listings it could hold, within 64 KiB", now)
	}
	for i, s := range streams {
		batch, ok, err := s.TryNext(f.ctx)
		if err != nil || !ok || !batch.Reset || len(batch.Events) != 8 {
			t.Errorf("stream %d's TryNext = %v, %v, %d events; want its listing of 8", i, ok, err, len(batch.Events))
		}
	}
	if now, _ := b.Used(); now != 0 || b.Err() != nil {
		t.Errorf("once listed: Used() = %d, Err() = %v; want 0, nil", now, b.Err())
	}
}

// TestOneRevisionPastTheBudgetDoesNotCut: a change bigger than its
// stream's budget is queued and delivered to a reader that had taken
// everything before: only a reader that is behind is cut.
func TestOneRevisionPastTheBudgetDoesNotCut(t *testing.T) {
	f := newFixture(t, watchhub.Config{})
	b := f.hub.NewBudget(16<<10, nil, nil)
	defer b.Close()
	s, err := b.Watch(f.ctx, "k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next(t, s) // listing
	for i := range 3 {
		rev := f.put("k/"+strconv.Itoa(i), value(48<<10))
		if batch := next(t, s); batch.Revision != rev || len(batch.Events[0].Value) != 48<<10 {
			t.Fatalf("batch at %d, want the change at %d", batch.Revision, rev)
		}
	}
	if err := b.Err(); err != nil {
		t.Errorf("Err() = %v, want the stream not cut", err)
	}
}
