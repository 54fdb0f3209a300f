package main

import (
	"context"
	"fmt"
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
	mu sync.Mutex
	// units says of each unit whether it is alive; aliveOn counts the
	// alive units of each machine.
	units    map[string]bool
	aliveOn  map[string]int
	machine  map[string]string // each unit's machine
	agents   map[string]*pb.Status
	entities map[string]bool
	// running and idle count the agents whose status says so, kept as
	// statuses change so that checking costs nothing.
	running, idle int
	// firstRunning is when each unit's agent first reported it running,
	// by the time the controller stamped on the status.
	firstRunning map[string]time.Time
	// lastAgentChange is when the follower last saw a unit agent's status
	// change; lastAgentStamp is the latest time the controller stamped on
	// one. The follower can lag behind the controller when the harness's
	// process is short of CPU; the stamps do not.
	lastAgentChange, lastAgentStamp time.Time
	// maxLag is the longest the follower took to see a status after the
	// controller stamped it.
	maxLag time.Duration
	// reports counts the unit agents' status reports seen since the
	// last takeReports, by status, message and state.
	reports map[string]int
	// events counts the watch's events since the last takeEvents.
	events int64
	// rev is the revision of the model the follower has seen.
	rev int64
	// changed is signalled, without blocking, after every batch.
	changed chan struct{}
	// timeline keeps the phase's changes by their revisions.
	timeline timeline
	// started holds the machines whose agents said they started.
	started map[string]bool
}

var (
	unitsPrefix         = state.UnitKey("")
	machinesPrefix      = state.MachineKey("")
	scopesPrefix        = strings.TrimSuffix(state.ScopePrefix(0), "0/")
	agentStatusPrefix   = state.StatusKey(state.StatusUnitAgent, "")
	machineStatusPrefix = state.StatusKey(state.StatusMachine, "")
)

// follow starts following the model until ctx ends. Start it while the
// model is small: it begins with a listing of everything.
func follow(ctx context.Context, st *state.State) *follower {
	f := &follower{
		units: map[string]bool{}, aliveOn: map[string]int{}, machine: map[string]string{},
		agents: map[string]*pb.Status{}, entities: map[string]bool{}, firstRunning: map[string]time.Time{}, changed: make(chan struct{}, 1), reports: map[string]int{},
		started: map[string]bool{},
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
		f.aliveOn, f.machine = map[string]int{}, map[string]string{}
		f.running, f.idle = 0, 0
		f.started = map[string]bool{}
	}
	timeline := !b.Reset && f.timeline.recording()
	f.events += int64(len(b.Events))
	for _, e := range b.Events {
		if timeline {
			f.timeline.event(e)
		}
		put := e.Type == state.EventPut
		if isEntityKey(e.Key) {
			if put {
				f.entities[e.Key] = true
			} else {
				delete(f.entities, e.Key)
			}
		}
		switch {
		case strings.HasPrefix(e.Key, machineStatusPrefix):
			id := e.Key[len(machineStatusPrefix):]
			s := &pb.Status{}
			if put && proto.Unmarshal(e.Value, s) == nil && s.Status == "started" {
				f.started[id] = true
			} else {
				delete(f.started, id)
			}
		case strings.HasPrefix(e.Key, unitsPrefix):
			name := e.Key[len(unitsPrefix):]
			if f.units[name] {
				f.aliveOn[f.machine[name]]--
			}
			if put {
				u := &pb.Unit{}
				decoded := proto.Unmarshal(e.Value, u) == nil
				alive := decoded && u.Life == pb.Life_LIFE_ALIVE
				f.units[name], f.machine[name] = alive, u.MachineId
				if alive {
					f.aliveOn[u.MachineId]++
				}
				if timeline && decoded {
					f.timeline.unit(e.ModRevision, u)
				}
			} else {
				delete(f.units, name)
				delete(f.machine, name)
				if timeline {
					f.timeline.unit(e.ModRevision, nil)
				}
			}
		case strings.HasPrefix(e.Key, agentStatusPrefix):
			name := e.Key[len(agentStatusPrefix):]
			f.lastAgentChange = now
			prev := f.agents[name]
			f.count(prev, -1)
			delete(f.agents, name)
			if !put {
				continue
			}
			s := &pb.Status{}
			if proto.Unmarshal(e.Value, s) != nil {
				continue
			}
			f.agents[name] = s
			f.count(s, 1)
			f.reports[fmt.Sprintf("%s %q (%s)", s.Status, s.Message, s.Data["state"])]++
			stamp := time.Unix(0, s.SinceUnixNano)
			if stamp.After(f.lastAgentStamp) {
				f.lastAgentStamp = stamp
			}
			// A report that changed nothing keeps its old stamp.
			fresh := prev == nil || prev.SinceUnixNano != s.SinceUnixNano
			if lag := now.Sub(stamp); fresh && !b.Reset && lag > f.maxLag {
				f.maxLag = lag
			}
			if _, ok := f.firstRunning[name]; !ok && s.Data["state"] == "running" {
				f.firstRunning[name] = stamp
			}
		}
	}
	if b.Revision > f.rev {
		f.rev = b.Revision
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// takeReports returns the status reports counted since the last call, a
// unit, and starts counting again.
func (f *follower) takeReports(units int) map[string]float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]float64, len(f.reports))
	for k, n := range f.reports {
		out[k] = float64(n) / float64(units)
	}
	f.reports = map[string]int{}
	return out
}

// takeEvents returns the watch's events since the last call.
func (f *follower) takeEvents() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.events
	f.events = 0
	return n
}

// free returns those of ids on which the watch sees no alive unit.
func (f *follower) free(ids map[string]bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range ids {
		if f.aliveOn[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// notAlive counts the units that are dying or dead.
func (f *follower) notAlive() int {
	n := 0
	for _, alive := range f.units {
		if !alive {
			n++
		}
	}
	return n
}

func isEntityKey(k string) bool {
	for _, p := range state.EntityPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// count adds d to the counts s is in; a nil s is in none.
func (f *follower) count(s *pb.Status, d int) {
	if s == nil || s.Data["state"] != "running" {
		return
	}
	f.running += d
	if s.Status == "idle" {
		f.idle += d
	}
}

// agentCounts returns the units, and how many unit agents run and are
// idle. A unit's statuses go with it, so these are the units' agents.
func (f *follower) agentCounts() (units, running, idle int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.units), f.running, f.idle
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

// machinesStarted counts the machines whose agents say they started.
func (f *follower) machinesStarted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}
