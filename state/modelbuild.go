package state

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A ModelBuilder keeps the model decoded from its keys as they change, and
// makes Models of it: Model reads every key under ModelPrefixes into one,
// and a controller keeping the model in memory feeds one the changes of a
// watch of those prefixes. What a key means is decoded here alone, for
// both.
//
// A Model made of it at revision R, once the builder holds every change up
// to R and none after, is what Model reads at R. Models share the records,
// which are replaced and never changed, and whatever part did not change
// since the Model before: read them only. A builder is for one goroutine at
// a time.
type ModelBuilder struct {
	machines  map[string]created[*pb.Machine] // by key
	services  map[string]created[*pb.Service]
	units     map[string]*pb.Unit
	relations map[string]created[*pb.Relation]
	cleanups  map[string]*pb.Cleanup
	// scopes holds each relation's units in scope; changedScopes the
	// relations whose units changed since the last Model.
	scopes        map[int64]map[string]struct{}
	changedScopes map[int64]bool
	present       map[string]bool
	statuses      map[string]*pb.Status
	unitRevisions map[string]*pb.UnitRevision
	rollouts      map[string]*pb.Rollout
	leaders       map[string]string // leadership key → the unit it names
	ports         map[string][]string
	owners        map[string]ownerRecord // by key

	// changed says which parts changed since last was made; last is the
	// latest Model made, whose unchanged parts the next one shares.
	changed [numModelParts]bool
	last    *Model
}

// created is an entity's record with its create revision: an owner
// record applies only to the incarnation it was written for.
type created[P any] struct {
	v      P
	create int64
}

// ownerRecord is an owner record decoded: what it names ("<kind>/<id>"),
// the key of that entity, and the record.
type ownerRecord struct {
	kindID, entity string
	o              *pb.Owner
}

// modelPart is one of the prefixes a Model is read from.
type modelPart int

const (
	partMachines modelPart = iota
	partServices
	partUnits
	partRelations
	partCleanups
	partScopes
	partPresence
	partStatuses
	partUnitRevisions
	partRollouts
	partLeadership
	partPorts
	partOwners
	numModelParts
)

// modelParts are the prefixes of the parts, and whether Model reads their
// keys only (the values mean nothing to it).
var modelParts = [numModelParts]struct {
	prefix   string
	keysOnly bool
}{
	partMachines:      {machinesPrefix, false},
	partServices:      {servicesPrefix, false},
	partUnits:         {unitsPrefix, false},
	partRelations:     {relationsPrefix, false},
	partCleanups:      {cleanupsPrefix, false},
	partScopes:        {scopesPrefix, true},
	partPresence:      {presencePrefix, true},
	partStatuses:      {statusPrefix, false},
	partUnitRevisions: {unitRevisionsPrefix, false},
	partRollouts:      {rolloutsPrefix, false},
	partLeadership:    {leadershipPrefix, true},
	partPorts:         {hostPortsPrefix, false},
	partOwners:        {ownersPrefix, false},
}

// ModelPrefixes are the prefixes a Model is read from: what a ModelBuilder
// is fed the changes of. None is a prefix of another.
func ModelPrefixes() []string {
	out := make([]string, numModelParts)
	for i, p := range modelParts {
		out[i] = p.prefix
	}
	return out
}

// NewModelBuilder returns a builder of the empty model.
func NewModelBuilder() *ModelBuilder {
	b := &ModelBuilder{}
	for p := range numModelParts {
		b.clear(p)
	}
	return b
}

// partOf returns the part key is in; false for a key of none.
func partOf(key string) (modelPart, bool) {
	for p, mp := range modelParts {
		if strings.HasPrefix(key, mp.prefix) {
			return modelPart(p), true
		}
	}
	return 0, false
}

// Apply applies one change of a key; a key under none of ModelPrefixes is
// ignored. An error says the value does not decode (or the key does not
// parse): the builder no longer holds what the keys say.
func (b *ModelBuilder) Apply(e Event) error {
	p, ok := partOf(e.Key)
	if !ok {
		return nil
	}
	if e.Type == EventDelete {
		return b.delete(p, e.Key)
	}
	return b.put(p, e.Key, e.Value, e.CreateRevision)
}

