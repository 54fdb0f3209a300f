package modelcache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// retryMax bounds the wait between two cuts while the cache cannot cut
// at the revision wanted: the hub has not handed it out yet, or a stream
// listed past it. Such a change may touch none of the cache's prefixes,
// so no stream wakes the keeper: it looks again, from 1 ms up.
const retryMax = 50 * time.Millisecond

// progressAfter is how long a caller waits for a revision the hub has
// not handed out before the keeper asks etcd for the watch's progress
// (Config.Progress), and progressEvery how often it asks at most: each
// report is handed to every stream of the hub, and the hub hands out a
// change of the model's a moment after etcd commits it.
const (
	progressAfter = 20 * time.Millisecond
	progressEvery = 100 * time.Millisecond
)

// keep follows the model's prefixes through the hub and keeps c's model
// until ctx ends (its error), no call wants it (errIdle), or a stream
// fails (a budget cut, a read error, the hub stopping) or brings a value
// that does not decode.
func (c *Cache) keep(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hub := c.cfg.Hub
	budget := hub.NewBudget(c.cfg.Budget, nil, func(*watchhub.CutError) { c.wake() })
	defer budget.Close()
	prefixes := state.ModelPrefixes()
	streams := make([]*watchhub.Stream, len(prefixes))
	defer func() {
		for _, s := range streams {
			if s != nil {
				s.Close()
			}
		}
	}()
	for i, p := range prefixes {
		s, err := budget.Polled(ctx, p, true, 0, c.wake)
		if err != nil {
			return fmt.Errorf("follow %s: %w", p, err)
		}
		streams[i] = s
	}
	k := &keeper{prefixes: prefixes, pending: make([][]state.WatchBatch, len(prefixes)), listed: make([]bool, len(prefixes))}
	// The first batches are the listings: read at once, each stream by
	// a goroutine of its own (a stream is for one goroutine at a time),
	// as state.Model reads the parts.
	if err := k.listAll(ctx, streams); err != nil {
		return err
	}
	b := state.NewModelBuilder()
	published := false
	check := time.NewTicker(max(c.cfg.Idle/4, time.Millisecond))
	defer check.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	retryIn := time.Millisecond
	// behind is since when a caller waits for a revision the hub has
	// not handed out, and asked when Progress was last called.
	var behind, asked time.Time
	for {
		// Every change up to h was queued for the streams before the hub
		// handed h out: once each stream is drained, the cache holds
		// them all (or a listing of its stream past them).
		h := hub.Revision()
		for i, s := range streams {
			if err := k.drain(ctx, i, s); err != nil {
				return err
			}
		}
		cut := k.canCut(h)
		var want int64
		if cut {
			if published {
				c.mu.Lock()
			}
			if err := k.apply(b, h); err != nil {
				if published {
					c.mu.Unlock()
				}
				return err
			}
			if !published {
				// The listings were applied without the lock: nobody
				// could see b yet.
				c.mu.Lock()
				c.b, published = b, true
			}
			if h > c.rev {
				c.rev = h
				close(c.moved)
				c.moved = make(chan struct{})
			}
			want = c.waitFor
			c.mu.Unlock()
		} else {
			c.mu.Lock()
			want = c.waitFor
			c.mu.Unlock()
		}
		// A listing past h holds the cut back as a caller waiting does:
		// the hub must get there.
		want = max(want, k.listedPast(h))
		switch {
		case want <= h:
			behind = time.Time{}
		case behind.IsZero():
			behind = time.Now()
		case c.cfg.Progress != nil && time.Since(behind) >= progressAfter && time.Since(asked) >= progressEvery:
			// A caller waits for a revision the hub has not handed out
			// (or a stream listed at one), for a while: perhaps a write
			// outside the model's keys, which the hub never sees. etcd's
			// progress report brings the hub there.
			asked = time.Now()
			if err := c.cfg.Progress(ctx); err != nil {
				c.cfg.Logger.Debug("cannot ask etcd for the watch's progress", "error", err)
			}
		}
		var again <-chan time.Time
		if !cut || want > h {
			retry.Reset(retryIn)
			again = retry.C
			retryIn = min(2*retryIn, retryMax)
		} else {
			retryIn = time.Millisecond
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.poke:
		case <-again:
		case <-check.C:
			if c.idle() {
				return errIdle
			}
		}
		if again != nil && !retry.Stop() {
			select {
			case <-retry.C:
			default:
			}
		}
	}
}

// keeper is what keep holds between cuts: each stream's batches not yet
// applied (those after the last cut), and which have been applied a
// listing of.
type keeper struct {
	prefixes []string
	pending  [][]state.WatchBatch
	listed   []bool
}

// listAll takes each stream's first batch, its listing, at once.
func (k *keeper) listAll(ctx context.Context, streams []*watchhub.Stream) error {
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { errs[i] = k.drain(ctx, i, s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// drain takes every batch stream i holds now into its pending batches. A
// listing replaces what was pending: it shows all of it.
func (k *keeper) drain(ctx context.Context, i int, s *watchhub.Stream) error {
	for {
		b, ok, err := s.TryNext(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("follow %s: %w", k.prefixes[i], err)
		case !ok:
			return nil
		case b.Reset:
			k.pending[i] = []state.WatchBatch{b}
		case len(b.Events) > 0:
			k.pending[i] = append(k.pending[i], b)
		}
	}
}

// canCut says whether the cache can be brought to revision h: every
// stream listed, none listed again after h.
func (k *keeper) canCut(h int64) bool {
	for i, p := range k.pending {
		if !k.listed[i] && (len(p) == 0 || !p[0].Reset) {
			return false
		}
		if len(p) > 0 && p[0].Reset && p[0].Revision > h {
			return false
		}
	}
	return true
}

// listedPast returns the latest revision past h a stream listed at and
// has yet to be applied at; 0 when none.
func (k *keeper) listedPast(h int64) int64 {
	var rev int64
	for _, p := range k.pending {
		if len(p) > 0 && p[0].Reset && p[0].Revision > h {
			rev = max(rev, p[0].Revision)
		}
	}
	return rev
}

// apply applies to b every pending change up to h, keeping those after.
func (k *keeper) apply(b *state.ModelBuilder, h int64) error {
	for i, batches := range k.pending {
		rest, err := k.applyStream(b, i, batches, h)
		if err != nil {
			return err
		}
		k.pending[i] = rest
	}
	return nil
}

func (k *keeper) applyStream(b *state.ModelBuilder, i int, batches []state.WatchBatch, h int64) ([]state.WatchBatch, error) {
	for n, wb := range batches {
		if wb.Reset {
			b.Clear(k.prefixes[i])
			k.listed[i] = true
		}
		for j, e := range wb.Events {
			if !wb.Reset && e.ModRevision > h {
				rest := append([]state.WatchBatch{{Revision: wb.Revision, Events: wb.Events[j:]}}, batches[n+1:]...)
				return rest, nil
			}
			if err := b.Apply(e); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}
