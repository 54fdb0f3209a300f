package watchhub

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/state"
)

// Source is what the hub reads the model through: *state.State.
type Source interface {
	// Revision returns the store's current revision.
	Revision(ctx context.Context) (int64, error)
	// WatchChanges streams the changes under prefix after a revision,
	// never listing (state.State.WatchChanges).
	WatchChanges(ctx context.Context, prefix string, after int64) <-chan state.WatchBatch
	// Watch and WatchKey are state.State's, for streams resuming from
	// revisions the ring no longer holds.
	Watch(ctx context.Context, prefix string, after int64) <-chan state.WatchBatch
	WatchKey(ctx context.Context, key string, after int64) <-chan state.WatchBatch
	// ListMany lists keys and prefixes at one revision, for resets: one
	// stream's, or several at once (Hub.List).
	ListMany(ctx context.Context, specs []state.ListSpec) ([][]state.Event, int64, error)
}

// Config configures a Hub.
type Config struct {
	Source Source
	// RingEvents and RingBytes bound the ring of recent events that
	// streams resume from; 65,536 events and 32 MiB when zero. RingAge
	// bounds how long it keeps them: a burst of large changes does not
	// stay in memory until later ones push it out; 2 minutes when zero.
	RingEvents int
	RingBytes  int
	RingAge    time.Duration
	// QueueEvents bounds the events waiting for one stream; a stream with
	// more is reset (it lists again). 4,096 when zero.
	QueueEvents int
	// BatchEvents and BatchBytes bound what one batch a stream returns
	// carries, when many changes wait for it; 1,000 events and 1 MiB when
	// zero.
	BatchEvents int
	BatchBytes  int
	// QueueBytes bounds what the streams charged to budgets hold
	// together (Budget); past it, the budget holding the most is cut.
	// None when zero.
	QueueBytes int64
	// MarkKey, when set, is a key whose writes are marks: each stream is
	// told of a mark's revision (a batch without events, after the changes
	// queued for it before), so that its client knows it has seen every
	// change of its subject up to the mark; a stream that catches up from
	// etcd, behind the latest mark, lists again instead.
	MarkKey string
	Logger  hclog.Logger
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case c.Source == nil:
		return errors.New("watchhub: no source")
	case c.RingEvents < 0 || c.RingBytes < 0 || c.RingAge < 0 || c.QueueEvents < 0 || c.BatchEvents < 0 || c.BatchBytes < 0 || c.QueueBytes < 0:
		return errors.New("watchhub: negative bound")
	}
	return nil
}

// ErrClosed says the hub stopped: its Run ended.
var ErrClosed = errors.New("watch hub stopped")

// Hub follows the model with one etcd watch and hands its changes to
// Streams. Run runs it; streams wait for it to start.
type Hub struct {
	cfg   Config
	ready chan struct{} // closed once Run knows the revision it starts from
	done  chan struct{} // closed when Run ends

	// handed is rev, for reading without the lock (Revision).
	handed atomic.Int64
	// mark is the revision of the latest write of MarkKey the hub knows
	// of (Mark).
	mark atomic.Int64

	mu sync.Mutex
	// rev is the revision the hub has handed out every change up to
	// (setRev).
	rev  int64
	ring *ring
	// exact and prefixes index the registered subscribers by key and by
	// prefix; lens are the prefix lengths in use, ascending, and lenCount
	// how many prefixes have each.
	exact    map[string]map[*sub]struct{}
	prefixes map[string]map[*sub]struct{}
	lens     []int
	lenCount map[int]int
	subs     int
	closed   bool
	stats    Stats
	touched  []*sub // scratch for dispatch
	// held is what every stream holds (Budget); budgets are the
	// budgets with streams, not closed: those a cut may choose.
	held    int64
	budgets map[*Budget]struct{}
	// catchingUp are the subscriptions of the streams catching up from
	// etcd: not registered, but told of marks.
	catchingUp map[*sub]struct{}
}