// Clear forgets every key under prefix, one of ModelPrefixes: a listing of
// it (a Reset batch) follows.
func (b *ModelBuilder) Clear(prefix string) {
	if p, ok := partOf(prefix); ok && modelParts[p].prefix == prefix {
		b.clear(p)
	}
}

func (b *ModelBuilder) clear(p modelPart) {
	b.changed[p] = true
	switch p {
	case partMachines:
		b.machines = map[string]created[*pb.Machine]{}
	case partServices:
		b.services = map[string]created[*pb.Service]{}
	case partUnits:
		b.units = map[string]*pb.Unit{}
	case partRelations:
		b.relations = map[string]created[*pb.Relation]{}
	case partCleanups:
		b.cleanups = map[string]*pb.Cleanup{}
	case partScopes:
		b.scopes, b.changedScopes = map[int64]map[string]struct{}{}, map[int64]bool{}
	case partPresence:
		b.present = map[string]bool{}
	case partStatuses:
		b.statuses = map[string]*pb.Status{}
	case partUnitRevisions:
		b.unitRevisions = map[string]*pb.UnitRevision{}
	case partRollouts:
		b.rollouts = map[string]*pb.Rollout{}
	case partLeadership:
		b.leaders = map[string]string{}
	case partPorts:
		b.ports = map[string][]string{}
	case partOwners:
		b.owners = map[string]ownerRecord{}
	}
}

// put records key's value, in part p. Puts to different parts may run at
// once (Model reads the parts at once): each touches its part alone.
func (b *ModelBuilder) put(p modelPart, key string, value []byte, create int64) error {
	b.changed[p] = true
	switch p {
	case partMachines:
		return putCreated(b.machines, key, value, create)
	case partServices:
		return putCreated(b.services, key, value, create)
	case partUnits:
		v, err := unmarshal[pb.Unit](key, value, "")
		if err == nil {
			b.units[key] = v
		}
		return err
	case partRelations:
		return putCreated(b.relations, key, value, create)
	case partCleanups:
		v, err := unmarshal[pb.Cleanup](key, value, "")
		if err == nil {
			b.cleanups[key] = v
		}
		return err
	case partScopes:
		id, unit, err := scopeOfKey(key)
		if err != nil {
			return err
		}
		in := b.scopes[id]
		if in == nil {
			in = map[string]struct{}{}
			b.scopes[id] = in
		}
		in[unit] = struct{}{}
		b.changedScopes[id] = true
	case partPresence:
		b.present[strings.TrimPrefix(key, presencePrefix)] = true
	case partStatuses:
		v, err := unmarshal[pb.Status](key, value, "status")
		if err == nil {
			b.statuses[key] = v
		}
		return err
	case partUnitRevisions:
		v, err := unmarshal[pb.UnitRevision](key, value, "unit revision")
		if err == nil {
			b.unitRevisions[strings.TrimPrefix(key, unitRevisionsPrefix)] = v
		}
		return err
	case partRollouts:
		v, err := unmarshal[pb.Rollout](key, value, "rollout")
		if err == nil {
			b.rollouts[strings.TrimPrefix(key, rolloutsPrefix)] = v
		}
		return err
	case partLeadership:
		if u := LeaderOfKey(key); u != "" {
			b.leaders[key] = u
		}
	case partPorts:
		v, err := unmarshal[pb.HostPorts](key, value, "ports")
		if err == nil {
			b.ports[strings.TrimPrefix(key, hostPortsPrefix)] = v.Ports
		}
		return err
	case partOwners:
		// A record that names no entity or does not decode is no
		// owner: status shows none (the invariant checker reports it).
		kindID := strings.TrimPrefix(key, ownersPrefix)
		kind, id, _ := strings.Cut(kindID, "/")
		ent, err := ownedEntityKey(kind, id)
		o := &pb.Owner{}
		if err != nil || proto.Unmarshal(value, o) != nil {
			delete(b.owners, key)
			return nil
		}
		b.owners[key] = ownerRecord{kindID: kindID, entity: ent, o: o}
	}
	return nil
}

