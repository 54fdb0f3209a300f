package state

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Snapshot is every key of the namespace at one revision.
type Snapshot struct {
	Revision int64
	// Values maps keys (relative to the namespace) to values.
	Values map[string][]byte
	// Creates maps the keys to their create revisions, when known (a
	// snapshot made of watch events has none).
	Creates map[string]int64
}

// Snapshot reads the model's keys at one revision: every key of the
// namespace but the charm archives' chunks, raw, for the invariant
// checkers (CheckInvariants). A caller that shows or acts on the model
// reads it decoded with Model.
func (s *State) Snapshot(ctx context.Context) (*Snapshot, error) {
	r, err := s.read(ctx, getKeys(machinesPrefix, 1))
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Revision: r.rev, Values: map[string][]byte{}, Creates: map[string]int64{}}
	for _, p := range modelPrefixes {
		kvs, err := s.listRev(ctx, p, false, r.rev)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			snap.Values[string(kv.Key)] = kv.Value
			snap.Creates[string(kv.Key)] = kv.CreateRevision
		}
	}
	return snap, nil
}

// EntityKeys returns the snapshot's keys under EntityPrefixes, sorted: empty
// when the model is.
func (snap *Snapshot) EntityKeys() []string {
	var out []string
	for k := range snap.Values {
		for _, p := range EntityPrefixes {
			if strings.HasPrefix(k, p) {
				out = append(out, k)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// model is a snapshot decoded.
type model struct {
	machines  map[string]*pb.Machine
	services  map[string]*pb.Service
	units     map[string]*pb.Unit
	relations map[int64]*pb.Relation
	scopes    map[string]bool // "<rel>/<unit>"
	settings  map[string]bool
	refs      map[string]bool // every refs/... key
	relkeys   map[string]int64
	configs   map[string]bool
	statuses  []string
	cleanups  map[string]*pb.Cleanup
	seqs      map[string]int64
}

// CheckInvariants checks the model in snap against invariants I2–I7 of
// docs/DESIGN.md, the consistency of the reference keys the rules rely on,
// and that nothing dying is stranded with nobody left to remove it. It
// returns every violation found, joined.
func CheckInvariants(snap *Snapshot) error {
	m, errs := decodeModel(snap)
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	for name, u := range m.units {
		if name != u.Name || names.UnitService(name) != u.Service {
			bad("unit key %s holds unit %s of service %s", name, u.Name, u.Service)
		}
		if _, ok := m.services[u.Service]; !ok {
			bad("I2: unit %s: service %s does not exist", name, u.Service)
		}
		checkLife(bad, "unit "+name, u.Life, true)
		if u.Principal != "" {
			p, ok := m.units[u.Principal]
			if !ok {
				bad("I2: subordinate %s: principal %s does not exist", name, u.Principal)
			} else if p.MachineId != u.MachineId {
				bad("subordinate %s is on machine %q, its principal %s on %q", name, u.MachineId, u.Principal, p.MachineId)
			}
			if !m.refs[subordinateRef(u.Principal, name)] {
				bad("refs: subordinate %s has no reference from %s", name, u.Principal)
			}
		} else if u.MachineId != "" {
			mach, ok := m.machines[u.MachineId]
			if !ok {
				bad("unit %s is assigned to machine %s, which does not exist", name, u.MachineId)
			} else {
				if mach.Life == pb.Life_LIFE_DEAD {
					bad("I3: dead machine %s has unit %s assigned", u.MachineId, name)
				}
				if mach.Life == pb.Life_LIFE_DYING && !mach.Forced && u.Life == pb.Life_LIFE_ALIVE {
					bad("I3: machine %s is dying with alive unit %s assigned", u.MachineId, name)
				}
			}
			if !m.refs[machineUnitRef(u.MachineId, name)] {
				bad("refs: unit %s has no reference from machine %s", name, u.MachineId)
			}
			if alive := m.refs[machineAliveRef(u.MachineId, name)]; alive != (u.Life == pb.Life_LIFE_ALIVE) {
				bad("refs: %s unit %s: alive reference from machine %s is %v", lifeName(u.Life), name, u.MachineId, alive)
			}
		}
		if n, err := strconv.ParseInt(lastSegment(name), 10, 64); err == nil && n >= m.seqs[seqUnitKey(u.Service)] {
			bad("I7: unit %s is not below its sequence %d", name, m.seqs[seqUnitKey(u.Service)])
		}
	}
	for id, mach := range m.machines {
		checkLife(bad, "machine "+id, mach.Life, true)
		if n, _ := strconv.ParseInt(id, 10, 64); n >= m.seqs[seqMachine] {
			bad("I7: machine %s is not below its sequence %d", id, m.seqs[seqMachine])
		}
	}
	for name, svc := range m.services {
		checkLife(bad, "service "+name, svc.Life, false)
		if !m.configs[name] {
			bad("service %s has no config record", name)
		}
	}
	for name := range m.configs {
		if m.services[name] == nil {
			bad("config of service %s, which does not exist", name)
		}
	}
	scopeCount := map[int64]int{}
	for id, rel := range m.relations {
		checkLife(bad, fmt.Sprintf("relation %d", id), rel.Life, false)
		if id >= m.seqs[seqRelation] {
			bad("I7: relation %d is not below its sequence %d", id, m.seqs[seqRelation])
		}
		for _, ep := range rel.Endpoints {
			if _, ok := m.services[ep.Service]; !ok {
				bad("I6: relation %d (%s): service %s does not exist", id, rel.Key, ep.Service)
			}
			if !m.refs[serviceRelationRef(ep.Service, id)] {
				bad("refs: relation %d has no reference from service %s", id, ep.Service)
			}
		}
		if m.relkeys[rel.Key] != id {
			bad("relkeys: relation %d (%s) is not indexed by its key", id, rel.Key)
		}
	}
	for key, id := range m.relkeys {
		if rel, ok := m.relations[id]; !ok || rel.Key != key {
			bad("relkeys: %q points at relation %d, which is not it", key, id)
		}
	}
	for sk := range m.scopes {
		relStr, unit, _ := strings.Cut(sk, "/")
		id, _ := strconv.ParseInt(relStr, 10, 64)
		scopeCount[id]++
		rel, ok := m.relations[id]
		if !ok {
			bad("I4: scope entry %s: relation %d does not exist", sk, id)
		}
		u, ok := m.units[unit]
		switch {
		case !ok:
			bad("I4: scope entry %s: unit %s does not exist", sk, unit)
		case u.Life == pb.Life_LIFE_DEAD:
			bad("I5: dead unit %s is in the scope of relation %d", unit, id)
		case rel != nil && !relationHasService(rel, u.Service):
			bad("scope entry %s: service %s is not in relation %d", sk, u.Service, id)
		}
		if !m.refs[unitScopeRef(unit, id)] {
			bad("refs: scope entry %s has no reference from unit %s", sk, unit)
		}
		if !m.settings[sk] {
			bad("scope entry %s has no settings", sk)
		}
	}
	for sk := range m.settings {
		if !m.scopes[sk] {
			bad("settings %s of a unit not in scope", sk)
		}
	}
	for id, rel := range m.relations {
		if rel.Life == pb.Life_LIFE_DYING && scopeCount[id] == 0 {
			bad("R3: dying relation %d (%s) has no unit in scope: nobody will remove it", id, rel.Key)
		}
	}
	unitsOf := map[string]int{}
	for _, u := range m.units {
		unitsOf[u.Service]++
	}
	relsOf := map[string]int{}
	for _, rel := range m.relations {
		for _, s := range relationServices(rel) {
			relsOf[s]++
		}
	}
	for name, svc := range m.services {
		if svc.Life == pb.Life_LIFE_DYING && unitsOf[name] == 0 && relsOf[name] == 0 {
			bad("S3: dying service %s has no units and no relations: nobody will remove it", name)
		}
	}
	checkRefs(m, bad)
	for _, k := range m.statuses {
		rest := strings.TrimPrefix(k, statusPrefix)
		kind, id, _ := strings.Cut(rest, "/")
		ek, err := entityKey(StatusKind(kind), id)
		if err != nil {
			bad("status %s: %v", k, err)
			continue
		}
		if _, ok := snap.Values[ek]; !ok {
			bad("status %s of an entity that does not exist", k)
		}
		if StatusKind(kind) == StatusServiceVersion {
			var st pb.Status
			if err := proto.Unmarshal(snap.Values[k], &st); err != nil || len(st.Status) > MaxVersionBytes {
				bad("status %s: not a version of at most %d bytes (%v)", k, MaxVersionBytes, err)
			}
		}
	}
	checkStatusHistory(snap, bad)
	checkCA(snap, bad)
	checkBarrier(snap, m.statuses, bad)
	checkUsers(snap, bad)
	checkDashboard(snap, bad)
	checkAudit(snap, bad)
	checkOperations(snap, m, bad)
	checkRevisions(snap, m, bad)
	checkHostReports(snap, bad)
	checkLeadership(snap, m, bad)
	checkOwners(snap, bad)
	checkAppSettings(snap, m, bad)
	for k := range snap.Values {
		var ek string
		switch {
		case strings.HasPrefix(k, resolvedPrefix):
			ek = UnitKey(strings.TrimPrefix(k, resolvedPrefix))
		case strings.HasPrefix(k, controllerJoinsPrefix):
			checkControllerJoin(k, snap.Values[k], bad)
		case strings.HasPrefix(k, machineJoinsPrefix):
			ek = MachineKey(strings.TrimPrefix(k, machineJoinsPrefix))
			checkJoinToken(m, k, snap.Values[k], bad)
		case strings.HasPrefix(k, credentialsPrefix):
			kind, id, err := names.ParseTag(strings.TrimPrefix(k, credentialsPrefix))
			switch {
			case err != nil:
				bad("credential %s: %v", k, err)
			case kind == names.KindMachine:
				ek = MachineKey(id)
			case kind == names.KindUnit:
				ek = UnitKey(id)
			case kind == names.KindUser:
				ek = UserKey(id)
			}
		}
		if _, ok := snap.Values[ek]; ek != "" && !ok {
			bad("%s outlives its entity", k)
		}
	}
	for k, item := range m.cleanups {
		switch item.Kind {
		case pb.CleanupKind_CLEANUP_KIND_SERVICE_DYING:
			if svc := m.services[item.Target]; svc != nil && svc.Life == pb.Life_LIFE_ALIVE {
				bad("cleanup %s for alive service %s", k, item.Target)
			}
		case pb.CleanupKind_CLEANUP_KIND_UNIT_DYING, pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT:
			if u := m.units[item.Target]; u != nil && u.Life == pb.Life_LIFE_ALIVE {
				bad("cleanup %s for alive unit %s", k, item.Target)
			}
		case pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE:
			if mach := m.machines[item.Target]; mach != nil && mach.Life == pb.Life_LIFE_ALIVE {
				bad("cleanup %s for alive machine %s", k, item.Target)
			}
		}
	}
	return errors.Join(errs...)
}

// checkBarrier checks that the barrier, if there is one, is a barrier
// record with its time, and that no unit agent claims to have seen a
// barrier of a revision the store has not reached.
func checkBarrier(snap *Snapshot, statuses []string, bad func(string, ...any)) {
	if v, ok := snap.Values[BarrierKey]; ok {
		b := &pb.Barrier{}
		if err := proto.Unmarshal(v, b); err != nil || b.UnixNano <= 0 {
			bad("barrier: not a barrier record with its time (%v)", err)
		}
	}
	prefix := StatusKey(StatusUnitAgent, "")
	for _, k := range statuses {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		st := &pb.Status{}
		if err := proto.Unmarshal(snap.Values[k], st); err != nil {
			bad("%s: undecodable value: %v", k, err)
		} else if st.SyncedRevision > snap.Revision {
			bad("%s: synced to barrier %d, past the store's revision %d", k, st.SyncedRevision, snap.Revision)
		}
	}
}

// checkJoinToken checks a join token: its machine, if it exists (its
// absence is reported with the other records'), is manual, and the token
// holds a hash and an expiry. (A machine may be dead with a token it
// never used: its removal deletes it.)
func checkJoinToken(m *model, k string, v []byte, bad func(string, ...any)) {
	tok := &pb.MachineJoin{}
	if err := proto.Unmarshal(v, tok); err != nil {
		bad("%s: undecodable value: %v", k, err)
		return
	}
	if tok.Hash == "" || tok.ExpiresUnixNano == 0 {
		bad("join token %s has no hash or no expiry", k)
	}
	id := strings.TrimPrefix(k, machineJoinsPrefix)
	if mach := m.machines[id]; mach != nil && !mach.Manual {
		bad("join token %s of machine %s, which is not manual", k, id)
	}
}

// checkStatusHistory checks that every status history entry is of a unit
// that exists and holds a unit status, and that each unit keeps at most
// StatusHistoryLimit entries with consecutive sequence numbers.
func checkStatusHistory(snap *Snapshot, bad func(string, ...any)) {
	type span struct{ n, lo, hi int64 }
	units := map[string]*span{}
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, statusHistoryPrefix) {
			continue
		}
		unit, seq, err := parseHistoryKey(k)
		if err != nil {
			bad("%v", err)
			continue
		}
		if _, ok := snap.Values[UnitKey(unit)]; !ok {
			bad("status history %s of unit %s, which does not exist", k, unit)
		}
		e := &pb.StatusHistoryEntry{}
		switch err := proto.Unmarshal(v, e); {
		case err != nil:
			bad("%s: undecodable value: %v", k, err)
		case e.Kind != string(StatusUnitAgent) && e.Kind != string(StatusUnit):
			bad("status history %s: kind %q is not a unit status kind", k, e.Kind)
		case e.Status.GetStatus() == "":
			bad("status history %s holds no status", k)
		}
		sp := units[unit]
		if sp == nil {
			sp = &span{lo: seq, hi: seq}
			units[unit] = sp
		}
		sp.n++
		sp.lo, sp.hi = min(sp.lo, seq), max(sp.hi, seq)
	}
	for unit, sp := range units {
		if sp.n > StatusHistoryLimit {
			bad("status history of unit %s holds %d entries, over the limit of %d", unit, sp.n, StatusHistoryLimit)
		}
		if sp.hi-sp.lo+1 != sp.n {
			bad("status history of unit %s holds %d entries from %d to %d: not consecutive", unit, sp.n, sp.lo, sp.hi)
		}
	}
}

// checkRefs checks that every reference key points at what it claims.
// (The other direction is checked entity by entity above.)
func checkRefs(m *model, bad func(string, ...any)) {
	for ref := range m.refs {
		switch {
		case strings.HasPrefix(ref, refMachineUnits), strings.HasPrefix(ref, refMachineAliveUnits):
			rest := strings.TrimPrefix(strings.TrimPrefix(ref, refMachineUnits), refMachineAliveUnits)
			mach, unit, _ := strings.Cut(rest, "/")
			u := m.units[unit]
			if u == nil || u.MachineId != mach || u.Principal != "" {
				bad("refs: %s names no principal of machine %s", ref, mach)
			} else if strings.HasPrefix(ref, refMachineAliveUnits) && u.Life != pb.Life_LIFE_ALIVE {
				bad("refs: %s names %s unit", ref, lifeName(u.Life))
			}
		case strings.HasPrefix(ref, refSubordinates):
			rest := strings.TrimPrefix(ref, refSubordinates)
			p := lastTwoOf(rest, true)
			sub := strings.TrimPrefix(rest, p+"/")
			u := m.units[sub]
			if u == nil || u.Principal != p {
				bad("refs: %s names no subordinate of %s", ref, p)
			} else if pu := m.units[p]; pu != nil && pu.Life == pb.Life_LIFE_DEAD {
				bad("I5: dead unit %s has subordinate %s", p, sub)
			}
		case strings.HasPrefix(ref, refUnitScopes):
			rest := strings.TrimPrefix(ref, refUnitScopes)
			unit := lastTwoOf(rest, true)
			if !m.scopes[lastSegment(ref)+"/"+unit] {
				bad("refs: %s names no scope entry", ref)
			}
		case strings.HasPrefix(ref, refServiceRelations):
			rest := strings.TrimPrefix(ref, refServiceRelations)
			svc, relStr, _ := strings.Cut(rest, "/")
			id, _ := strconv.ParseInt(relStr, 10, 64)
			if rel := m.relations[id]; rel == nil || !relationHasService(rel, svc) {
				bad("refs: %s names no relation of %s", ref, svc)
			}
		case isOperationRef(ref):
			// checkOperations
		default:
			bad("refs: unknown reference %s", ref)
		}
	}
}

// lastTwoOf returns the first two "/"-separated segments of s (a unit name
// at its start) when first, else the last two.
func lastTwoOf(s string, first bool) string {
	if !first {
		return lastTwo(s)
	}
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return s
	}
	j := strings.IndexByte(s[i+1:], '/')
	if j < 0 {
		return s
	}
	return s[:i+1+j]
}

func checkLife(bad func(string, ...any), what string, l pb.Life, mayDie bool) {
	switch l {
	case pb.Life_LIFE_ALIVE, pb.Life_LIFE_DYING:
	case pb.Life_LIFE_DEAD:
		if !mayDie {
			bad("%s is dead: only machines and units die", what)
		}
	default:
		bad("%s has no valid life (%v)", what, l)
	}
}

func decodeModel(snap *Snapshot) (*model, []error) {
	m := &model{
		machines: map[string]*pb.Machine{}, services: map[string]*pb.Service{}, units: map[string]*pb.Unit{},
		relations: map[int64]*pb.Relation{}, scopes: map[string]bool{}, settings: map[string]bool{},
		refs: map[string]bool{}, relkeys: map[string]int64{}, configs: map[string]bool{},
		cleanups: map[string]*pb.Cleanup{}, seqs: map[string]int64{},
	}
	var errs []error
	dec := func(k string, v []byte, msg proto.Message) bool {
		if err := proto.Unmarshal(v, msg); err != nil {
			errs = append(errs, fmt.Errorf("%s: undecodable value: %w", k, err))
			return false
		}
		return true
	}
	for k, v := range snap.Values {
		switch {
		case strings.HasPrefix(k, machinesPrefix):
			x := &pb.Machine{}
			if dec(k, v, x) {
				if x.Id != strings.TrimPrefix(k, machinesPrefix) {
					errs = append(errs, fmt.Errorf("machine key %s holds machine %s", k, x.Id))
				}
				m.machines[x.Id] = x
			}
		case strings.HasPrefix(k, servicesPrefix):
			x := &pb.Service{}
			if dec(k, v, x) {
				m.services[strings.TrimPrefix(k, servicesPrefix)] = x
			}
		case strings.HasPrefix(k, unitsPrefix):
			x := &pb.Unit{}
			if dec(k, v, x) {
				m.units[strings.TrimPrefix(k, unitsPrefix)] = x
			}
		case strings.HasPrefix(k, relationsPrefix):
			x := &pb.Relation{}
			if dec(k, v, x) {
				m.relations[x.Id] = x
			}
		case strings.HasPrefix(k, scopesPrefix):
			m.scopes[strings.TrimPrefix(k, scopesPrefix)] = true
		case strings.HasPrefix(k, settingsPrefix):
			m.settings[strings.TrimPrefix(k, settingsPrefix)] = true
		case strings.HasPrefix(k, "refs/"):
			m.refs[k] = true
		case strings.HasPrefix(k, relkeysPrefix):
			id, _ := strconv.ParseInt(string(v), 10, 64)
			m.relkeys[strings.TrimPrefix(k, relkeysPrefix)] = id
		case strings.HasPrefix(k, configPrefix):
			m.configs[strings.TrimPrefix(k, configPrefix)] = true
		case strings.HasPrefix(k, statusPrefix):
			m.statuses = append(m.statuses, k)
		case strings.HasPrefix(k, cleanupsPrefix):
			x := &pb.Cleanup{}
			if dec(k, v, x) {
				m.cleanups[k] = x
			}
		case strings.HasPrefix(k, seqPrefix):
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: corrupt sequence %q", k, v))
			}
			m.seqs[k] = n
		}
	}
	return m, errs
}
