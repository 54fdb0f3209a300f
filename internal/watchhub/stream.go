package watchhub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// Stream is one watch of a key or a prefix, served by the hub. Its
// methods are for one goroutine; Close it when done.
type Stream struct {
	h   *Hub
	sub *sub
	// after is the revision of the last batch returned (or the one the
	// stream was asked to resume after): what its client resumes after.
	after int64
	// list says the stream must list its keys before anything else.
	list bool
	// listed is a listing Hub.List read, to return before anything else;
	// listedBytes what it is charged for.
	listed      *state.WatchBatch
	listedBytes int64
	// fallback, while set, is the etcd watch the stream catches up with,
	// because the ring no longer held what it had to resume from.
	fallback <-chan state.WatchBatch
	closed   bool
}

// Watch returns a stream of the changes under prefix (state.Watch's
// contract): after revision after, or a Reset listing first when after is
// zero. It waits for the hub to start, until ctx ends; a stream catching
// up from etcd does so until ctx ends or Close.
func (h *Hub) Watch(ctx context.Context, prefix string, after int64) (*Stream, error) {
	return h.watch(ctx, prefix, true, after, nil, nil)
}

// WatchKey is Watch of exactly one key.
func (h *Hub) WatchKey(ctx context.Context, key string, after int64) (*Stream, error) {
	return h.watch(ctx, key, false, after, nil, nil)
}

// Polled returns a stream to be read with TryNext rather than Next, so
// that one goroutine can serve many: Watch (prefix) or WatchKey (not)
// whose wake is called whenever TryNext may have something new. wake is
// called from the hub's goroutine, with its lock held, and from the
// stream's while it catches up from etcd: it must return at once and not
// call the hub.
func (h *Hub) Polled(ctx context.Context, key string, prefix bool, after int64, wake func()) (*Stream, error) {
	return h.watch(ctx, key, prefix, after, wake, nil)
}

