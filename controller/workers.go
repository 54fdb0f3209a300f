package controller

import (
	"context"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

// handlerWorkers runs the unary calls' handlers on goroutines kept between
// calls. gRPC starts each call on a goroutine of its own, whose stack
// starts small and is grown, a copy at each doubling, on the way down to
// etcd's store and back: 7–9% of the controller's CPU while 10,000 units
// were deployed and destroyed (runtime.copystack). A kept goroutine
// keeps its grown stack (the collector shrinks an idle one now and
// then). A call finds an idle worker, or starts one while there are
// fewer than max, or else waits for one: on its own goroutine it would
// grow a stack as before (still 4–6% of the controller's CPU
// destroying), where waiting costs only the small stack it has. An
// operator's call, which goes ahead of the agents' (state.WithPriority), runs
// on its own goroutine rather than wait. The items of a call
// (sideBySide) never wait: the call they belong to holds a worker. A
// worker idle for a while ends, unless a call waits. Once stopped (its
// owner's Server.Run ending), no worker starts, the idle ones end, and
// stop returns when the busy ones have finished their calls.
type handlerWorkers struct {
	jobs    chan func()
	max     int
	idle    time.Duration
	stopped chan struct{}
	running sync.WaitGroup // the workers

	mu sync.Mutex
	n  int
	// waiting counts the calls waiting for a worker.
	waiting int
	closed  bool
}

// maxHandlerWorkers bounds a Server's handler workers, and so the unary
// calls it handles at once: four times the writes a State has in etcd at
// once (state.DefaultMaxWritesInFlight). A call waiting for its turn to
// write holds its worker; with only as many workers as writes in flight,
// while 10,000 units left a relation every worker was busy and the calls
// beyond ran on goroutines of their own (copystack 6% of the controller's
// CPU destroying). An idle worker
// costs its stack, which the collector shrinks, until it ends.
const maxHandlerWorkers = 4 * state.DefaultMaxWritesInFlight

// workerIdle is how long a handler worker waits for a call before it ends.
const workerIdle = 30 * time.Second

func newHandlerWorkers(max int, idle time.Duration) *handlerWorkers {
	return &handlerWorkers{jobs: make(chan func()), max: max, idle: idle, stopped: make(chan struct{})}
}

// stop ends the workers: the idle ones at once, the busy ones after their
// calls, for which it waits. Calls made after it run on their own
// goroutines.
func (w *handlerWorkers) stop() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stopped)
	}
	w.mu.Unlock()
	w.running.Wait()
}

// call runs a unary call's handler f on a worker and returns once f has
// returned. With every worker busy and max of them, it waits for one, or,
// when ahead is set, runs f on the caller's goroutine. When ctx ends
// while it waits it returns ctx's error and f does not run.
func (w *handlerWorkers) call(ctx context.Context, ahead bool, f func()) error {
	done := make(chan struct{})
	job := func() {
		defer close(done)
		f()
	}
	select {
	case w.jobs <- job:
	default:
		switch w.startOrWait(ahead) {
		case workerStarted:
			go w.work(job)
		case workersBusy:
			f()
			return nil
		case callWaits:
			defer w.doneWaiting()
			select {
			case w.jobs <- job:
			case <-w.stopped:
				f()
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	<-done
	return nil
}

// run runs f on a worker, or on the caller's goroutine when every worker
// is busy and there are max of them, and returns once f has returned: a
// call that never waits.
func (w *handlerWorkers) run(f func()) {
	_ = w.call(context.Background(), true, f)
}

// workerTurn is what startOrWait found for a call.
type workerTurn int

const (
	workerStarted workerTurn = iota // a new worker is counted
	workersBusy                     // every worker is busy and there are max
	callWaits                       // as workersBusy, and the call is counted as waiting
)

// startOrWait counts a new worker unless there are max (or the workers
// are stopped); then, unless ahead, it counts the caller as waiting for
// one until doneWaiting. While a caller waits no worker ends.
func (w *handlerWorkers) startOrWait(ahead bool) workerTurn {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return workersBusy
	case w.n < w.max:
		w.n++
		w.running.Add(1)
		return workerStarted
	case ahead:
		return workersBusy
	default:
		w.waiting++
		return callWaits
	}
}

func (w *handlerWorkers) doneWaiting() {
	w.mu.Lock()
	w.waiting--
	w.mu.Unlock()
}

// work runs job, then the jobs it is given, until it waits w.idle for
// one or the workers stop.
func (w *handlerWorkers) work(job func()) {
	defer w.running.Done()
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for job != nil {
		job()
		job = w.next(idle)
	}
}

// next returns the worker's next job, or nil once it has waited w.idle
// for one while no call waited for a worker (a call that waits gets this
// worker or another sooner than that).
func (w *handlerWorkers) next(idle *time.Timer) func() {
	for {
		idle.Reset(w.idle)
		select {
		case job := <-w.jobs:
			return job
		case <-idle.C:
			if w.end(false) {
				return nil
			}
		case <-w.stopped:
			w.end(true)
			return nil
		}
	}
}

// end uncounts an idle worker and reports true, unless a call waits for
// a worker and the workers are not stopping: then the worker stays.
func (w *handlerWorkers) end(stopping bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting > 0 && !stopping {
		return false
	}
	w.n--
	return true
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
