package watchhub

import (
	"sort"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// eventOverhead approximates what an event costs beside its key and value.
const eventOverhead = 64

func eventBytes(e *state.Event) int { return len(e.Key) + len(e.Value) + eventOverhead }

// ring holds the most recent events, oldest first, in a circular buffer
// bounded by events and bytes. It holds whole revisions only: every event
// of the revisions after base, up to the last one pushed.
type ring struct {
	buf      []state.Event
	head, n  int
	bytes    int
	maxBytes int
	// base is the revision after which the ring holds every event.
	base int64
	// pushed are the last revision of each push and when it came, oldest
	// first (some may be at or before base already), for expire.
	pushed []pushMark
}

// pushMark is when the ring was handed the events up to rev.
type pushMark struct {
	rev int64
	at  time.Time
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{buf: make([]state.Event, maxEvents), maxBytes: maxBytes}
}

// at returns the i-th event, oldest first.
func (r *ring) at(i int) *state.Event { return &r.buf[(r.head+i)%len(r.buf)] }

// reset empties the ring: it holds every event after rev (none yet).
func (r *ring) reset(rev int64) {
	for i := 0; i < r.n; i++ {
		*r.at(i) = state.Event{}
	}
	r.head, r.n, r.bytes, r.base = 0, 0, 0, rev
	r.pushed = nil
}

// push appends the events of whole revisions, the newest so far, handed
// to the hub at now, making room by dropping the oldest revisions.
// Revisions too big to hold at all empty the ring, which then holds what
// follows them.
func (r *ring) push(evs []state.Event, now time.Time) {
	size := 0
	for i := range evs {
		size += eventBytes(&evs[i])
	}
	if len(evs) > len(r.buf) || size > r.maxBytes {
		r.reset(evs[len(evs)-1].ModRevision)
		return
	}
	for r.n > 0 && (r.n+len(evs) > len(r.buf) || r.bytes+size > r.maxBytes) {
		r.dropOldest()
	}
	for i := range evs {
		r.buf[(r.head+r.n)%len(r.buf)] = evs[i]
		r.n++
	}
	r.bytes += size
	for len(r.pushed) > 0 && r.pushed[0].rev <= r.base {
		r.pushed = r.pushed[1:]
	}
	r.pushed = append(r.pushed, pushMark{rev: evs[len(evs)-1].ModRevision, at: now})
}

// expire drops the revisions handed to the hub before the given time: a
// stream resuming after one of them catches up from etcd. The ring holds
// what a burst of large changes left in it only for so long, rather than
// until later changes push it out.
func (r *ring) expire(before time.Time) {
	for len(r.pushed) > 0 && r.pushed[0].at.Before(before) {
		rev := r.pushed[0].rev
		r.pushed[0] = pushMark{}
		r.pushed = r.pushed[1:]
		for r.n > 0 && r.at(0).ModRevision <= rev {
			r.dropOldest()
		}
	}
	if len(r.pushed) == 0 {
		r.pushed = nil
	}
}

// dropOldest drops the oldest revision's events.
func (r *ring) dropOldest() {
	rev := r.at(0).ModRevision
	for r.n > 0 && r.at(0).ModRevision == rev {
		e := r.at(0)
		r.bytes -= eventBytes(e)
		*e = state.Event{}
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	r.base = rev
}

// after returns the index of the first event of a revision after rev.
func (r *ring) after(rev int64) int {
	return sort.Search(r.n, func(i int) bool { return r.at(i).ModRevision > rev })
}