func (h *Hub) watch(ctx context.Context, key string, prefix bool, after int64, wake func(), b *Budget) (*Stream, error) {
	if after < 0 {
		return nil, fmt.Errorf("watch %s after revision %d: want 0 or a revision received earlier", key, after)
	}
	select {
	case <-h.ready:
	case <-h.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s := &Stream{h: h, sub: &sub{key: key, prefix: prefix, onWake: wake, budget: b}, after: after}
	if wake == nil {
		s.sub.wake = make(chan struct{}, 1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if b != nil {
		switch {
		case b.cut != nil:
			return nil, b.cut
		case b.closed:
			return nil, errors.New("watch budget closed")
		}
		b.subs[s.sub] = struct{}{}
		h.budgets[b] = struct{}{}
	}
	switch {
	case after == 0:
		s.list = true
	case h.resume(s.sub, after):
		h.stats.Resumed++
	case h.mark.Load() > after:
		// Caught up from etcd, a subject that does not change would not
		// come to the latest mark: the stream lists again (its client
		// handles that as after a compaction).
		s.list = true
	default:
		h.stats.Fallbacks++
		h.catchingUp[s.sub] = struct{}{}
		fctx, cancel := context.WithCancel(ctx)
		s.sub.stopFallback = cancel
		var in <-chan state.WatchBatch
		if prefix {
			in = h.cfg.Source.Watch(fctx, key, after)
		} else {
			in = h.cfg.Source.WatchKey(fctx, key, after)
		}
		s.fallback = h.forward(fctx, in, s.sub)
	}
	return s, nil
}

// forward reads the batches of in, an etcd watch catching s up, as they
// come, and holds them, charged to s's budget, until the stream takes
// them: etcd's client would otherwise hold, uncounted, all that the
// stream's reader does not take. It wakes s each time one is ready, and
// ends when ctx does (in closes then), when s's budget is cut, or when
// the budget cannot hold the next batch (s then lists afresh).
func (h *Hub) forward(ctx context.Context, in <-chan state.WatchBatch, s *sub) <-chan state.WatchBatch {
	out := make(chan state.WatchBatch, 1)
	go func() {
		var held []state.WatchBatch
		var bytes int64 // what held is charged for
		defer func() {
			h.mu.Lock()
			h.releaseLocked(s, bytes)
			h.mu.Unlock()
			close(out)
			s.notify() // after the close: the stream sees the end
		}()
		for {
			var send chan<- state.WatchBatch
			var head state.WatchBatch
			if len(held) > 0 {
				send, head = out, held[0]
			}
			select {
			case b, ok := <-in:
				if !ok {
					return
				}
				n := batchBytes(&b)
				h.mu.Lock()
				if ok = h.holdLocked(s, n); !ok {
					s.listAfresh = true
					h.stats.Afresh++
				}
				h.mu.Unlock()
				if !ok {
					return
				}
				held = append(held, b)
				bytes += n
			case send <- head:
				n := batchBytes(&head)
				h.mu.Lock()
				h.releaseLocked(s, n)
				h.mu.Unlock()
				bytes -= n
				held[0] = state.WatchBatch{}
				held = held[1:]
				s.notify()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Close ends the stream.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.sub.stopFallback != nil {
		s.sub.stopFallback()
		s.sub.stopFallback = nil
	}
	h.unregister(s.sub)
	delete(h.catchingUp, s.sub)
	s.dropListedLocked()
	if b := s.sub.budget; b != nil {
		delete(b.subs, s.sub)
	}
}

// dropListedLocked drops the listing Hub.List read for the stream, if it
// holds one. The hub's lock is held.
func (s *Stream) dropListedLocked() {
	if s.listed != nil {
		s.h.releaseLocked(s.sub, s.listedBytes)
		s.listed, s.listedBytes = nil, 0
	}
}

// Next returns the next batch: changes, a Reset listing, or progress (no
// changes, a later revision). It blocks until there is one, ctx ends (its
// error), or the hub stops (ErrClosed). An error reading etcd for a
// listing is returned too; the stream may be asked again.
func (s *Stream) Next(ctx context.Context) (state.WatchBatch, error) {
	b, _, err := s.next(ctx, true)
	return b, err
}

// TryNext is Next without waiting, for a stream from Polled: it reports
// false when nothing is ready yet (the stream's wake will be called when
// something may be). It still waits for the reads of a listing. Once it
// has returned a batch, there may be more: call it again until false.
func (s *Stream) TryNext(ctx context.Context) (state.WatchBatch, bool, error) {
	return s.next(ctx, false)
}

func (s *Stream) next(ctx context.Context, wait bool) (state.WatchBatch, bool, error) {
	h := s.h
	for {
		switch {
		case s.closed:
			return state.WatchBatch{}, false, ErrClosed
		case s.fallback != nil:
			return s.nextFallback(ctx, wait)
		}
		h.mu.Lock()
		switch {
		case h.closed:
			h.mu.Unlock()
			return state.WatchBatch{}, false, ErrClosed
		case s.sub.budget != nil && s.sub.budget.cut != nil:
			err := s.sub.budget.cut
			s.dropListedLocked()
			h.mu.Unlock()
			return state.WatchBatch{}, false, err
		case s.listed != nil:
			b := *s.listed
			s.dropListedLocked()
			h.mu.Unlock()
			return b, true, nil
		case s.list:
			h.mu.Unlock()
			b, err := s.relist(ctx)
			return b, err == nil, err
		case s.sub.reset:
			s.list = true
			h.mu.Unlock()
			continue
		case len(s.sub.queue) > 0:
			b, ok := s.takeLocked()
			h.mu.Unlock()
			if ok {
				return b, true, nil
			}
			continue
		case s.sub.progress > s.after:
			s.after = s.sub.progress
			h.mu.Unlock()
			return state.WatchBatch{Revision: s.after}, true, nil
		}
		h.mu.Unlock()
		if !wait {
			return state.WatchBatch{}, false, nil
		}
		select {
		case <-s.sub.wake:
		case <-h.done:
		case <-ctx.Done():
			return state.WatchBatch{}, false, ctx.Err()
		}
	}
}

// takeLocked takes from the stream's queue what is after s.after, as one
// batch within the configured bounds, and reports false when nothing was.
// What it takes is no longer held for the stream. The hub's lock is held:
// the queue stays the hub's, and counted, until a batch is returned, so
// that a cut drops all of it whatever the stream's reader is doing.
func (s *Stream) takeLocked() (state.WatchBatch, bool) {
	q := s.sub.queue
	var out state.WatchBatch
	size := 0
	var released int64
	n := 0
	for ; n < len(q); n++ {
		b := &q[n]
		if b.Revision <= s.after {
			released += batchBytes(b) // all of it in a listing already
			continue
		}
		// A batch may hold several revisions, a listing may have read up
		// to the middle of it: keep only what is after.
		evs := b.Events
		for len(evs) > 0 && evs[0].ModRevision <= s.after {
			released += int64(eventBytes(&evs[0]))
			evs = evs[1:]
		}
		bsize := 0
		for i := range evs {
			bsize += eventBytes(&evs[i])
		}
		if len(out.Events) > 0 && (len(out.Events)+len(evs) > s.h.cfg.BatchEvents || size+bsize > s.h.cfg.BatchBytes) {
			break
		}
		// The queued batches are the stream's alone: appending to the
		// first one's events overwrites nothing anyone else reads.
		if out.Events == nil {
			out.Events = evs
		} else {
			out.Events = append(out.Events, evs...)
		}
		size += bsize
		released += int64(bsize)
		out.Revision = b.Revision
		s.after = b.Revision
	}
	taken := 0
	for i := 0; i < n; i++ {
		taken += len(q[i].Events)
		q[i] = state.WatchBatch{}
	}
	if s.sub.queue = q[n:]; len(s.sub.queue) == 0 {
		s.sub.queue = nil
	}
	s.sub.queued -= taken
	s.sub.bytes -= released
	s.h.releaseLocked(s.sub, released)
	return out, out.Revision != 0
}

// relist lists the stream's keys at the current revision. The stream is
// registered (and so queues every change the hub hands out from now on)
// before it reads: the listing's revision is at or past every change it
// missed, and the queued changes it already shows are dropped by take.
func (s *Stream) relist(ctx context.Context) (state.WatchBatch, error) {
	h := s.h
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return state.WatchBatch{}, ErrClosed
	}
	s.startListingLocked()
	need := h.rev
	h.mu.Unlock()
	evs, at, err := h.listAtLeast(ctx, []state.ListSpec{s.spec()}, need)
	if err != nil {
		return state.WatchBatch{}, fmt.Errorf("list %s: %w", s.sub.key, err)
	}
	return s.listedAt(at, evs[0]), nil
}

// listAtLeast is Source.ListMany at a revision at or past need, the
// revision the hub had handed out every change up to when the streams
// listing registered: a change handed out before then reaches them only
// through the listing. etcd sends a write's change to its watchers a
// moment before the write is visible to reads (the watchable store
// notifies, then ends the write), so a listing read in that moment is
// read again. A controller's State reads at or past Hub.Revision already
// (state.Config.AtLeast); the hub does not count on its Source doing so.
func (h *Hub) listAtLeast(ctx context.Context, specs []state.ListSpec, need int64) ([][]state.Event, int64, error) {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		evs, at, err := h.cfg.Source.ListMany(ctx, specs)
		if err != nil || at >= need {
			return evs, at, err
		}
		h.mu.Lock()
		h.stats.ListedAgain++
		h.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, 0, ctx.Err()
		case <-t.C:
		}
	}
}

// startListingLocked registers the stream, with an empty queue, before a
// listing is read. The hub's lock is held.
func (s *Stream) startListingLocked() {
	s.sub.reset, s.sub.progress = false, 0
	s.h.dropQueueLocked(s.sub)
	s.h.register(s.sub)
	s.h.stats.Listings++
}

// spec is what a listing of the stream reads.
func (s *Stream) spec() state.ListSpec { return state.ListSpec{Key: s.sub.key, Prefix: s.sub.prefix} }

// listedAt records a listing read at revision at, and returns it.
func (s *Stream) listedAt(at int64, evs []state.Event) state.WatchBatch {
	s.list = false
	s.after = max(s.after, at)
	return state.WatchBatch{Revision: at, Reset: true, Events: evs}
}

// List reads, in as few reads as it can (Source.ListMany), the listings
// that those of streams about to list their keys (new, or reset) need,
// for each stream's next Next or TryNext to return without reading etcd.
// Each stream is its reader's, as for its other methods: the goroutine
// that reads them all calls List. When the read fails, each stream lists
// on its own as before, and returns the error, if any, itself.
func (h *Hub) List(ctx context.Context, streams []*Stream) {
	var listing []*Stream
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	for _, s := range streams {
		if s.h != h || s.closed || s.fallback != nil || s.listed != nil {
			continue
		}
		if s.list || s.sub.reset {
			listing = append(listing, s)
		}
	}
	if len(listing) < 2 {
		// Nothing to gain: one lists on its own, at its next read.
		h.mu.Unlock()
		return
	}
	for _, s := range listing {
		s.list = true
		s.startListingLocked()
	}
	need := h.rev
	h.stats.ListedTogether += int64(len(listing))
	h.mu.Unlock()
	specs := make([]state.ListSpec, len(listing))
	for i, s := range listing {
		specs[i] = s.spec()
	}
	evs, at, err := h.listAtLeast(ctx, specs, need)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range listing {
		// A listing its budget cannot hold is not kept: the stream lists
		// on its own when read.
		b := state.WatchBatch{Revision: at, Reset: true, Events: evs[i]}
		if n := batchBytes(&b); h.holdLocked(s.sub, n) {
			s.listedAt(at, evs[i])
			s.listed, s.listedBytes = &b, n
		}
	}
}

// nextFallback returns the next batch of the etcd watch the stream catches
// up with, and moves the stream to the hub as soon as the hub's ring holds
// everything after it.
func (s *Stream) nextFallback(ctx context.Context, wait bool) (state.WatchBatch, bool, error) {
	var b state.WatchBatch
	var ok bool
	if wait {
		select {
		case b, ok = <-s.fallback:
		case <-s.h.done:
			return state.WatchBatch{}, false, ErrClosed
		case <-ctx.Done():
			return state.WatchBatch{}, false, ctx.Err()
		}
	} else {
		select {
		case b, ok = <-s.fallback:
		default:
			return state.WatchBatch{}, false, nil
		}
	}
	if !ok {
		h := s.h
		h.mu.Lock()
		cut := s.sub.budget != nil && s.sub.budget.cut != nil
		afresh := s.sub.listAfresh
		if afresh && !cut {
			delete(h.catchingUp, s.sub)
			s.sub.listAfresh = false
			s.sub.stopFallback()
			s.fallback, s.sub.stopFallback = nil, nil
			s.list = true
		}
		h.mu.Unlock()
		switch {
		case cut:
			return state.WatchBatch{}, false, s.sub.budget.Err()
		case afresh:
			return s.next(ctx, wait)
		case ctx.Err() != nil:
			return state.WatchBatch{}, false, ctx.Err()
		}
		return state.WatchBatch{}, false, context.Canceled // the context Watch was given ended
	}
	s.after = b.Revision
	h := s.h
	h.mu.Lock()
	if !h.closed && h.resume(s.sub, s.after) {
		// Marks come to it from the hub now (resume tells it of the
		// latest), and from its own etcd watch no more.
		delete(h.catchingUp, s.sub)
		s.sub.listAfresh = false
		s.sub.stopFallback()
		s.fallback, s.sub.stopFallback = nil, nil
	}
	h.mu.Unlock()
	return b, true, nil
}
