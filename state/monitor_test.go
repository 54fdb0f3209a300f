package state_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// monitor watches a namespace and checks the invariants at every committed
// revision, and life monotonicity over the stream.
type monitor struct {
	st     *state.State
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	rev     int64
	errs    []error
	deletes map[string]int // key → delete events seen
	batches int
}

func startMonitor(t testing.TB, st *state.State) *monitor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &monitor{st: st, cancel: cancel, done: make(chan struct{}), deletes: map[string]int{}}
	ready := make(chan struct{})
	go m.run(ctx, ready)
	<-ready
	return m
}

func (m *monitor) run(ctx context.Context, ready chan struct{}) {
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
		m.batches++
		m.mu.Unlock()
		if first {
			close(ready)
			first = false
		}
	}
}

// stop waits until the monitor has seen everything committed so far, stops
// it, and fails the test with what it found.
func (m *monitor) stop(t testing.TB) {
	t.Helper()
	defer func() {
		m.cancel()
		<-m.done
	}()
	snap, err := m.st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
		if i == 5 {
			t.Errorf("... and %d more", len(m.errs)-5)
			break
		}
		t.Error(err)
	}
}

func (m *monitor) deleted(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletes[key]
}
