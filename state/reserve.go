package state

import (
	"context"
	"strconv"
	"sync"
)

// reservations coalesces, within this process, the callers that want
// numbers from one id sequence at once: whoever holds the sequence's lock
// (keyLocks) takes every request queued by then and reserves numbers for
// all of them in one transaction, and each caller then writes what it
// numbered in transactions of its own, side by side with the others'.
// A thousand AddUnits calls of ten units, sixteen at a time, would be a
// chain of a thousand commits one after another on the service's
// sequence, each writing its units; instead each link serves every call
// that queued while the one before it committed, and the units are
// written in parallel.
//
// Numbers reserved are never given out again, used or not: a caller whose
// units cannot be written after all (the service died meanwhile, or its
// context ended) leaves a gap in the sequence, as a crash between the two
// transactions would. Names are never reused, which is what the sequence
// is for; they need not be dense.
type reservations struct {
	mu sync.Mutex
	m  map[string][]*reservation // queued, by sequence key
}

// reservation is one caller's request for n numbers, and its answer.
type reservation struct {
	n      int64
	first  int64 // the first of the caller's n numbers, once served
	err    error
	served bool // first or err is the answer (under reservations.mu)
	again  bool // err was the context's of the caller that reserved
}

// reserve reserves n consecutive numbers of the sequence key and returns
// the first. check, when not nil, is given what the reserving transaction
// read (the sequence first, then the answers of gets, in order) and may
// refuse it; the error it returns is every queued caller's answer, so it must
// not depend on the caller (it reads the same service for all of them).
// The reservation is written before reserve returns; the caller must
// still assert, in the transaction that uses the numbers, whatever check
// checked.
func (s *State) reserve(ctx context.Context, key string, n int64, check func(*reads) error, gets ...getOp) (int64, error) {
	for {
		r := &reservation{n: n}
		s.resv.queue(key, r)
		unlock, err := s.hot.lock(ctx, key)
		if err != nil {
			s.resv.leave(key, r)
			return 0, err
		}
		if batch := s.resv.take(key, r); batch != nil {
			first, err := s.reserveNumbers(ctx, key, batch, check, gets)
			// An error after this caller's context ended is its own, not
			// the others': they ask again.
			s.resv.answer(batch, first, err, err != nil && ctx.Err() != nil)
		}
		unlock()
		first, again, err := s.resv.answerOf(r)
		if again && ctx.Err() == nil {
			continue
		}
		return first, err
	}
}

// reserveNumbers writes the reservation of batch's numbers, one after
// another in queue order, and returns the first number.
func (s *State) reserveNumbers(ctx context.Context, key string, batch []*reservation, check func(*reads) error, gets []getOp) (int64, error) {
	var total int64
	for _, r := range batch {
		total += r.n
	}
	var first int64
	// The reservation is made for every caller queued, not for the one
	// whose context it runs with: it is no caller's change to audit, and
	// numbers reserved but not used are gaps anyway.
	err := s.apply(withoutAudit(ctx), "reserve "+strconv.FormatInt(total, 10)+" numbers of "+key, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, append([]getOp{get(key)}, gets...)...)
		if err != nil {
			return nil, err
		}
		next, rev, err := seqValue(r.one(0))
		if err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(r); err != nil {
				return nil, err
			}
		}
		first = next
		c := &change{}
		c.ifMod(key, rev)
		c.putRaw(key, strconv.FormatInt(next+total, 10))
		return c, nil
	})
	return first, err
}

// queue adds r to key's queue.
func (q *reservations) queue(key string, r *reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string][]*reservation{}
	}
	q.m[key] = append(q.m[key], r)
}

// take returns every request queued for key, when r is among them: the
// caller, holding key's lock, reserves for them all. It returns nil when r
// was served already, by a holder of the lock before.
func (q *reservations) take(key string, r *reservation) []*reservation {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.served {
		return nil
	}
	batch := q.m[key]
	delete(q.m, key)
	return batch
}

// answer gives each of batch its numbers, in order from first, or err,
// to be asked again when again is set.
func (q *reservations) answer(batch []*reservation, first int64, err error, again bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range batch {
		r.served = true
		if err != nil {
			r.err, r.again = err, again
			continue
		}
		r.first = first
		first += r.n
	}
}

// answerOf returns r's answer.
func (q *reservations) answerOf(r *reservation) (first int64, again bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return r.first, r.again, r.err
}

// leave takes r out of key's queue: its caller stopped waiting. A holder
// of the lock that took it already may still reserve its numbers, and they
// are a gap.
func (q *reservations) leave(key string, r *reservation) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.m[key]
	for i, w := range rs {
		if w == r {
			rs = append(rs[:i:i], rs[i+1:]...)
			break
		}
	}
	if len(rs) == 0 {
		delete(q.m, key)
	} else {
		q.m[key] = rs
	}
}
