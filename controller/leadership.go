package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The defaults of the leadership elector.
const (
	// DefaultElectorMinPass is the least time between two passes.
	DefaultElectorMinPass = 100 * time.Millisecond
	// DefaultElectorTick is how often a pass runs when nothing changed,
	// to retry the services a pass could not settle.
	DefaultElectorTick = 2 * time.Second
	// MaxElectorPassServices bounds the services one pass settles: at
	// most electorTries+1 transactions each.
	MaxElectorPassServices = 256
	// electorTries bounds the candidates a pass tries for one service.
	electorTries = 3
)

// LeadershipElectorConfig configures a LeadershipElector.
type LeadershipElectorConfig struct {
	State  *state.State
	Logger hclog.Logger
	// MinPass and Tick: the Default* above when zero.
	MinPass time.Duration
	Tick    time.Duration
}

// Validate reports a configuration NewLeadershipElector cannot use.
func (c LeadershipElectorConfig) Validate() error {
	switch {
	case c.State == nil:
		return errors.New("leadership elector: no state")
	case c.MinPass < 0 || c.Tick < 0:
		return errors.New("leadership elector: a negative setting")
	}
	return nil
}

// LeadershipElector is the controller leader's worker that keeps every
// service led (docs/DESIGN.md, Leadership): it follows the units, the
// machine agents' presence and the leaderships, and for a service whose
// leader no longer holds (its unit not alive, its machine's agent absent)
// or that has none, it elects the first of its alive units whose machine's
// agent is present (state.ElectLeader, which checks all of that in its
// transaction), or vacates the leadership when none can lead. A dead
// agent's leadership passes within the controller's presence timeout
// (the agent's presence key goes then) and one pass.
type LeadershipElector struct {
	cfg LeadershipElectorConfig
}

// NewLeadershipElector returns an elector; Run runs it.
func NewLeadershipElector(cfg LeadershipElectorConfig) (*LeadershipElector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MinPass == 0 {
		cfg.MinPass = DefaultElectorMinPass
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultElectorTick
	}
	cfg.Logger = cfg.Logger.Named("elector")
	return &LeadershipElector{cfg: cfg}, nil
}

// electorUnit is what the elector knows of a unit.
type electorUnit struct {
	machine string
	alive   bool
}

// electorPicture is the elector's copy of the units, the machine agents
// present and the leaders, and the services to look at.
type electorPicture struct {
	mu       sync.Mutex
	listed   [3]bool
	units    map[string]map[string]electorUnit // by service, by unit
	onMach   map[string]map[string]bool        // by machine: its units
	present  map[string]bool                   // machine ids
	leaders  map[string]string                 // by service
	dirty    map[string]bool                   // services
	changed  chan struct{}
	resetAll bool
}

const (
	electorUnits = iota
	electorPresence
	electorLeaders
)

var electorPrefixes = [3]string{state.UnitKey(""), state.PresencePrefix, state.LeadershipPrefix}

// Run keeps the services led until ctx ends.
func (e *LeadershipElector) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	p := &electorPicture{
		units: map[string]map[string]electorUnit{}, onMach: map[string]map[string]bool{},
		present: map[string]bool{}, leaders: map[string]string{}, dirty: map[string]bool{},
		changed: make(chan struct{}, 1),
	}
	var watches sync.WaitGroup
	defer func() {
		cancel()
		watches.Wait()
	}()
	for kind, prefix := range electorPrefixes {
		watches.Add(1)
		go func() {
			defer watches.Done()
			for b := range e.cfg.State.Watch(ctx, prefix, 0) {
				p.apply(kind, b)
			}
		}()
	}
	tick := time.NewTicker(e.cfg.Tick)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed:
		case <-tick.C:
		}
		if d := e.cfg.MinPass - time.Since(last); d > 0 && !pause.For(ctx, d) {
			return nil
		}
		last = time.Now()
		e.pass(ctx, p)
	}
}