// Stats are the hub's counts so far.
type Stats struct {
	// Revision is the revision the hub has handed out every change up to.
	Revision int64
	// Streams is the number of streams following the hub now.
	Streams int
	// Events counts the changes the hub received.
	Events int64
	// Delivered counts the changes queued for streams.
	Delivered int64
	// Resumed counts streams resumed from the ring, Fallbacks those that
	// had to catch up from etcd first, and Listings the listings streams
	// read (at their start and when reset), of which ListedTogether were
	// read by List, with others.
	Resumed, Fallbacks, Listings, ListedTogether int64
	// Overflows counts streams reset because they fell too far behind.
	Overflows int64
	// ListedAgain counts listings read again because they were read
	// before the changes the hub had handed out were visible to reads
	// (listAtLeast).
	ListedAgain int64
	// Marks counts the writes of the mark key the hub handed out.
	Marks int64
	// RingEvents and RingBytes are what the ring holds now.
	RingEvents, RingBytes int
	// Held is the bytes of changes the streams hold now (queued, read
	// ahead from etcd, listed), as budgets count them; MostHeld the most
	// one budget with streams has held at once.
	Held, MostHeld int64
	// Afresh counts the streams catching up from etcd that stopped
	// reading ahead, their budget full, to list afresh.
	Afresh int64
	// CutsStream, CutsParent and CutsHub count the budgets cut because
	// they, their parent, or every stream together (Config.QueueBytes)
	// went past a limit.
	CutsStream, CutsParent, CutsHub int64
}

// New returns a Hub; Run starts it.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RingEvents == 0 {
		cfg.RingEvents = 1 << 16
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = 32 << 20
	}
	if cfg.RingAge == 0 {
		cfg.RingAge = 2 * time.Minute
	}
	if cfg.QueueEvents == 0 {
		cfg.QueueEvents = 4096
	}
	if cfg.BatchEvents == 0 {
		cfg.BatchEvents = 1000
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Hub{
		cfg: cfg, ready: make(chan struct{}), done: make(chan struct{}),
		ring:  newRing(cfg.RingEvents, cfg.RingBytes),
		exact: map[string]map[*sub]struct{}{}, prefixes: map[string]map[*sub]struct{}{}, lenCount: map[int]int{},
		budgets:    map[*Budget]struct{}{},
		catchingUp: map[*sub]struct{}{},
	}, nil
}

// Run follows the model until ctx ends, and then stops every stream with
// ErrClosed. It returns nil when ctx ends; it can be run once.
func (h *Hub) Run(ctx context.Context) error {
	defer h.close()
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	var rev, mark int64
	for {
		var err error
		if rev, mark, err = h.start(ctx); err == nil {
			break
		}
		h.cfg.Logger.Warn("watch hub: cannot read the current revision; retrying", "error", err)
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	h.mu.Lock()
	h.setRev(rev)
	h.ring.reset(rev)
	h.mark.Store(mark)
	h.mu.Unlock()
	close(h.ready)
	expire := time.NewTicker(h.cfg.RingAge / 8)
	defer expire.Stop()
	changes := h.cfg.Source.WatchChanges(ctx, "", rev)
	for {
		select {
		case b, ok := <-changes:
			if !ok {
				return nil
			}
			h.dispatch(b)
		case now := <-expire.C:
			h.mu.Lock()
			h.ring.expire(now.Add(-h.cfg.RingAge))
			h.mu.Unlock()
		}
	}
}

// start reads the revision the hub starts from and, with a mark key, the
// latest mark at or before it: a stream resuming from before that mark
// lists again rather than catch up from etcd, which would not bring it to
// the mark while its subject does not change.
func (h *Hub) start(ctx context.Context) (rev, mark int64, err error) {
	if h.cfg.MarkKey == "" {
		rev, err = h.cfg.Source.Revision(ctx)
		return rev, 0, err
	}
	evs, rev, err := h.cfg.Source.ListMany(ctx, []state.ListSpec{{Key: h.cfg.MarkKey}})
	if err != nil {
		return 0, 0, err
	}
	for _, e := range evs[0] {
		mark = e.ModRevision
	}
	return rev, mark, nil
}

func (h *Hub) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	close(h.done)
}

// setRev records that the hub has handed out every change up to rev. The
// hub's lock is held.
func (h *Hub) setRev(rev int64) {
	h.rev = rev
	h.handed.Store(rev)
}

// Revision returns the revision the hub has handed out every change up
// to. A client acting on a change it was handed reads at or past it: etcd
// hands a change to its watchers a moment before reads see it
// (state.Config.AtLeast).
func (h *Hub) Revision() int64 { return h.handed.Load() }

// Mark returns the revision of the latest write of the mark key the hub
// has handed out (or found when it started); 0 when none.
func (h *Hub) Mark() int64 { return h.mark.Load() }

