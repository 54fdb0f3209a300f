package controller

import (
	"context"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// rolloutPicture is the rollout worker's copy of what it decides from:
// every rollout and policy, and of every unit its record (life and
// machine), its revisions, its permit, its agent's and workload's
// statuses, and which machines' agents are connected. Each is kept by an
// etcd watch of its prefix (state.Watch: a listing first, then the
// changes, a listing again after a compaction), so that a pass reads
// memory, not 10,000 keys of etcd. The watches are separate, so the
// picture may show one prefix a moment ahead of another; every step the
// worker takes is a transaction of state that checks what it needs, so
// a stale picture costs a refused or idle step, never a broken rule.
type rolloutPicture struct {
	mu sync.Mutex
	// listed says which of the watches have delivered their first
	// listing: the worker waits for all of them.
	listed   [pictureKinds]bool
	rollouts map[string]*pb.Rollout
	policies map[string]*pb.RolloutPolicy
	units    map[string]*unitPicture
	// services holds each service's units, and sorted says its slice is
	// in unit number order (a unit's coming or going unsorts it).
	services map[string]*servicePicture
	// present holds the machines whose agent is connected.
	present map[string]bool
	// changed gets a token when the picture changed.
	changed chan struct{}
}

type servicePicture struct {
	units  []*unitPicture
	sorted bool
}

// unitPicture is what the worker knows of one unit.
type unitPicture struct {
	name   string
	num    int64
	exists bool // its units/ record
	// dead says its record is dead: its agent is gone. A dying unit is
	// granted a permit as an alive one is: one in error on a failed
	// revision gives the failed move up for the newer target (the unit
	// agent drops it) and goes on dying, where without it it would hold
	// up its own death.
	dead    bool
	machine string
	hasRev  bool // its unit-revisions/ record
	current int64
	target  int64
	permit  int64 // the revision its permit is for; 0 for none
	// permitRev is the etcd revision of its permit's last write (a grant
	// or a retarget).
	permitRev int64
	// permitBlocked says its workload was blocked when the permit was
	// granted (pb.Permit.workload_blocked).
	permitBlocked bool
	agent         string
	agentMsg      string
	// agentRev is the etcd revision at which its agent's status or
	// message last changed (a report of the same status again does not
	// count): an error after the permit's write is an error on the
	// permit's revision, one before it is not.
	agentRev int64
	workload string
}

// The kinds of record the picture follows, one watch each.
const (
	kindRollout = iota
	kindPolicy
	kindUnit
	kindUnitRevision
	kindPermit
	kindAgentStatus
	kindWorkloadStatus
	kindPresence
	pictureKinds
)

// picturePrefixes are the prefixes followed, by kind.
var picturePrefixes = [pictureKinds]string{
	kindRollout:        state.RolloutsRoot,
	kindPolicy:         state.RolloutPoliciesRoot,
	kindUnit:           state.UnitKey(""),
	kindUnitRevision:   state.UnitRevisionsRoot,
	kindPermit:         state.PermitsRoot,
	kindAgentStatus:    state.StatusKey(state.StatusUnitAgent, ""),
	kindWorkloadStatus: state.StatusKey(state.StatusUnit, ""),
	kindPresence:       state.PresencePrefix,
}

func newRolloutPicture() *rolloutPicture {
	return &rolloutPicture{
		rollouts: map[string]*pb.Rollout{}, policies: map[string]*pb.RolloutPolicy{},
		units: map[string]*unitPicture{}, services: map[string]*servicePicture{},
		present: map[string]bool{}, changed: make(chan struct{}, 1),
	}
}

// follow keeps kind's records until ctx ends.
func (p *rolloutPicture) follow(ctx context.Context, st *state.State, kind int) {
	for b := range st.Watch(ctx, picturePrefixes[kind], 0) {
		p.apply(kind, b)
	}
}

// ready says whether every watch has listed.
func (p *rolloutPicture) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listed {
		if !l {
			return false
		}
	}
	return true
}