// apply takes in a batch of kind's watch, marking the services it
// touches.
func (p *electorPicture) apply(kind int, b state.WatchBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.Reset {
		p.forget(kind)
		p.listed[kind] = true
		p.resetAll = true
	}
	for _, e := range b.Events {
		put := e.Type == state.EventPut
		switch kind {
		case electorUnits:
			name := strings.TrimPrefix(e.Key, electorPrefixes[electorUnits])
			svc := names.UnitService(name)
			if old, ok := p.units[svc][name]; ok && old.machine != "" {
				delete(p.onMach[old.machine], name)
			}
			if !put {
				delete(p.units[svc], name)
				if len(p.units[svc]) == 0 {
					delete(p.units, svc)
				}
			} else {
				u := &pb.Unit{}
				if proto.Unmarshal(e.Value, u) != nil {
					continue
				}
				if p.units[svc] == nil {
					p.units[svc] = map[string]electorUnit{}
				}
				p.units[svc][name] = electorUnit{machine: u.MachineId, alive: u.Life == pb.Life_LIFE_ALIVE}
				if u.MachineId != "" {
					if p.onMach[u.MachineId] == nil {
						p.onMach[u.MachineId] = map[string]bool{}
					}
					p.onMach[u.MachineId][name] = true
				}
			}
			p.dirty[svc] = true
		case electorPresence:
			kind, id, err := names.ParseTag(strings.TrimPrefix(e.Key, state.PresencePrefix))
			if err != nil || kind != names.KindMachine {
				continue
			}
			if put {
				p.present[id] = true
			} else {
				delete(p.present, id)
			}
			for u := range p.onMach[id] {
				p.dirty[names.UnitService(u)] = true
			}
		case electorLeaders:
			unit := state.LeaderOfKey(e.Key)
			if unit == "" {
				continue
			}
			svc := names.UnitService(unit)
			if put {
				p.leaders[svc] = unit
			} else if p.leaders[svc] == unit {
				delete(p.leaders, svc)
			}
			p.dirty[svc] = true
		}
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *electorPicture) forget(kind int) {
	switch kind {
	case electorUnits:
		p.units, p.onMach = map[string]map[string]electorUnit{}, map[string]map[string]bool{}
	case electorPresence:
		p.present = map[string]bool{}
	case electorLeaders:
		p.leaders = map[string]string{}
	}
}

// electorJob is one service a pass settles: its leader as the copy has
// it ("" for none) and its candidates, in order.
type electorJob struct {
	service, leader string
	candidates      []string
}

// take returns up to max services to settle, taking them off the dirty
// set: those whose leader, by the copy, does not hold or who have none
// while a unit could lead. Until every watch has listed it returns none.
func (p *electorPicture) take(max int) []electorJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listed {
		if !l {
			return nil
		}
	}
	if p.resetAll {
		// A listing may have changed anything: look at every service.
		p.resetAll = false
		for svc := range p.units {
			p.dirty[svc] = true
		}
		for svc := range p.leaders {
			p.dirty[svc] = true
		}
	}
	var jobs []electorJob
	for svc := range p.dirty {
		if len(jobs) == max {
			break
		}
		delete(p.dirty, svc)
		units := p.units[svc]
		leader := p.leaders[svc]
		if u, ok := units[leader]; ok && u.alive && p.present[u.machine] {
			continue
		}
		job := electorJob{service: svc, leader: leader}
		for name, u := range units {
			if u.alive && u.machine != "" && p.present[u.machine] {
				job.candidates = append(job.candidates, name)
			}
		}
		if leader == "" && len(job.candidates) == 0 {
			continue
		}
		slices.SortFunc(job.candidates, func(a, b string) int { return unitNumber(a) - unitNumber(b) })
		jobs = append(jobs, job)
	}
	return jobs
}

// retry puts services back to be settled at a later pass.
func (p *electorPicture) retry(services []string) {
	if len(services) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range services {
		p.dirty[s] = true
	}
}

func unitNumber(unit string) int {
	n, _ := strconv.Atoi(unit[strings.LastIndexByte(unit, '/')+1:])
	return n
}

// pass settles up to MaxElectorPassServices services, one at a time.
func (e *LeadershipElector) pass(ctx context.Context, p *electorPicture) {
	jobs := p.take(MaxElectorPassServices)
	var again []string
	for _, j := range jobs {
		if ctx.Err() != nil {
			again = append(again, j.service)
			continue
		}
		if !e.settle(ctx, j) {
			again = append(again, j.service)
		}
	}
	p.retry(again)
	if len(jobs) == MaxElectorPassServices {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// settle elects a leader for j's service, or vacates its leadership when
// no candidate can lead, and reports whether the service is settled.
//
// The copy j comes from is etcd's watches', which etcd hands a change a
// moment before its reads show it: the transactions can find the model as
// it was just before (the leader's agent still present). A service whose
// leader holds by etcd's reading while the copy says it does not is not
// settled, and the next pass looks again (take passes it by once the copy
// agrees). Were it taken as settled, nothing would mark it again, and the
// unit of a gone agent would lead for good.
func (e *LeadershipElector) settle(ctx context.Context, j electorJob) bool {
	log := e.cfg.Logger.With("service", j.service)
	for i, u := range j.candidates {
		if i == electorTries {
			return false
		}
		err := e.cfg.State.ElectLeader(ctx, u)
		switch {
		case err == nil:
			if u != j.leader {
				log.Info("elected a leader", "unit", u, "previous", j.leader)
			}
			return true
		case errors.Is(err, state.ErrRefused) && state.RuleOf(err) == "L1":
			// Someone holds it by etcd's reading, not by the copy's: one
			// of them is behind. The next pass looks again.
			return false
		case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound):
			continue
		default:
			log.Warn("cannot elect a leader; trying again", "unit", u, "error", err)
			return false
		}
	}
	if j.leader == "" {
		return true
	}
	vacated, err := e.cfg.State.VacateLeadership(ctx, j.service)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			log.Warn("cannot vacate the leadership; trying again", "error", err)
			return false
		}
		return true
	}
	if !vacated {
		// The leader holds by etcd's reading, or there is none, not by
		// the copy's: one of them is behind. The next pass looks again.
		return false
	}
	log.Info("no unit can lead: leadership vacated", "previous", j.leader)
	return true
}
