package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// follower keeps what the harness waits on (the units, the machines, the
// agents' statuses) current from watches of those prefixes alone, so that
// waiting costs etcd a few watchers rather than a read of the whole model
// twice a second. It does not watch the rest of the model (scopes,
// settings, references, the units' own statuses): those were two thirds
// of the events a watch of everything carried, 11.6 a unit destroying,
// each sent by the controller and decoded here while the harness measures
// the controller. Whether the
// whole model is gone is read from etcd at the end instead (waitEmpty).
type follower struct {
	mu sync.Mutex
	// units says of each unit whether it is alive; aliveOn counts the
	// alive units of each machine.
	units    map[string]bool
	aliveOn  map[string]int
	machine  map[string]string // each unit's machine
	agents   map[string]*pb.Status
	machines map[string]bool // the machine keys
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
	// rev is, for each watch (by its prefix), the revision of its last
	// listing or change: when what it follows last changed, whatever
	// progress reports came since.
	rev map[string]int64
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

// followed are the prefixes the follower watches.
var followed = []string{unitsPrefix, machinesPrefix, machineStatusPrefix, agentStatusPrefix}

// follow starts following the model until ctx ends; with timeline, the
// scopes too, for the timeline's counts. Start it while the model is
// small: each watch begins with a listing of its prefix.
func follow(ctx context.Context, st *state.State, timeline bool) *follower {
	f := &follower{
		units: map[string]bool{}, aliveOn: map[string]int{}, machine: map[string]string{},
		agents: map[string]*pb.Status{}, machines: map[string]bool{}, firstRunning: map[string]time.Time{}, changed: make(chan struct{}, 1), reports: map[string]int{},
		started: map[string]bool{}, rev: map[string]int64{},
	}
	prefixes := followed
	if timeline {
		prefixes = append(slices.Clip(prefixes), scopesPrefix)
	}
	for _, p := range prefixes {
		go func() {
			for b := range st.Watch(ctx, p, 0) {
				f.apply(p, b)
			}
		}()
	}
	return f
}

// apply takes in a batch of the watch of prefix.
func (f *follower) apply(prefix string, b state.WatchBatch) {
	now := time.Now()
	f.mu.Lock()
	if b.Reset {
		f.reset(prefix)
	}
	timeline := !b.Reset && f.timeline.recording()
	f.events += int64(len(b.Events))
	for _, e := range b.Events {
		if timeline {
			f.timeline.event(e)
		}
		put := e.Type == state.EventPut
		switch {
		case strings.HasPrefix(e.Key, machinesPrefix):
			if put {
				f.machines[e.Key] = true
			} else {
				delete(f.machines, e.Key)
			}
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
	if (b.Reset || len(b.Events) > 0) && b.Revision > f.rev[prefix] {
		f.rev[prefix] = b.Revision
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// reset forgets what the watch of prefix told, before a listing of it.
func (f *follower) reset(prefix string) {
	switch prefix {
	case unitsPrefix:
		f.units, f.aliveOn, f.machine = map[string]bool{}, map[string]int{}, map[string]string{}
	case machinesPrefix:
		f.machines = map[string]bool{}
	case machineStatusPrefix:
		f.started = map[string]bool{}
	case agentStatusPrefix:
		f.agents = map[string]*pb.Status{}
		f.running, f.idle = 0, 0
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
