package watchhub

import (
	"context"
	"errors"
	"fmt"

	"github.com/lifelinehq/lifeline/state"
)

// What a budget bounds, as a CutError names it.
const (
	// OverStream: the stream's own budget.
	OverStream = "stream"
	// OverParent: the budget its budget shares with others (the
	// controller's: all the streams of one credential).
	OverParent = "parent"
	// OverHub: Config.QueueBytes, what every stream together may hold.
	OverHub = "hub"
)

// ErrCut is what a stream whose budget was cut returns (as a *CutError).
var ErrCut = errors.New("watch stream cut: too many changes queued for it")

// CutError says why a budget was cut: what was over its limit.
type CutError struct {
	// Over is OverStream, OverParent or OverHub.
	Over string
	// Limit is the limit that was passed, in bytes.
	Limit int64
}

func (e *CutError) Error() string {
	what := map[string]string{OverStream: "the stream", OverParent: "the streams of its client", OverHub: "all the watch streams"}[e.Over]
	size := fmt.Sprintf("%d MiB", e.Limit>>20)
	if e.Limit < 1<<20 {
		size = fmt.Sprintf("%d KiB", e.Limit>>10)
	}
	return fmt.Sprintf("watch stream cut: it fell too far behind, with more than %s of changes queued for %s; resume after the last revision received", size, what)
}

func (e *CutError) Is(target error) bool { return target == ErrCut }

// A Budget bounds the bytes of changes held for the streams made through
// it (Budget.Watch, WatchKey, Polled): queued by the hub, read ahead from
// etcd for a stream catching up, or listed by List and not yet returned.
// Each change counts its key, its value and an overhead, for every
// stream it is held for: a value shared by several is counted once for
// each, which bounds what a client can make the controller hold however
// it subscribes.
//
// A budget may have a parent, which bounds its children together (the
// controller gives each credential one, and each of its streams a child).
// When holding a change would take a budget past its limit, or its parent
// past the parent's, the budget is cut: whatever its streams hold is
// dropped at once, nothing more is queued for them, and each returns a
// *CutError from then on. So is the budget holding the most when the
// hub's own bound (Config.QueueBytes) is passed. A stream's client
// resumes after the revision it last received, on a new stream.
type Budget struct {
	h      *Hub
	limit  int64
	parent *Budget
	onCut  func(*CutError)
	// Guarded by the hub's lock: what is held for the budget's streams
	// (for a parent, its children's); the most it held; the revision
	// last queued for its streams and what was queued of it; its
	// streams; the cut, once cut; closed once closed.
	used     int64
	peak     int64
	rev      int64
	revBytes int64
	subs     map[*sub]struct{}
	cut      *CutError
	closed   bool
}

// NewBudget returns a budget of limit bytes (none when zero or less),
// within parent's when parent is not nil. onCut, when not nil, is called
// when the budget is cut, with the hub's lock held: it must return at
// once and not call the hub.
func (h *Hub) NewBudget(limit int64, parent *Budget, onCut func(*CutError)) *Budget {
	return &Budget{h: h, limit: limit, parent: parent, onCut: onCut, subs: map[*sub]struct{}{}}
}

// Close ends the budget: it is no longer a candidate to cut, and makes no
// more streams. Its streams are closed first.
func (b *Budget) Close() {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	b.closed = true
	delete(b.h.budgets, b)
}

// Used returns what the budget's streams hold now, and the most they held
// at once.
func (b *Budget) Used() (now, peak int64) {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	return b.used, b.peak
}

// Err returns the budget's cut, nil when it was not cut.
func (b *Budget) Err() error {
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	if b.cut == nil {
		return nil
	}
	return b.cut
}

// Watch is Hub.Watch, charged to the budget.
func (b *Budget) Watch(ctx context.Context, prefix string, after int64) (*Stream, error) {
	return b.h.watch(ctx, prefix, true, after, nil, b)
}

// WatchKey is Hub.WatchKey, charged to the budget.
func (b *Budget) WatchKey(ctx context.Context, key string, after int64) (*Stream, error) {
	return b.h.watch(ctx, key, false, after, nil, b)
}

// Polled is Hub.Polled, charged to the budget.
func (b *Budget) Polled(ctx context.Context, key string, prefix bool, after int64, wake func()) (*Stream, error) {
	return b.h.watch(ctx, key, prefix, after, wake, b)
}

