package controller

import (
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// handlerWorkers runs the unary calls' handlers on goroutines kept between
// calls. gRPC starts each call on a goroutine of its own, whose stack
// starts small and is grown, a copy at each doubling, on the way down to
// etcd's store and back: 7–9% of the controller's CPU while 10,000 units
// were deployed and destroyed (runtime.copystack; docs/PERFORMANCE.md,
// nineteenth round). A kept goroutine keeps its grown stack (the collector
// shrinks an idle one now and then). A call finds an idle worker, or
// starts one while there are fewer than max, or else runs on its own
// goroutine as before: the workers add no queue and bound nothing. A
// worker idle for a while ends.
type handlerWorkers struct {
	jobs chan func()
	max  int
	idle time.Duration

	mu sync.Mutex
	n  int
}

// maxHandlerWorkers bounds a Server's handler workers: four times the
// writes a State has in etcd at once (state.DefaultMaxWritesInFlight).
// A call waiting for its turn to write holds its worker, and while 10,000
// units left a relation as many as there were writes in flight did: with
// as many workers as that, the calls beyond them ran on goroutines of
// their own and grew their stacks as before (copystack 6% of the
// controller's CPU destroying; docs/PERFORMANCE.md, twenty-third round).
// An idle worker costs its stack, which the collector shrinks, until it
// ends.
const maxHandlerWorkers = 4 * state.DefaultMaxWritesInFlight

// workerIdle is how long a handler worker waits for a call before it ends.
const workerIdle = 30 * time.Second

func newHandlerWorkers(max int, idle time.Duration) *handlerWorkers {
	return &handlerWorkers{jobs: make(chan func()), max: max, idle: idle}
}

// run runs f on a worker, or on the caller's goroutine when every worker
// is busy and there are max of them, and returns once f has returned.
func (w *handlerWorkers) run(f func()) {
	done := make(chan struct{})
	job := func() {
		defer close(done)
		f()
	}
	select {
	case w.jobs <- job:
	default:
		w.mu.Lock()
		start := w.n < w.max
		if start {
			w.n++
		}
		w.mu.Unlock()
		if !start {
			f()
			return
		}
		go w.work(job)
	}
	<-done
}

// work runs job, then the jobs it is given, until it waits w.idle for
// one.
func (w *handlerWorkers) work(job func()) {
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(w.idle)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			w.mu.Lock()
			w.n--
			w.mu.Unlock()
			return
		}
	}
}

// sideBySide runs f(0) to f(n-1) side by side and returns once all have:
// f(0) on the caller's goroutine (a call's handler, on a worker already),
// each other on a worker when one is free, else on a goroutine of its
// own. A call of several items (RemoveUnits) handles them so.
func (w *handlerWorkers) sideBySide(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(func() { f(i) })
		}()
	}
	if n > 0 {
		f(0)
	}
	wg.Wait()
}
