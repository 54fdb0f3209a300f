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

// heartbeat calls TaskHeartbeat every heartbeatEvery while any unit of
// the machine runs a task, until ctx ends. A task's start records a
// heartbeat itself.
func (a *Agent) heartbeat(ctx context.Context) {
	for {
		if a.beats.running() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-a.beats.wake:
			}
		}
		if !pause.For(ctx, heartbeatEvery) {
			return
		}
		if a.beats.running() == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := a.cfg.API.TaskHeartbeat(cctx, &pb.TaskHeartbeatRequest{Machine: a.cfg.MachineID})
		cancel()
		if err != nil && ctx.Err() == nil {
			a.logger.Warn("task heartbeat failed", "error", err)
		}
	}
}