// Done is closed when the hub stops: every stream's next batch is then
// ErrClosed.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Stats returns the hub's counts so far.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.Revision, s.Streams, s.RingEvents, s.RingBytes, s.Held = h.rev, h.subs, h.ring.n, h.ring.bytes, h.held
	return s
}

// sub is a stream's registration with the hub. Its fields are guarded by
// the hub's lock.
type sub struct {
	key    string
	prefix bool
	// queue holds the changes for the stream, in order, one batch per
	// batch of the hub's watch with changes for it; queued counts them,
	// and bytes counts what they hold (eventBytes).
	queue  []state.WatchBatch
	queued int
	bytes  int64
	// budget is what the stream is charged to, nil for none.
	budget *Budget
	// stopFallback, while set, stops the etcd watch the stream catches
	// up with (Stream.fallback); listAfresh says that watch stopped
	// because the stream's budget could not hold what it read ahead, or
	// because a mark came (Hub.markAll): the stream lists afresh instead.
	stopFallback context.CancelFunc
	listAfresh   bool
	// reset says the queue overflowed and was dropped: nothing is queued
	// until the stream lists again.
	reset bool
	// progress is the latest revision without changes for the stream that
	// the hub told it of.
	progress   int64
	registered bool
	// wake is signalled, without blocking, when there is news; or, for a
	// stream polled with TryNext, onWake is called.
	wake   chan struct{}
	onWake func()
}

func (s *sub) notify() {
	if s.onWake != nil {
		s.onWake()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sub) matches(key string) bool {
	if s.prefix {
		return len(key) >= len(s.key) && key[:len(s.key)] == s.key
	}
	return key == s.key
}

// dispatch hands one batch of the model's watch to the streams that want
// it.
func (h *Hub) dispatch(b state.WatchBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case b.Reset:
		// Changes were lost (etcd compacted what the hub had to resume
		// from): every stream lists again.
		h.cfg.Logger.Warn("watch hub: changes lost to compaction; every stream lists again", "revision", b.Revision)
		for _, set := range []map[string]map[*sub]struct{}{h.exact, h.prefixes} {
			for _, subs := range set {
				for s := range subs {
					h.overflow(s)
				}
			}
		}
		h.ring.reset(b.Revision)
		h.setRev(b.Revision)
		return
	case len(b.Events) == 0:
		// Progress: tell every stream, so that its clients resume from a
		// later revision. etcd reports progress rarely (every ten minutes
		// by default).
		if b.Revision <= h.rev {
			return
		}
		h.setRev(b.Revision)
		for _, set := range []map[string]map[*sub]struct{}{h.exact, h.prefixes} {
			for _, subs := range set {
				for s := range subs {
					s.progress = b.Revision
					s.notify()
				}
			}
		}
		return
	}
	h.stats.Events += int64(len(b.Events))
	h.ring.push(b.Events, time.Now())
	touched := h.touched[:0]
	for i := range b.Events {
		e := &b.Events[i]
		for s := range h.exact[e.Key] {
			touched = h.enqueue(s, b.Revision, e, touched)
		}
		for _, l := range h.lens {
			if l > len(e.Key) {
				break
			}
			for s := range h.prefixes[e.Key[:l]] {
				touched = h.enqueue(s, b.Revision, e, touched)
			}
		}
	}
	h.setRev(b.Revision)
	for i, s := range touched {
		s.notify()
		touched[i] = nil
	}
	h.touched = touched[:0]
	if h.cfg.MarkKey != "" {
		for i := range b.Events {
			if b.Events[i].Key == h.cfg.MarkKey {
				h.markAll(b.Revision)
				break
			}
		}
	}
}

// markAll tells every stream of the mark at rev: each registered stream
// returns a batch at rev once it has returned what was queued for it
// before (unless what it returns takes it there anyway), and each stream
// catching up from etcd lists again, which takes it past rev. The hub's
// lock is held.
func (h *Hub) markAll(rev int64) {
	h.mark.Store(rev)
	h.stats.Marks++
	for _, set := range []map[string]map[*sub]struct{}{h.exact, h.prefixes} {
		for _, subs := range set {
			for s := range subs {
				s.progress = max(s.progress, rev)
				s.notify()
			}
		}
	}
	for s := range h.catchingUp {
		// Its etcd watch stops; the stream sees it end and lists.
		delete(h.catchingUp, s)
		s.listAfresh = true
		s.stopFallback()
	}
}

