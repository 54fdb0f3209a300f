package state

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Selection names the entities a partial model is read for (ctl status kv
// kv/0 3): the model holds their union.
type Selection struct {
	Services []string
	Units    []string
	Machines []string
}

// MaxSelectors bounds how many names one Selection holds.
const MaxSelectors = 100

// Len is how many names the selection holds.
func (sel Selection) Len() int { return len(sel.Services) + len(sel.Units) + len(sel.Machines) }

// Check says whether every name of the selection is valid and they are at
// most MaxSelectors, as an ErrInvalid error.
func (sel Selection) Check() error {
	if n := sel.Len(); n > MaxSelectors {
		return invalidf("%d selectors: at most %d", n, MaxSelectors)
	}
	for _, n := range sel.Services {
		if err := checkServiceName(n); err != nil {
			return err
		}
	}
	for _, n := range sel.Units {
		if err := checkUnitName(n); err != nil {
			return err
		}
	}
	for _, id := range sel.Machines {
		if err := checkMachineID(id); err != nil {
			return err
		}
	}
	return nil
}

// selectBatch is how many reads SelectModel puts in one round trip: below
// etcd's limit on a transaction's operations.
const selectBatch = 64

// SelectModel reads, at one revision, the selected entities and what
// status shows of them, and nothing else, so that its reads grow with
// what it selects and not with the model:
//
//   - a service: it, all its units, their subordinates and machines, and
//     its relations;
//   - a unit: it, its service, its subordinates and their services, its
//     machine, and those services' relations;
//   - a machine: it, its principal units, their subordinates and services,
//     and those services' relations.
//
// A service the model holds for a unit's or a machine's sake holds only
// those of its units (Model.Partial names it); a relation's scope lists
// only the units the model holds. A name that does not exist is an
// ErrNotFound error; an invalid one, or more than MaxSelectors, ErrInvalid.
func (s *State) SelectModel(ctx context.Context, sel Selection) (*Model, error) {
	if err := sel.Check(); err != nil {
		return nil, err
	}
	r := &selectRead{s: s, ctx: ctx, units: map[string]*pb.Unit{}, services: map[string]*pb.Service{},
		machines: map[string]*pb.Machine{}, relations: map[int64]bool{}, full: map[string]bool{},
		scopes: map[int64]map[string]bool{}}
	if err := r.run(sel); err != nil {
		return nil, err
	}
	return r.model(), nil
}

// selectRead is one SelectModel's reads and what they found.
type selectRead struct {
	s   *State
	ctx context.Context
	rev int64 // the revision every read after the first is at

	units     map[string]*pb.Unit
	services  map[string]*pb.Service
	machines  map[string]*pb.Machine
	relations map[int64]bool
	full      map[string]bool // services held with all their units
	scopes    map[int64]map[string]bool
	rels      []*pb.Relation

	statuses      map[string]*pb.Status
	present       map[string]bool
	unitRevisions map[string]*pb.UnitRevision
	ports         map[string][]string
	leaders       map[string]string
	rollouts      map[string]*pb.Rollout
	cleanups      []*pb.Cleanup
}

// gets performs gets at the selection's revision, selectBatch a round
// trip, and calls f with each answer's keys in gets' order.
func (r *selectRead) gets(gets []getOp, f func(i int, kvs []*mvccpb.KeyValue) error) error {
	for start := 0; start < len(gets); start += selectBatch {
		batch := gets[start:min(start+selectBatch, len(gets))]
		for i := range batch {
			batch[i].Rev = r.rev
		}
		rd, err := r.s.read(r.ctx, batch...)
		if err != nil {
			return err
		}
		if r.rev == 0 {
			r.rev = rd.rev
		}
		for i := range batch {
			if err := f(start+i, rd.all(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// list reads every key with the prefix at the selection's revision.
func (r *selectRead) list(prefix string, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	return r.s.listRev(r.ctx, prefix, keysOnly, r.rev)
}

func (r *selectRead) run(sel Selection) error {
	// The selected entities themselves, which must exist; a machine's
	// principal units come with it.
	var gets []getOp
	for _, n := range sel.Services {
		gets = append(gets, get(ServiceKey(n)))
	}
	for _, n := range sel.Units {
		gets = append(gets, get(UnitKey(n)))
	}
	for _, id := range sel.Machines {
		gets = append(gets, get(MachineKey(id)), getKeys(machineUnitsPrefix(id), 0))
	}
	var expand []string // principal units whose subordinates and scopes to read
	err := r.gets(gets, func(i int, kvs []*mvccpb.KeyValue) error {
		switch {
		case i < len(sel.Services):
			if len(kvs) == 0 {
				return notFoundf("service %s not found", sel.Services[i])
			}
			return decodeTo(kvs[0], r.services, (*pb.Service).GetName)
		case i < len(sel.Services)+len(sel.Units):
			if len(kvs) == 0 {
				return notFoundf("unit %s not found", sel.Units[i-len(sel.Services)])
			}
			expand = append(expand, sel.Units[i-len(sel.Services)])
			return decodeTo(kvs[0], r.units, (*pb.Unit).GetName)
		}
		j := i - len(sel.Services) - len(sel.Units)
		if j%2 == 0 {
			if len(kvs) == 0 {
				return notFoundf("machine %s not found", sel.Machines[j/2])
			}
			return decodeTo(kvs[0], r.machines, (*pb.Machine).GetId)
		}
		for _, kv := range kvs {
			expand = append(expand, strings.TrimPrefix(string(kv.Key), machineUnitsPrefix(sel.Machines[j/2])))
		}
		return nil
	})
	if err != nil {
		return err
	}

	// A selected service: all its units, their subordinates, its relations.
	var subordinates []string
	for _, n := range sel.Services {
		r.full[n] = true
		kvs, err := r.list(ServiceUnitsPrefix(n), false)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			if err := decodeTo(kv, r.units, (*pb.Unit).GetName); err != nil {
				return err
			}
		}
		if kvs, err = r.list(refSubordinates+n+"/", true); err != nil {
			return err
		}
		for _, kv := range kvs {
			subordinates = append(subordinates, subordinateOf(string(kv.Key)))
		}
		if kvs, err = r.list(serviceRelationsPrefix(n), true); err != nil {
			return err
		}
		for _, kv := range kvs {
			if err := r.addRelation(lastSegment(string(kv.Key))); err != nil {
				return err
			}
		}
	}

	// Selected units and machines' units: their records and subordinates.
	gets = gets[:0]
	for _, u := range expand {
		gets = append(gets, get(UnitKey(u)), getKeys(subordinatesPrefix(u), 0))
	}
	err = r.gets(gets, func(i int, kvs []*mvccpb.KeyValue) error {
		if i%2 == 0 {
			if len(kvs) > 0 {
				return decodeTo(kvs[0], r.units, (*pb.Unit).GetName)
			}
			return nil
		}
		for _, kv := range kvs {
			subordinates = append(subordinates, subordinateOf(string(kv.Key)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := r.readUnits(subordinates); err != nil {
		return err
	}
	if err := r.readOwners(); err != nil {
		return err
	}
	if err := r.readRelations(); err != nil {
		return err
	}
	return r.readRecords()
}

// subordinateOf returns the subordinate unit a refs/subordinates key names:
// the key is <prefix><principal>/<unit>, and unit names hold one "/".
func subordinateOf(key string) string {
	rest := strings.TrimPrefix(key, refSubordinates)
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 {
		return rest
	}
	return parts[2]
}

// addRelation notes a relation, by its id as text, to read.
func (r *selectRead) addRelation(id string) error {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return invalidf("corrupt relation reference %q", id)
	}
	r.relations[n] = true
	return nil
}

// inScope notes that unit is in relation rel's scope.
func (r *selectRead) inScope(rel int64, unit string) {
	if r.scopes[rel] == nil {
		r.scopes[rel] = map[string]bool{}
	}
	r.scopes[rel][unit] = true
}

// readUnits reads the records of the named units not read yet.
func (r *selectRead) readUnits(units []string) error {
	var gets []getOp
	for _, u := range units {
		if r.units[u] == nil {
			gets = append(gets, get(UnitKey(u)))
		}
	}
	return r.gets(gets, func(_ int, kvs []*mvccpb.KeyValue) error {
		if len(kvs) == 0 {
			return nil // removed between the reads of its reference and of it: at one revision, never
		}
		return decodeTo(kvs[0], r.units, (*pb.Unit).GetName)
	})
}

// readOwners reads the services and machines of the units held, and the
// relations of the services held for their sake.
func (r *selectRead) readOwners() error {
	var gets []getOp
	asked := map[string]bool{}
	for _, u := range r.units {
		if k := ServiceKey(u.Service); r.services[u.Service] == nil && !asked[k] {
			asked[k] = true
			gets = append(gets, get(k))
		}
		if k := MachineKey(u.MachineId); u.MachineId != "" && r.machines[u.MachineId] == nil && !asked[k] {
			asked[k] = true
			gets = append(gets, get(k))
		}
	}
	err := r.gets(gets, func(_ int, kvs []*mvccpb.KeyValue) error {
		if len(kvs) == 0 {
			return nil
		}
		if strings.HasPrefix(string(kvs[0].Key), servicesPrefix) {
			return decodeTo(kvs[0], r.services, (*pb.Service).GetName)
		}
		return decodeTo(kvs[0], r.machines, (*pb.Machine).GetId)
	})
	if err != nil {
		return err
	}
	gets = gets[:0]
	for n := range r.services {
		if !r.full[n] {
			gets = append(gets, getKeys(serviceRelationsPrefix(n), 0))
		}
	}
	return r.gets(gets, func(_ int, kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			if err := r.addRelation(lastSegment(string(kv.Key))); err != nil {
				return err
			}
		}
		return nil
	})
}

// readRelations reads the relations noted, and of each the units of the
// services held whole in its scope.
func (r *selectRead) readRelations() error {
	ids := make([]int64, 0, len(r.relations))
	for id := range r.relations {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var gets []getOp
	for _, id := range ids {
		gets = append(gets, get(RelationKey(id)))
	}
	err := r.gets(gets, func(_ int, kvs []*mvccpb.KeyValue) error {
		if len(kvs) == 0 {
			return nil
		}
		rec, err := decode[pb.Relation](kvs[0])
		if err != nil {
			return err
		}
		r.rels = append(r.rels, rec.v)
		return nil
	})
	if err != nil {
		return err
	}
	// Each relation's scope: of a service held whole, a range of its
	// units; of the other units held, key by key.
	gets = gets[:0]
	type entry struct {
		rel  int64
		unit string
	}
	var asked []entry
	for _, rel := range r.rels {
		for _, ep := range rel.Endpoints {
			if !r.full[ep.Service] {
				continue
			}
			kvs, err := r.list(ScopePrefix(rel.Id)+ep.Service+"/", true)
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				r.inScope(rel.Id, strings.TrimPrefix(string(kv.Key), ScopePrefix(rel.Id)))
			}
		}
		for name, u := range r.units {
			if r.full[u.Service] || !slices.ContainsFunc(rel.Endpoints, func(ep *pb.RelationEndpoint) bool { return ep.Service == u.Service }) {
				continue
			}
			gets = append(gets, getKeyOnly(ScopeKey(rel.Id, name)))
			asked = append(asked, entry{rel.Id, name})
		}
	}
	return r.gets(gets, func(i int, kvs []*mvccpb.KeyValue) error {
		if len(kvs) > 0 {
			r.inScope(asked[i].rel, asked[i].unit)
		}
		return nil
	})
}

// readRecords reads what status shows beside the entities: statuses (a
// service's own, which its charm sets, included), presence, revisions,
// rollouts and forced removals. A service held whole
// has its units' read as ranges; other units', key by key.
func (r *selectRead) readRecords() error {
	r.statuses, r.present = map[string]*pb.Status{}, map[string]bool{}
	r.unitRevisions, r.rollouts = map[string]*pb.UnitRevision{}, map[string]*pb.Rollout{}
	r.ports, r.leaders = map[string][]string{}, map[string]string{}
	for n := range r.full {
		for _, kind := range unitStatusKinds {
			kvs, err := r.list(StatusKey(kind, n+"/"), false)
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if err := r.record(kv); err != nil {
					return err
				}
			}
		}
		for _, prefix := range []string{unitRevisionsPrefix + n + "/", cleanupKey(cleanupForceUnit, n+"/"), hostPortsPrefix + n + "/"} {
			kvs, err := r.list(prefix, false)
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if err := r.record(kv); err != nil {
					return err
				}
			}
		}
	}
	var gets []getOp
	for name, u := range r.units {
		if r.full[u.Service] {
			continue
		}
		gets = append(gets, get(StatusKey(StatusUnitAgent, name)), get(StatusKey(StatusUnit, name)),
			get(unitRevisionsPrefix+name), get(cleanupKey(cleanupForceUnit, name)), get(HostPortsKey(name)))
	}
	for id := range r.machines {
		gets = append(gets, get(StatusKey(StatusMachine, id)), getKeyOnly(presenceKey(names.MachineTag(id))),
			get(cleanupKey(cleanupForceMachine, id)))
	}
	for n := range r.services {
		gets = append(gets, get(StatusKey(StatusService, n)), get(StatusKey(StatusServiceVersion, n)),
			get(rolloutsPrefix+n), getKeys(LeadershipServicePrefix(n), 1))
	}
	return r.gets(gets, func(_ int, kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			if err := r.record(kv); err != nil {
				return err
			}
		}
		return nil
	})
}

// record decodes one of readRecords' keys into its place.
func (r *selectRead) record(kv *mvccpb.KeyValue) error {
	k := string(kv.Key)
	var msg proto.Message
	switch {
	case strings.HasPrefix(k, statusPrefix):
		st := &pb.Status{}
		r.statuses[k], msg = st, st
	case strings.HasPrefix(k, presencePrefix):
		r.present[strings.TrimPrefix(k, presencePrefix)] = true
		return nil
	case strings.HasPrefix(k, leadershipPrefix):
		if u := LeaderOfKey(k); u != "" {
			r.leaders[names.UnitService(u)] = u
		}
		return nil
	case strings.HasPrefix(k, unitRevisionsPrefix):
		ur := &pb.UnitRevision{}
		r.unitRevisions[strings.TrimPrefix(k, unitRevisionsPrefix)], msg = ur, ur
	case strings.HasPrefix(k, rolloutsPrefix):
		ro := &pb.Rollout{}
		r.rollouts[strings.TrimPrefix(k, rolloutsPrefix)], msg = ro, ro
	case strings.HasPrefix(k, cleanupsPrefix):
		c := &pb.Cleanup{}
		r.cleanups, msg = append(r.cleanups, c), c
	case strings.HasPrefix(k, hostPortsPrefix):
		hp := &pb.HostPorts{}
		if err := proto.Unmarshal(kv.Value, hp); err != nil {
			return invalidf("corrupt record %s: %v", k, err)
		}
		r.ports[strings.TrimPrefix(k, hostPortsPrefix)] = hp.Ports
		return nil
	default:
		return invalidf("unexpected key %s", k)
	}
	if err := proto.Unmarshal(kv.Value, msg); err != nil {
		return invalidf("corrupt record %s: %v", k, err)
	}
	return nil
}

// model assembles what the reads found, ordered as Model orders.
func (r *selectRead) model() *Model {
	m := &Model{Revision: r.rev, Scopes: map[int64][]string{}, Statuses: r.statuses, Present: r.present,
		UnitRevisions: r.unitRevisions, Rollouts: r.rollouts, Cleanups: r.cleanups, Ports: r.ports, Leaders: r.leaders, Partial: map[string]bool{}}
	for _, mach := range r.machines {
		m.Machines = append(m.Machines, mach)
	}
	for n, svc := range r.services {
		m.Services = append(m.Services, svc)
		if !r.full[n] {
			m.Partial[n] = true
		}
	}
	for _, u := range r.units {
		m.Units = append(m.Units, u)
	}
	m.Relations = r.rels
	for id, units := range r.scopes {
		for u := range units {
			if r.units[u] != nil {
				m.Scopes[id] = append(m.Scopes[id], u)
			}
		}
		sort.Slice(m.Scopes[id], func(i, j int) bool { return unitLess(m.Scopes[id][i], m.Scopes[id][j]) })
	}
	sort.Slice(m.Machines, func(i, j int) bool { return numLess(m.Machines[i].Id, m.Machines[j].Id) })
	sort.Slice(m.Services, func(i, j int) bool { return m.Services[i].Name < m.Services[j].Name })
	sort.Slice(m.Units, func(i, j int) bool { return unitLess(m.Units[i].Name, m.Units[j].Name) })
	sort.Slice(m.Relations, func(i, j int) bool { return m.Relations[i].Id < m.Relations[j].Id })
	return m
}

// decodeTo decodes an entity's record into into, by the id id gives.
func decodeTo[T any, P interface {
	*T
	proto.Message
}](kv *mvccpb.KeyValue, into map[string]P, id func(P) string) error {
	var v P = new(T)
	if err := proto.Unmarshal(kv.Value, v); err != nil {
		return invalidf("corrupt record %s: %v", kv.Key, err)
	}
	into[id(v)] = v
	return nil
}
