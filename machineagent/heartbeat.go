package machineagent

import (
	"context"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// heartbeatEvery is how often the machine reports its running tasks
// alive: one call a machine, however many tasks its units run.
const heartbeatEvery = 5 * time.Second

// taskBeats counts the tasks each unit agent of the machine runs
// (unitagent.TaskBeats).
type taskBeats struct {
	mu     sync.Mutex
	byUnit map[string]int
	total  int
	// wake is signalled when the first task starts.
	wake chan struct{}
}

// Running records that the unit's agent runs n tasks.
func (b *taskBeats) Running(unit string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += n - b.byUnit[unit]
	if n == 0 {
		delete(b.byUnit, unit)
	} else {
		b.byUnit[unit] = n
	}
	if b.total > 0 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

func (b *taskBeats) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// heartbeatRetry is how soon a failed heartbeat is tried again, doubling
// up to heartbeatEvery: a controller back from a restart hears from the
// machine within a second or two, well before its detector, which waits
// for a task-lost-after of its own leadership, could call the tasks lost.
const heartbeatRetry = time.Second

// heartbeat calls TaskHeartbeat every heartbeatEvery while any unit of
// the machine runs a task, until ctx ends; sooner after one fails. A
// task's start records a heartbeat itself.
func (a *Agent) heartbeat(ctx context.Context) {
	wait := heartbeatEvery
	for {
		if a.beats.running() == 0 {
			wait = heartbeatEvery
			select {
			case <-ctx.Done():
				return
			case <-a.beats.wake:
			}
		}
		if !pause.For(ctx, wait) {
			return
		}
		if a.beats.running() == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := a.cfg.API.TaskHeartbeat(cctx, &pb.TaskHeartbeatRequest{Machine: a.cfg.MachineID})
		cancel()
		switch {
		case err == nil:
			wait = heartbeatEvery
		case ctx.Err() != nil:
			return
		case wait == heartbeatEvery:
			a.logger.Warn("task heartbeat failed; trying again", "error", err, "in", heartbeatRetry)
			wait = heartbeatRetry
		default:
			wait = min(2*wait, heartbeatEvery)
		}
	}
}