// apply takes in a batch of kind's watch.
func (p *rolloutPicture) apply(kind int, b state.WatchBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.Reset {
		p.forget(kind)
		p.listed[kind] = true
	}
	for _, e := range b.Events {
		p.applyEvent(kind, e)
	}
	if len(b.Events) > 0 || b.Reset {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// forget drops what the picture knows of kind, before its listing.
func (p *rolloutPicture) forget(kind int) {
	switch kind {
	case kindRollout:
		clear(p.rollouts)
		return
	case kindPolicy:
		clear(p.policies)
		return
	case kindPresence:
		clear(p.present)
		return
	}
	for _, u := range p.units {
		p.setUnit(kind, u, nil, 0)
	}
	for name, u := range p.units {
		p.pruneUnit(name, u)
	}
}

func (p *rolloutPicture) applyEvent(kind int, e state.Event) {
	rest := strings.TrimPrefix(e.Key, picturePrefixes[kind])
	// value is nil for a deletion; a put of an empty value is not nil.
	var value []byte
	if e.Type == state.EventPut {
		value = e.Value
		if value == nil {
			value = []byte{}
		}
	}
	switch kind {
	case kindRollout:
		ro := &pb.Rollout{}
		if value == nil || proto.Unmarshal(value, ro) != nil {
			delete(p.rollouts, rest)
			return
		}
		p.rollouts[rest] = ro
		return
	case kindPolicy:
		pol := &pb.RolloutPolicy{}
		if value == nil || proto.Unmarshal(value, pol) != nil {
			delete(p.policies, rest)
			return
		}
		p.policies[rest] = pol
		return
	case kindPresence:
		if id, ok := strings.CutPrefix(rest, names.KindMachine+"-"); ok {
			if value == nil {
				delete(p.present, id)
			} else {
				p.present[id] = true
			}
		}
		return
	case kindPermit:
		// permits/<service>/<unit>
		_, rest, _ = strings.Cut(rest, "/")
	}
	u := p.units[rest]
	if u == nil {
		if value == nil {
			return
		}
		u = &unitPicture{name: rest, num: names.UnitNumber(rest)}
		p.units[rest] = u
		sp := p.services[names.UnitService(rest)]
		if sp == nil {
			sp = &servicePicture{}
			p.services[names.UnitService(rest)] = sp
		}
		sp.units = append(sp.units, u)
		sp.sorted = false
	}
	p.setUnit(kind, u, value, e.ModRevision)
	if value == nil {
		p.pruneUnit(rest, u)
	}
}

// setUnit sets kind's part of u from a record's value written at etcd
// revision rev; nil clears it.
func (p *rolloutPicture) setUnit(kind int, u *unitPicture, value []byte, rev int64) {
	switch kind {
	case kindUnit:
		rec := &pb.Unit{}
		if value == nil || proto.Unmarshal(value, rec) != nil {
			u.exists, u.dead, u.machine = false, false, ""
			return
		}
		u.exists, u.dead, u.machine = true, rec.Life == pb.Life_LIFE_DEAD, rec.MachineId
	case kindUnitRevision:
		rec := &pb.UnitRevision{}
		if value == nil || proto.Unmarshal(value, rec) != nil {
			u.hasRev, u.current, u.target = false, 0, 0
			return
		}
		u.hasRev, u.current, u.target = true, rec.Current, rec.Target
	case kindPermit:
		rec := &pb.Permit{}
		if value == nil || proto.Unmarshal(value, rec) != nil {
			u.permit, u.permitRev, u.permitBlocked = 0, 0, false
			return
		}
		u.permit, u.permitRev, u.permitBlocked = rec.Revision, rev, rec.WorkloadBlocked
	case kindAgentStatus:
		rec := &pb.Status{}
		if value == nil || proto.Unmarshal(value, rec) != nil {
			u.agent, u.agentMsg, u.agentRev = "", "", 0
			return
		}
		if rec.Status != u.agent || rec.Message != u.agentMsg || u.agentRev == 0 {
			u.agentRev = rev
		}
		u.agent, u.agentMsg = rec.Status, rec.Message
	case kindWorkloadStatus:
		rec := &pb.Status{}
		if value == nil || proto.Unmarshal(value, rec) != nil {
			u.workload = ""
			return
		}
		u.workload = rec.Status
	}
}

// pruneUnit drops a unit the picture no longer holds anything of.
func (p *rolloutPicture) pruneUnit(name string, u *unitPicture) {
	if u.exists || u.hasRev || u.permit != 0 || u.agent != "" || u.workload != "" {
		return
	}
	delete(p.units, name)
	svc := names.UnitService(name)
	sp := p.services[svc]
	if sp == nil {
		return
	}
	if i := slices.Index(sp.units, u); i >= 0 {
		sp.units = slices.Delete(sp.units, i, i+1)
	}
	if len(sp.units) == 0 {
		delete(p.services, svc)
	}
}

// serviceUnits returns the service's units in number order; the picture's
// lock is held.
func (p *rolloutPicture) serviceUnits(service string) []*unitPicture {
	sp := p.services[service]
	if sp == nil {
		return nil
	}
	if !sp.sorted {
		slices.SortFunc(sp.units, func(a, b *unitPicture) int {
			if a.num != b.num {
				if a.num < b.num {
					return -1
				}
				return 1
			}
			return strings.Compare(a.name, b.name)
		})
		sp.sorted = true
	}
	return sp.units
}