// delete forgets key, in part p.
func (b *ModelBuilder) delete(p modelPart, key string) error {
	b.changed[p] = true
	switch p {
	case partMachines:
		delete(b.machines, key)
	case partServices:
		delete(b.services, key)
	case partUnits:
		delete(b.units, key)
	case partRelations:
		delete(b.relations, key)
	case partCleanups:
		delete(b.cleanups, key)
	case partScopes:
		id, unit, err := scopeOfKey(key)
		if err != nil {
			return err
		}
		if in := b.scopes[id]; in != nil {
			delete(in, unit)
			if len(in) == 0 {
				delete(b.scopes, id)
			}
		}
		b.changedScopes[id] = true
	case partPresence:
		delete(b.present, strings.TrimPrefix(key, presencePrefix))
	case partStatuses:
		delete(b.statuses, key)
	case partUnitRevisions:
		delete(b.unitRevisions, strings.TrimPrefix(key, unitRevisionsPrefix))
	case partRollouts:
		delete(b.rollouts, strings.TrimPrefix(key, rolloutsPrefix))
	case partLeadership:
		delete(b.leaders, key)
	case partPorts:
		delete(b.ports, strings.TrimPrefix(key, hostPortsPrefix))
	case partOwners:
		delete(b.owners, key)
	}
	return nil
}

// unmarshal decodes a record: a model's value that does not decode is an
// error, named what (decode's words when empty).
func unmarshal[T any, P interface {
	*T
	proto.Message
}](key string, value []byte, what string) (P, error) {
	var m P = new(T)
	if err := proto.Unmarshal(value, m); err != nil {
		if what == "" {
			return nil, fmt.Errorf("decode %s: %w", key, err)
		}
		return nil, invalidf("corrupt %s %s: %v", what, key, err)
	}
	return m, nil
}

func putCreated[T any, P interface {
	*T
	proto.Message
}](into map[string]created[P], key string, value []byte, create int64) error {
	v, err := unmarshal[T, P](key, value, "")
	if err == nil {
		into[key] = created[P]{v: v, create: create}
	}
	return err
}

// scopeOfKey parses a scope key: the relation's id and the unit.
func scopeOfKey(key string) (int64, string, error) {
	rel, unit, _ := strings.Cut(strings.TrimPrefix(key, scopesPrefix), "/")
	id, err := strconv.ParseInt(rel, 10, 64)
	if err != nil {
		return 0, "", invalidf("corrupt scope key %s", key)
	}
	return id, unit, nil
}

// Changed says whether the builder took a change since the last Model it
// made (always before its first): if not, the next Model is the last one
// at another revision.
func (b *ModelBuilder) Changed() bool {
	return b.last == nil || slices.Contains(b.changed[:], true)
}

// Model returns the model the builder holds, at revision rev (the
// revision it holds every change up to). It shares with the Model made
// before it every part that did not change since.
func (b *ModelBuilder) Model(rev int64) *Model {
	return b.model(rev, false)
}

