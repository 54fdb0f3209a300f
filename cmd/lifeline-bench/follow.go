package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// follower keeps what the harness waits on (the units, their agents'
// statuses, the entity keys left) current from one watch of the whole
// model, so that waiting costs etcd one watcher rather than a read of the
// whole model twice a second.
type follower struct {
	mu       sync.Mutex
	units    map[string]bool
	agents   map[string]*pb.Status
	entities map[string]bool
	// firstRunning is when each unit's agent was first seen running.
	firstRunning map[string]time.Time
	// lastAgentChange is when a unit agent's status last changed.
	lastAgentChange time.Time
	// changed is signalled, without blocking, after every batch.
	changed chan struct{}
}

var (
	unitsPrefix       = state.UnitKey("")
	agentStatusPrefix = state.StatusKey(state.StatusUnitAgent, "")
)

// follow starts following the model until ctx ends. Start it while the
// model is small: it begins with a listing of everything.
func follow(ctx context.Context, st *state.State) *follower {
	f := &follower{
		units: map[string]bool{}, agents: map[string]*pb.Status{}, entities: map[string]bool{},
		firstRunning: map[string]time.Time{}, changed: make(chan struct{}, 1),
	}
	go func() {
		for b := range st.Watch(ctx, "", 0) {
			f.apply(b)
		}
	}()
	return f
}

func (f *follower) apply(b state.WatchBatch) {
	now := time.Now()
	f.mu.Lock()
	if b.Reset {
		f.units, f.agents, f.entities = map[string]bool{}, map[string]*pb.Status{}, map[string]bool{}
	}
	for _, e := range b.Events {
		put := e.Type == state.EventPut
		if isEntityKey(e.Key) {
			if put {
				f.entities[e.Key] = true
			} else {
				delete(f.entities, e.Key)
			}
		}
		switch {
		case strings.HasPrefix(e.Key, unitsPrefix):
			name := e.Key[len(unitsPrefix):]
			if put {
				f.units[name] = true
			} else {
				delete(f.units, name)
			}
		case strings.HasPrefix(e.Key, agentStatusPrefix):
			name := e.Key[len(agentStatusPrefix):]
			f.lastAgentChange = now
			if !put {
				delete(f.agents, name)
				continue
			}
			s := &pb.Status{}
			if proto.Unmarshal(e.Value, s) != nil {
				continue
			}
			f.agents[name] = s
			if _, ok := f.firstRunning[name]; !ok && s.Data["state"] == "running" {
				f.firstRunning[name] = now
			}
		}
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func isEntityKey(k string) bool {
	for _, p := range state.EntityPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// agentCounts returns the units, and how many of them run and are idle.
func (f *follower) agentCounts() (units, running, idle int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for u := range f.units {
		a := f.agents[u]
		if a == nil || a.Data["state"] != "running" {
			continue
		}
		running++
		if a.Status == "idle" {
			idle++
		}
	}
	return len(f.units), running, idle
}

// wait waits until done says so, checking after every change and every
// tick (for conditions that need time to pass).
func (f *follower) wait(ctx context.Context, tick time.Duration, done func() bool) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.changed:
		case <-t.C:
		}
	}
	return nil
}