// enqueue queues e, of the batch at rev, for s, and adds s to touched the
// first time; a queue that overflows is dropped and s reset, a budget
// past its limit cut (chargeLocked).
func (h *Hub) enqueue(s *sub, rev int64, e *state.Event, touched []*sub) []*sub {
	return h.enqueueCounted(s, rev, e, touched, false)
}

// enqueueCatchingUp is enqueue of a change from the ring, for a stream
// resuming, whose budget resume has checked: it cuts nothing.
func (h *Hub) enqueueCatchingUp(s *sub, rev int64, e *state.Event) {
	h.enqueueCounted(s, rev, e, nil, true)
}

func (h *Hub) enqueueCounted(s *sub, rev int64, e *state.Event, touched []*sub, catchingUp bool) []*sub {
	if s.reset {
		return touched
	}
	if s.queued >= h.cfg.QueueEvents {
		h.overflow(s)
		return touched
	}
	size := int64(eventBytes(e))
	if catchingUp {
		h.countLocked(s, size)
	} else if !h.chargeLocked(s, size, rev) {
		return touched // cut: s returns why
	}
	s.bytes += size
	n := len(s.queue)
	if n == 0 || s.queue[n-1].Revision != rev {
		s.queue = append(s.queue, state.WatchBatch{Revision: rev})
		n++
		touched = append(touched, s)
	}
	s.queue[n-1].Events = append(s.queue[n-1].Events, *e)
	s.queued++
	h.stats.Delivered++
	return touched
}

// overflow drops s's queue and resets it: it must list again.
func (h *Hub) overflow(s *sub) {
	if !s.reset {
		h.stats.Overflows++
	}
	h.dropQueueLocked(s)
	s.reset = true
	s.notify()
}

// register indexes s, which receives the changes after h.rev.
func (h *Hub) register(s *sub) {
	if s.registered {
		return
	}
	s.registered = true
	h.subs++
	set := h.exact
	if s.prefix {
		set = h.prefixes
		if h.lenCount[len(s.key)]++; h.lenCount[len(s.key)] == 1 {
			h.lens = append(h.lens, len(s.key))
			sort.Ints(h.lens)
		}
	}
	subs := set[s.key]
	if subs == nil {
		subs = map[*sub]struct{}{}
		set[s.key] = subs
	}
	subs[s] = struct{}{}
}

// unregister removes s from the index.
func (h *Hub) unregister(s *sub) {
	if !s.registered {
		return
	}
	s.registered = false
	h.subs--
	set := h.exact
	if s.prefix {
		set = h.prefixes
		if h.lenCount[len(s.key)]--; h.lenCount[len(s.key)] == 0 {
			delete(h.lenCount, len(s.key))
			i := sort.SearchInts(h.lens, len(s.key))
			h.lens = append(h.lens[:i], h.lens[i+1:]...)
		}
	}
	delete(set[s.key], s)
	if len(set[s.key]) == 0 {
		delete(set, s.key)
	}
	h.dropQueueLocked(s)
}

// resume registers s to receive the changes after rev, queueing those the
// ring holds, and reports true; or, when the ring no longer holds all of
// them, or s's budget could not hold them, reports false and leaves s
// unregistered.
func (h *Hub) resume(s *sub, rev int64) bool {
	if rev < h.ring.base {
		return false
	}
	if s.budget != nil {
		// What the ring holds for s must fit s's budget, with room to
		// spare: otherwise s catches up as if the ring did not hold it,
		// from etcd, a batch at a time, or with a listing.
		n := int64(0)
		for i := h.ring.after(rev); i < h.ring.n; i++ {
			if e := h.ring.at(i); s.matches(e.Key) {
				n += int64(eventBytes(e))
			}
		}
		if !h.fitsLocked(s.budget, n, true) {
			return false
		}
	}
	s.reset = false
	h.dropQueueLocked(s)
	h.register(s)
	for i := h.ring.after(rev); i < h.ring.n; i++ {
		e := h.ring.at(i)
		if s.matches(e.Key) {
			h.enqueueCatchingUp(s, e.ModRevision, e)
		}
	}
	if m := h.mark.Load(); m > rev {
		// The mark is in the ring, but the stream only sees its own
		// keys there: it is told of the mark as the others were.
		s.progress = max(s.progress, m)
	}
	return true
}