// model is Model; with own, the builder is not used again, and its maps
// are handed over rather than copied.
func (b *ModelBuilder) model(rev int64, own bool) *Model {
	prev := b.last
	if prev == nil {
		prev = &Model{}
		b.changed = [numModelParts]bool{}
		for p := range numModelParts {
			b.changed[p] = true
		}
	}
	ch := b.changed
	m := &Model{Revision: rev}
	m.Machines = pick(ch[partMachines], prev.Machines, func() []*pb.Machine {
		out := values(b.machines)
		sort.Slice(out, func(i, j int) bool { return numLess(out[i].Id, out[j].Id) })
		return out
	})
	m.Services = pick(ch[partServices], prev.Services, func() []*pb.Service { return byKey(b.services) })
	m.Units = pick(ch[partUnits], prev.Units, func() []*pb.Unit {
		if len(b.units) == 0 {
			return nil
		}
		out := make([]*pb.Unit, 0, len(b.units))
		for _, u := range b.units {
			out = append(out, u)
		}
		sort.Slice(out, func(i, j int) bool { return unitLess(out[i].Name, out[j].Name) })
		return out
	})
	m.Relations = pick(ch[partRelations], prev.Relations, func() []*pb.Relation {
		out := values(b.relations)
		sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
		return out
	})
	m.Cleanups = pick(ch[partCleanups], prev.Cleanups, func() []*pb.Cleanup {
		keys := slices.Sorted(maps.Keys(b.cleanups))
		var out []*pb.Cleanup
		for _, k := range keys {
			out = append(out, b.cleanups[k])
		}
		return out
	})
	m.Scopes = pick(ch[partScopes], prev.Scopes, func() map[int64][]string {
		out := make(map[int64][]string, len(b.scopes))
		for id, in := range b.scopes {
			if units, ok := prev.Scopes[id]; ok && !b.changedScopes[id] {
				out[id] = units
				continue
			}
			units := make([]string, 0, len(in))
			for u := range in {
				units = append(units, u)
			}
			sort.Slice(units, func(i, j int) bool { return unitLess(units[i], units[j]) })
			out[id] = units
		}
		clear(b.changedScopes)
		return out
	})
	m.Present = pickMap(ch[partPresence], own, prev.Present, b.present)
	m.Statuses = pickMap(ch[partStatuses], own, prev.Statuses, b.statuses)
	m.UnitRevisions = pickMap(ch[partUnitRevisions], own, prev.UnitRevisions, b.unitRevisions)
	m.Rollouts = pickMap(ch[partRollouts], own, prev.Rollouts, b.rollouts)
	m.Ports = pickMap(ch[partPorts], own, prev.Ports, b.ports)
	m.Leaders = pick(ch[partLeadership], prev.Leaders, func() map[string]string {
		// A service has one leadership key; were there two, the last
		// in key order would name the leader, as a listing reads them.
		out := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(b.leaders)) {
			u := b.leaders[k]
			out[names.UnitService(u)] = u
		}
		return out
	})
	m.Owners = pick(ch[partOwners] || ch[partMachines] || ch[partServices] || ch[partRelations], prev.Owners, func() map[string]*pb.Owner {
		out := map[string]*pb.Owner{}
		for _, r := range b.owners {
			if create, ok := b.createRevision(r.entity); ok && create == r.o.EntityCreateRevision {
				out[r.kindID] = r.o
			}
		}
		return out
	})
	b.changed = [numModelParts]bool{}
	if !own {
		b.last = m
	}
	return m
}

// createRevision returns the create revision of the machine, service or
// relation at key.
func (b *ModelBuilder) createRevision(key string) (int64, bool) {
	var create int64
	var ok bool
	switch {
	case strings.HasPrefix(key, machinesPrefix):
		var c created[*pb.Machine]
		c, ok = b.machines[key]
		create = c.create
	case strings.HasPrefix(key, servicesPrefix):
		var c created[*pb.Service]
		c, ok = b.services[key]
		create = c.create
	case strings.HasPrefix(key, relationsPrefix):
		var c created[*pb.Relation]
		c, ok = b.relations[key]
		create = c.create
	}
	return create, ok
}

// pick returns prev when the part did not change, else what build
// makes.
func pick[T any](changed bool, prev T, build func() T) T {
	if !changed {
		return prev
	}
	return build()
}

// pickMap returns prev when the part did not change, else the builder's
// map: itself when owned, else a copy.
func pickMap[V any](changed, own bool, prev, cur map[string]V) map[string]V {
	switch {
	case !changed && prev != nil:
		return prev
	case own:
		return cur
	}
	return maps.Clone(cur)
}

// values returns the records of m, in no order (nil when none).
func values[P any](m map[string]created[P]) []P {
	if len(m) == 0 {
		return nil
	}
	out := make([]P, 0, len(m))
	for _, c := range m {
		out = append(out, c.v)
	}
	return out
}

// byKey returns the records of m in key order.
func byKey[P any](m map[string]created[P]) []P {
	var out []P
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k].v)
	}
	return out
}
