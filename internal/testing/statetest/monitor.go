package statetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// Monitor watches a namespace from its first revision and checks every
// committed revision.
type Monitor struct {
	st     *state.State
	opts   Options
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	rev       int64
	errs      []error
	deletes   map[string]int // key → delete events seen
	revisions int            // revisions with changes seen
	checks    int            // invariant checks made
}

// Options tune a Monitor.
type Options struct {
	// CoalesceWithin, when set, folds the batches that arrive within this
	// long of each other into one check of the invariants, of the state
	// after the last of them; life order and ids are still checked at
	// every batch. It is for models too big to check at every revision
	// as fast as they change (a monitor that falls behind never catches
	// up); zero checks the invariants at every batch.
	CoalesceWithin time.Duration
}

// Start starts a monitor of st's namespace and waits until it has seen
// the namespace as it is.
func Start(t testing.TB, st *state.State) *Monitor {
	t.Helper()
	return StartWith(t, st, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, st *state.State, opts Options) *Monitor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Monitor{st: st, opts: opts, cancel: cancel, done: make(chan struct{}), deletes: map[string]int{}}
	ready := make(chan struct{})
	go m.run(ctx, ready)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the monitor's watch delivered nothing within 30s")
	}
	return m
}

func (m *Monitor) run(ctx context.Context, ready chan struct{}) {
	defer close(m.done)
	values := map[string][]byte{}
	lc := state.NewLifeChecker()
	first := true
	var wait *time.Timer
	if m.opts.CoalesceWithin > 0 {
		wait = time.NewTimer(m.opts.CoalesceWithin)
	}
	batches := m.st.Watch(ctx, "", 0)
	for b := range batches {
		changed, errs := m.apply(b, values, lc)
		rev := b.Revision
		for wait != nil && changed {
			wait.Reset(m.opts.CoalesceWithin)
			var more bool
			select {
			case b, more = <-batches:
				if more {
					c, e := m.apply(b, values, lc)
					changed, errs, rev = changed || c, append(errs, e...), b.Revision
				}
			case <-wait.C:
			}
			if !more {
				break
			}
		}
		if changed {
			if err := state.CheckInvariants(&state.Snapshot{Revision: rev, Values: values}); err != nil {
				errs = append(errs, fmt.Errorf("revision %d: %w", rev, err))
			}
		}
		m.mu.Lock()
		m.rev = rev
		m.errs = append(m.errs, errs...)
		if changed {
			m.checks++
		}
		m.mu.Unlock()
		if first {
			close(ready)
			first = false
		}
	}
}

// apply applies one batch to values and checks life order over it.
func (m *Monitor) apply(b state.WatchBatch, values map[string][]byte, lc *state.LifeChecker) (changed bool, errs []error) {
	if b.Reset {
		clear(values)
	}
	for _, e := range b.Events {
		if e.Type == state.EventDelete {
			delete(values, e.Key)
			m.mu.Lock()
			m.deletes[e.Key]++
			m.mu.Unlock()
		} else {
			values[e.Key] = e.Value
		}
	}
	if err := lc.Observe(b); err != nil {
		errs = append(errs, err)
	}
	if len(b.Events) > 0 {
		m.mu.Lock()
		m.revisions++
		m.mu.Unlock()
	}
	return len(b.Events) > 0, errs
}

// Stop waits until the monitor has seen everything committed so far, stops
// it, and fails the test with the violations it found.
func (m *Monitor) Stop(t testing.TB) {
	t.Helper()
	snap, err := m.st.Snapshot(context.Background())
	if err != nil {
		m.Halt()
		t.Fatal(err)
	}
	m.StopAt(t, snap)
}

// StopAt is Stop for what was committed up to snap.
func (m *Monitor) StopAt(t testing.TB, snap *state.Snapshot) {
	t.Helper()
	defer m.Halt()
	// It may be far behind (a big model, a busy machine): give up only
	// once it has made no progress for 30 seconds.
	deadline := time.Now().Add(30 * time.Second)
	last := int64(-1)
	for {
		m.mu.Lock()
		rev := m.rev
		m.mu.Unlock()
		if rev >= snap.Revision {
			break
		}
		if rev != last {
			last, deadline = rev, time.Now().Add(30*time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("monitor stuck at revision %d, want %d", rev, snap.Revision)
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, err := range m.errs {
		if i == 10 {
			t.Errorf("... and %d more", len(m.errs)-10)
			break
		}
		t.Error(err)
	}
}

// Halt stops the monitor without checking anything.
func (m *Monitor) Halt() {
	m.cancel()
	<-m.done
}

// Deleted returns how many delete events of key the monitor saw.
func (m *Monitor) Deleted(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletes[key]
}

// Revisions returns how many revisions with changes the monitor saw (and
// checked life order over).
func (m *Monitor) Revisions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revisions
}

// Checks returns how many times the monitor checked the invariants: once
// a revision with changes, unless Options.CoalesceWithin folded some.
func (m *Monitor) Checks() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checks
}
