package controller

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls run each once, on at most max workers at a time or on their own
// goroutines beyond; the workers then end once idle.
func TestHandlerWorkers(t *testing.T) {
	w := newHandlerWorkers(4, 50*time.Millisecond)
	var ran, inside atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(func() {
				inside.Add(1)
				<-release
				inside.Add(-1)
				ran.Add(1)
			})
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); inside.Load() < 16; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 16 calls running at once: the workers queued them", inside.Load())
		}
	}
	close(release)
	wg.Wait()
	if ran.Load() != 16 {
		t.Fatalf("%d calls ran, want 16", ran.Load())
	}
	w.mu.Lock()
	n := w.n
	w.mu.Unlock()
	if n != 4 {
		t.Errorf("%d workers, want 4", n)
	}
	for range 100 {
		w.run(func() { ran.Add(1) })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		n = w.n
		w.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers left after they idled", n)
		}
	}
}
