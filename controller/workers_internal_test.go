package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
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
	poll.UntilSays(t, "16 calls running at once", func() (bool, string) {
		in := inside.Load()
		return in >= 16, fmt.Sprintf("%d are: the workers queued them", in)
	})
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
	poll.UntilSays(t, "no worker left once they idled", func() (bool, string) {
		w.mu.Lock()
		n = w.n
		w.mu.Unlock()
		return n == 0, fmt.Sprintf("%d workers left", n)
	})
}

// sideBySide runs every item once, all of them at the same time (none
// waits for another), and returns once all have.
func TestHandlerWorkersSideBySide(t *testing.T) {
	w := newHandlerWorkers(2, time.Second)
	const n = 6
	var ran [n]atomic.Int64
	var inside atomic.Int64
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.sideBySide(n, func(i int) {
			inside.Add(1)
			<-release
			ran[i].Add(1)
		})
	}()
	poll.UntilSays(t, fmt.Sprintf("%d items running at once", n), func() (bool, string) {
		in := inside.Load()
		return in >= int64(n), fmt.Sprintf("%d are", in)
	})
	select {
	case <-done:
		t.Fatal("sideBySide returned before its items did")
	default:
	}
	close(release)
	<-done
	for i := range ran {
		if got := ran[i].Load(); got != 1 {
			t.Errorf("item %d ran %d times, want once", i, got)
		}
	}
	w.sideBySide(0, func(int) { t.Error("an item of none ran") })
}

// With every worker busy, a call waits for one rather than running on a
// goroutine of its own, unless it goes ahead of the queue; a call whose
// context ends while it waits does not run.
func TestHandlerWorkersCallWaits(t *testing.T) {
	w := newHandlerWorkers(2, time.Second)
	ctx := context.Background()
	release := make(chan struct{})
	var inside atomic.Int64
	var busy sync.WaitGroup
	for range 2 {
		busy.Add(1)
		go func() {
			defer busy.Done()
			if err := w.call(ctx, false, func() { inside.Add(1); <-release }); err != nil {
				t.Error(err)
			}
		}()
	}
	poll.UntilSays(t, "2 calls on the workers", func() (bool, string) {
		in := inside.Load()
		return in >= 2, fmt.Sprintf("%d are", in)
	})

	// An operator's call goes ahead, on its own goroutine.
	if err := w.call(ctx, true, func() {}); err != nil {
		t.Fatalf("call ahead: %v", err)
	}

	// An agent's waits for a worker.
	var ran atomic.Bool
	waited := make(chan error, 1)
	go func() { waited <- w.call(ctx, false, func() { ran.Store(true) }) }()
	time.Sleep(50 * time.Millisecond)
	if ran.Load() {
		t.Fatal("a call ran while every worker was busy")
	}

	// One whose context ends while it waits returns without running.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- w.call(cctx, false, func() { t.Error("a cancelled call ran") }) }()
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}

	close(release)
	busy.Wait()
	if err := <-waited; err != nil || !ran.Load() {
		t.Fatalf("waiting call: %v, ran %v", err, ran.Load())
	}
	w.mu.Lock()
	n := w.n
	w.mu.Unlock()
	if n != 2 {
		t.Errorf("%d workers, want 2", n)
	}
}

// A worker whose idle time runs out while calls wait for one stays for
// them: with a single worker idling for no time at all, every waiting
// call still runs.
func TestHandlerWorkersWaitersNotStranded(t *testing.T) {
	w := newHandlerWorkers(1, time.Nanosecond)
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := w.call(ctx, false, func() { ran.Add(1) }); err != nil {
				t.Errorf("call: %v", err)
			}
		}()
	}
	wg.Wait()
	if ran.Load() != 200 {
		t.Fatalf("%d calls ran, want 200", ran.Load())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting != 0 || w.n > 1 {
		t.Errorf("%d waiting and %d workers after the calls, want 0 and at most 1", w.waiting, w.n)
	}
}

// Stopping the workers ends the idle ones at once and waits for the busy
// ones' calls; a call waiting for a worker then runs on its own goroutine,
// and so does any call after.
func TestHandlerWorkersStop(t *testing.T) {
	w := newHandlerWorkers(2, time.Hour)
	counted := func(what string, ok func() bool) {
		t.Helper()
		poll.Until(t, what, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return ok()
		})
	}
	// Two workers, both busy until release.
	release := make(chan struct{})
	for range 2 {
		go w.run(func() { <-release })
	}
	counted("two workers", func() bool { return w.n == 2 })
	waited := make(chan error, 1)
	go func() { waited <- w.call(context.Background(), false, func() {}) }()
	counted("call waiting for a worker", func() bool { return w.waiting == 1 })

	stopped := make(chan struct{})
	go func() { w.stop(); close(stopped) }()
	if err := <-waited; err != nil {
		t.Errorf("a call waiting for a worker when they stopped = %v, want it run", err)
	}
	select {
	case <-stopped:
		t.Fatal("stop returned while the workers' calls were running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
	w.mu.Lock()
	n := w.n
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("%d workers counted after stop, want 0", n)
	}
	ran := false
	w.run(func() { ran = true })
	if !ran {
		t.Error("a call after stop did not run")
	}
}
