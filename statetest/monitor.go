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
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	rev       int64
	errs      []error
	deletes   map[string]int // key → delete events seen
	revisions int            // revisions with changes checked
}

// Start starts a monitor of st's namespace and waits until it has seen
// the namespace as it is.
func Start(t testing.TB, st *state.State) *Monitor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Monitor{st: st, cancel: cancel, done: make(chan struct{}), deletes: map[string]int{}}
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
	for b := range m.st.Watch(ctx, "", 0) {
		if b.Reset {
			values = map[string][]byte{}
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
		var errs []error
		if err := lc.Observe(b); err != nil {
			errs = append(errs, err)
		}
		if len(b.Events) > 0 {
			if err := state.CheckInvariants(&state.Snapshot{Revision: b.Revision, Values: values}); err != nil {
				errs = append(errs, fmt.Errorf("revision %d: %w", b.Revision, err))
			}
		}
		m.mu.Lock()
		m.rev = b.Revision
		m.errs = append(m.errs, errs...)
		if len(b.Events) > 0 {
			m.revisions++
		}
		m.mu.Unlock()
		if first {
			close(ready)
			first = false
		}
	}
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.mu.Lock()
		rev := m.rev
		m.mu.Unlock()
		if rev >= snap.Revision {
			break
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

// Revisions returns how many revisions with changes the monitor checked.
func (m *Monitor) Revisions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revisions
}
