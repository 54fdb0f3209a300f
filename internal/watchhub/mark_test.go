package watchhub_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// nextBatch returns the stream's next batch of any kind (progress too),
// within ten seconds.
func (f *fixture) nextBatch(s *watchhub.Stream) state.WatchBatch {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b state.WatchBatch
	var err error
	if wake, polled := f.wakes[s]; polled {
		b, err = pollNext(ctx, s, wake)
	} else {
		b, err = s.Next(ctx)
	}
	if err != nil {
		f.t.Fatalf("next batch: %v", err)
	}
	return b
}

// until returns the stream's batches up to and including the first at or
// past rev.
func (f *fixture) until(s *watchhub.Stream, rev int64) []state.WatchBatch {
	f.t.Helper()
	var out []state.WatchBatch
	for {
		b := f.nextBatch(s)
		out = append(out, b)
		if b.Revision >= rev {
			return out
		}
	}
}

func describe(bs []state.WatchBatch) string {
	var out []string
	for _, b := range bs {
		out = append(out, fmt.Sprintf("%d reset=%v %v", b.Revision, b.Reset, keys(b)))
	}
	return fmt.Sprint(out)
}

func TestMarkReachesEveryStream(t *testing.T) {
	t.Run("next", func(t *testing.T) { testMarkReachesEveryStream(t, false) })
	t.Run("polled", func(t *testing.T) { testMarkReachesEveryStream(t, true) })
}

// A write of the mark key brings every stream to its revision: a stream
// whose keys did not change gets a batch without events at the mark, one
// with changes queued gets them first.
func testMarkReachesEveryStream(t *testing.T, polled bool) {
	f := newFixture(t, watchhub.Config{MarkKey: "mark"})
	f.polled = polled
	f.put("a/1", "x")
	one := f.watch("a/1", false, 0)
	set := f.watch("b/", true, 0)
	f.next(one)
	f.next(set)
	f.put("b/1", "y")
	mark := f.put("mark", "")
	// The hub's watch may bring both revisions in one batch: the stream
	// then has b/1 in a batch at the mark.
	got := f.until(set, mark)
	if b := got[0]; !slices.Equal(keys(b), []string{"b/1"}) || got[len(got)-1].Revision != mark || len(got) > 2 || len(got) == 2 && len(got[1].Events) > 0 {
		t.Errorf("the changed stream's batches = %s, want b/1, then the mark at %d without events (or b/1 in a batch at the mark)", describe(got), mark)
	}
	if got := f.until(one, mark); len(got) != 1 || got[0].Revision != mark || len(got[0].Events) != 0 {
		t.Errorf("the quiet stream's batches = %s, want the mark at %d without events", describe(got), mark)
	}
	if f.hub.Mark() != mark || f.hub.Stats().Marks != 1 {
		t.Errorf("Mark() = %d, stats %+v; want %d, one mark", f.hub.Mark(), f.hub.Stats(), mark)
	}
}

func TestMarkReachesStreamsResuming(t *testing.T) {
	t.Run("next", func(t *testing.T) { testMarkReachesStreamsResuming(t, false) })
	t.Run("polled", func(t *testing.T) { testMarkReachesStreamsResuming(t, true) })
}

// A stream resuming from before the latest mark comes to it: from the
// ring, with a batch at the mark; past the ring, where catching up from
// etcd would not bring a quiet subject there, with a listing at once;
// and a stream catching up from etcd when a mark comes lists again.
func testMarkReachesStreamsResuming(t *testing.T, polled bool) {
	f := newFixture(t, watchhub.Config{MarkKey: "mark", RingEvents: 8})
	f.polled = polled
	f.put("a/1", "x")
	s := f.watch("a/", true, 0)
	first := f.next(s)
	s.Close()

	mark := f.put("mark", "")
	f.caughtUp(mark)
	s = f.watch("a/", true, first.Revision)
	if got := f.until(s, mark); len(got) != 1 || got[0].Reset || len(got[0].Events) != 0 || got[0].Revision != mark {
		t.Errorf("resumed from the ring after %d: %s, want the mark at %d alone", first.Revision, describe(got), mark)
	}
	s.Close()

	var last int64
	for i := 0; i < 20; i++ {
		last = f.put(fmt.Sprintf("b/%d", i), "y")
	}
	f.caughtUp(last)
	s = f.watch("a/", true, first.Revision)
	if b := f.nextBatch(s); !b.Reset || b.Revision < last || !slices.Equal(keys(b), []string{"a/1"}) {
		t.Errorf("resumed past the ring from before the mark: %s, want a listing of a/1 at %d or later", describe([]state.WatchBatch{b}), last)
	}
	s.Close()

	// Resumed past the ring from after the mark, the stream catches up
	// from etcd; a mark then has it list again.
	before := f.hub.Stats()
	s = f.watch("a/", true, mark)
	if st := f.hub.Stats(); st.Fallbacks != before.Fallbacks+1 {
		t.Fatalf("stats = %+v, want one more fallback to etcd (%+v before)", st, before)
	}
	mark2 := f.put("mark", "")
	if got := f.until(s, mark2); !got[len(got)-1].Reset || !slices.Equal(keys(got[len(got)-1]), []string{"a/1"}) {
		t.Errorf("a stream catching up from etcd, marked at %d: %s, want a listing of a/1 at or past it", mark2, describe(got))
	}
	f.put("a/2", "z")
	if b := f.next(s); !slices.Equal(keys(b), []string{"a/2"}) {
		t.Errorf("after listing again, the stream's next changes = %v, want a/2: it follows the hub", keys(b))
	}
}

// A hub started after a mark knows it: a stream resuming from before it,
// past what the new hub's ring holds, lists at once.
func TestHubStartsFromTheLatestMark(t *testing.T) {
	f := newFixture(t, watchhub.Config{MarkKey: "mark"})
	f.put("a/1", "x")
	s := f.watch("a/", true, 0)
	first := f.next(s)
	s.Close()
	mark := f.put("mark", "")
	f.stop()

	hub, err := watchhub.New(watchhub.Config{Source: f.st, MarkKey: "mark"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hub.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	s, err = hub.Watch(f.ctx, "a/", first.Revision)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if hub.Mark() != mark {
		t.Errorf("a new hub's Mark() = %d, want %d", hub.Mark(), mark)
	}
	if b := next(t, s); !b.Reset || !slices.Equal(keys(b), []string{"a/1"}) {
		t.Errorf("resumed on a new hub from before its mark: reset %v %v, want a listing of a/1", b.Reset, keys(b))
	}
}