// chargeLocked counts n more bytes queued for s, of the change at
// revision rev, for s's budget (and the hub's), cutting what goes past a
// limit; it reports false when s's budget is cut (now or before), and
// then counts nothing. A budget is cut only when it holds changes of an
// earlier revision than the one queued now: a stream whose reader has
// taken everything before is not cut for one revision, however big, so
// that a client that reads as fast as it can always makes progress. The
// hub's lock is held.
func (h *Hub) chargeLocked(s *sub, n, rev int64) bool {
	b := s.budget
	if b != nil && b.cut != nil {
		return false
	}
	h.held += n
	if b == nil {
		return true
	}
	b.add(n)
	h.stats.MostHeld = max(h.stats.MostHeld, b.used)
	if b.rev != rev {
		b.rev, b.revBytes = rev, 0
	}
	b.revBytes += n
	behind := b.used > b.revBytes
	switch p := b.parent; {
	case !behind:
	case b.limit > 0 && b.used > b.limit:
		h.cutLocked(b, &CutError{Over: OverStream, Limit: b.limit})
	case p != nil && p.limit > 0 && p.used > p.limit:
		h.cutLocked(b, &CutError{Over: OverParent, Limit: p.limit})
	}
	if q := h.cfg.QueueBytes; q > 0 && h.held > q {
		if most := h.mostLocked(); most != nil {
			h.cutLocked(most, &CutError{Over: OverHub, Limit: q})
		}
	}
	if b.cut != nil {
		// Not held after all.
		h.held -= n
		b.add(-n)
		return false
	}
	return true
}

// holdLocked counts n more bytes held for s other than in its queue (read
// ahead from etcd, a listing read for it) and reports true when they fit
// within s's budget, its parent's and the hub's, or when s's budget holds
// nothing else; otherwise it counts nothing and reports false, and the
// caller holds nothing: such a stream lists afresh when read, rather than
// being cut for what a client catching up needs. The hub's lock is held.
func (h *Hub) holdLocked(s *sub, n int64) bool {
	if !h.fitsLocked(s.budget, n, false) {
		return false
	}
	h.countLocked(s, n)
	return true
}

// countLocked counts n more bytes held for s, cutting nothing. The hub's
// lock is held.
func (h *Hub) countLocked(s *sub, n int64) {
	h.held += n
	if b := s.budget; b != nil {
		b.add(n)
		h.stats.MostHeld = max(h.stats.MostHeld, b.used)
	}
}

// fitsLocked says whether b (nil: none), not cut, can hold n more bytes
// within its limit, its parent's and the hub's; or, unless strict,
// whether it holds nothing (so that a stream whose reader has taken
// everything can always be handed the next batch, whatever its size).
// The hub's lock is held.
func (h *Hub) fitsLocked(b *Budget, n int64, strict bool) bool {
	switch {
	case b == nil:
		return true
	case b.cut != nil:
		return false
	case b.used == 0 && !strict:
		return true
	}
	over := func(x *Budget) bool { return x != nil && x.limit > 0 && x.used+n > x.limit }
	return !over(b) && !over(b.parent) && (h.cfg.QueueBytes <= 0 || h.held+n <= h.cfg.QueueBytes)
}

// releaseLocked counts n bytes charged for s as no longer held.
func (h *Hub) releaseLocked(s *sub, n int64) {
	h.held -= n
	if s.budget != nil {
		s.budget.add(-n)
	}
}

func (b *Budget) add(n int64) {
	for ; b != nil; b = b.parent {
		b.used += n
		b.peak = max(b.peak, b.used)
	}
}

// mostLocked returns the open budget, not yet cut, whose streams hold the
// most; nil when there is none.
func (h *Hub) mostLocked() *Budget {
	var most *Budget
	for b := range h.budgets {
		if b.cut == nil && (most == nil || b.used > most.used) {
			most = b
		}
	}
	return most
}

// cutLocked cuts b: its streams' queues are dropped, their catching up
// from etcd stopped, and each is woken to return why.
func (h *Hub) cutLocked(b *Budget, why *CutError) {
	if b.cut != nil {
		return
	}
	b.cut = why
	switch why.Over {
	case OverStream:
		h.stats.CutsStream++
	case OverParent:
		h.stats.CutsParent++
	case OverHub:
		h.stats.CutsHub++
	}
	for s := range b.subs {
		h.dropQueueLocked(s)
		if s.stopFallback != nil {
			s.stopFallback()
		}
		s.notify()
	}
	if b.onCut != nil {
		b.onCut(why)
	}
}

// dropQueueLocked empties s's queue, releasing what it held.
func (h *Hub) dropQueueLocked(s *sub) {
	h.releaseLocked(s, s.bytes)
	s.queue, s.queued, s.bytes = nil, 0, 0
}

// batchBytes is what a batch counts for, held.
func batchBytes(b *state.WatchBatch) int64 {
	n := 0
	for i := range b.Events {
		n += eventBytes(&b.Events[i])
	}
	return int64(n)
}
