package state

import (
	"context"
	"errors"
	"strconv"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// unitsPerTxn bounds AddUnits' batches: at most five writes a unit (a new
// machine, the unit, its two machine references and its unit-revision)
// plus the comparisons of the service, the machine, the machine's units
// (claims.go) and the rollout's target revision, and room for an
// operator's audit entry (auditOps).
const unitsPerTxn = (MaxTxnOps - 4 - auditOps) / 5

// Placement says where AddUnits puts new principal units.
type Placement struct {
	// Machine is an existing machine for every unit. When empty each unit
	// gets a new machine of its own, unless Unassigned.
	Machine string
	// Unassigned leaves the units unassigned, for AssignUnit.
	Unassigned bool
	// Force places the units on Machine without checking their charm's
	// static host claims against the units there (P1, claims.go).
	Force bool
}

// AddUnits adds n alive principal units to the named service and places
// them. The service must be alive (U1, S1) and a given machine alive (M1),
// and, unless p.Force, the units' static host claims must not conflict
// with those of the units on it, nor with each other's (P1, claims.go).
// Their numbers (and new machines') are reserved first, in a transaction
// shared with other callers waiting at the same time (reserve.go); the
// units are then added in batches, each in one transaction. On an error
// the units already added are returned with it, and numbers reserved but
// not used are a gap in the service's sequence.
func (s *State) AddUnits(ctx context.Context, service string, n int, p Placement) ([]*pb.Unit, error) {
	if n < 1 {
		return nil, invalidf("cannot add %d units: want at least 1", n)
	}
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	if p.Machine != "" {
		if err := checkMachineID(p.Machine); err != nil {
			return nil, err
		}
		if p.Unassigned {
			return nil, invalidf("units cannot be both unassigned and placed on machine %s", p.Machine)
		}
	}
	newMachines := p.Machine == "" && !p.Unassigned
	// The numbers first, reserved together with other callers' (reserve.go),
	// then the units, in transactions that need not wait for anyone's.
	// What the units' transactions assert is checked first too, so that a
	// refusal seen now costs no numbers: this call's machine here, the
	// service (the same for every caller of the sequence) as the numbers
	// are reserved.
	if p.Machine != "" {
		m, err := s.machine(ctx, p.Machine)
		if err != nil {
			return nil, err
		}
		if err := machineTakesUnits(p.Machine, m.v); err != nil {
			return nil, err
		}
	}
	nextUnit, err := s.reserve(ctx, seqUnitKey(service), int64(n), func(r *reads) error {
		svc, err := serviceFrom(r.one(1), service)
		if err != nil {
			return err
		}
		return canAddUnits(svc.v)
	}, get(ServiceKey(service)))
	if err != nil {
		return nil, err
	}
	var nextMachine int64
	if newMachines {
		if nextMachine, err = s.reserve(ctx, seqMachine, int64(n), nil); err != nil {
			return nil, err
		}
	}
	var added []*pb.Unit
	for len(added) < n {
		batch := min(n-len(added), unitsPerTxn)
		var units []*pb.Unit
		err = s.apply(ctx, "add units to "+service, func(ctx context.Context) (*change, error) {
			gets := []getOp{get(ServiceKey(service)), get(RolloutKey(service))}
			if p.Machine != "" {
				gets = append(gets, get(MachineKey(p.Machine)))
			}
			r, err := s.read(ctx, gets...)
			if err != nil {
				return nil, err
			}
			svc, err := serviceFrom(r.one(0), service)
			if err != nil {
				return nil, err
			}
			if err := canAddUnits(svc.v); err != nil {
				return nil, err
			}
			// New units start on the rollout's target, without a permit.
			ro, err := rolloutFrom(r.one(1), service)
			if err != nil {
				return nil, err
			}
			c := &change{}
			c.ifMod(svc.key, svc.mod)
			c.ifExists(RevisionKey(service, ro.v.Target))
			if p.Machine != "" {
				m, err := machineFrom(r.one(2), p.Machine)
				if err != nil {
					return nil, err
				}
				if err := machineTakesUnits(p.Machine, m.v); err != nil {
					return nil, err
				}
				c.ifMod(m.key, m.mod)
			}
			var claims *pb.StaticClaims
			var held *machineClaims
			if p.Machine != "" && !p.Force {
				if claims, err = s.revisionClaims(ctx, service, ro.v.Target); err != nil {
					return nil, err
				}
				if claims != nil {
					if held, err = s.readMachineClaims(ctx, p.Machine); err != nil {
						return nil, err
					}
					c.ifNoNewer(machineUnitsPrefix(p.Machine), held.rev)
				}
			}
			units = units[:0]
			for i := 0; i < batch; i++ {
				num := nextUnit + int64(len(added)+i)
				u := &pb.Unit{Name: unitName(service, num), Service: service, Life: pb.Life_LIFE_ALIVE, MachineId: p.Machine}
				if held != nil {
					if err := held.check(u.Name, claims); err != nil {
						return nil, err
					}
					// The units placed with it are there too.
					held.units = append(held.units, heldClaims{unit: u.Name, claims: []*pb.StaticClaims{claims}})
				}
				if newMachines {
					u.MachineId = strconv.FormatInt(nextMachine+int64(len(added)+i), 10)
					c.put(MachineKey(u.MachineId), &pb.Machine{Id: u.MachineId, Life: pb.Life_LIFE_ALIVE})
				}
				c.put(UnitKey(u.Name), u)
				c.put(UnitRevisionKey(u.Name), &pb.UnitRevision{Current: ro.v.Target, Target: ro.v.Target})
				if u.MachineId != "" {
					c.putRaw(machineUnitRef(u.MachineId, u.Name), "")
					c.putRaw(machineAliveRef(u.MachineId, u.Name), "")
				}
				units = append(units, u)
			}
			return c, nil
		})
		if err != nil {
			return added, err
		}
		added = append(added, units...)
	}
	return added, nil
}

// machineTakesUnits is M1: units are placed only on an alive machine; m
// is machine id as read.
func machineTakesUnits(id string, m *pb.Machine) error {
	if m.Life != pb.Life_LIFE_ALIVE {
		return refused("M1", "machine %s is %s: units can be assigned only to an alive machine", id, lifeName(m.Life))
	}
	return nil
}

func canAddUnits(svc *pb.Service) error {
	if svc.Life != pb.Life_LIFE_ALIVE {
		return refused("U1", "service %s is %s: units are added only to an alive service", svc.Name, lifeName(svc.Life))
	}
	if svc.Subordinate {
		return invalidf("service %s is a subordinate: its units are created beside their principals", svc.Name)
	}
	return nil
}

// AssignUnit assigns the named unassigned principal unit to machine id,
// which must be alive (M1), and where the unit's static host claims must
// not conflict with a unit's (P1, claims.go).
func (s *State) AssignUnit(ctx context.Context, unit, machine string) error {
	return s.apply(ctx, "assign "+unit+" to machine "+machine, func(ctx context.Context) (*change, error) {
		if err := checkUnitName(unit); err != nil {
			return nil, err
		}
		if err := checkMachineID(machine); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(UnitKey(unit)), get(MachineKey(machine)))
		if err != nil {
			return nil, err
		}
		u, err := unitFrom(r.one(0), unit)
		if err != nil {
			return nil, err
		}
		m, err := machineFrom(r.one(1), machine)
		if err != nil {
			return nil, err
		}
		switch {
		case u.v.Principal != "":
			return nil, invalidf("unit %s is a subordinate: it goes where its principal %s is", unit, u.v.Principal)
		case u.v.MachineId == machine:
			return nil, errNothingToDo
		case u.v.MachineId != "":
			return nil, refused("M1", "unit %s is already assigned to machine %s", unit, u.v.MachineId)
		case u.v.Life != pb.Life_LIFE_ALIVE:
			return nil, refused("M1", "unit %s is %s: only an alive unit is assigned", unit, lifeName(u.v.Life))
		case m.v.Life != pb.Life_LIFE_ALIVE:
			return nil, machineTakesUnits(machine, m.v)
		}
		next := protoClone(u.v)
		next.MachineId = machine
		c := &change{}
		claims, err := s.unitClaims(ctx, unit)
		if err != nil {
			return nil, err
		}
		if len(claims) > 0 {
			held, err := s.readMachineClaims(ctx, machine)
			if err != nil {
				return nil, err
			}
			for _, cl := range claims {
				if err := held.check(unit, cl); err != nil {
					return nil, err
				}
			}
			c.ifNoNewer(machineUnitsPrefix(machine), held.rev)
		}
		c.ifMod(u.key, u.mod)
		c.ifMod(m.key, m.mod)
		c.put(u.key, next)
		c.putRaw(machineUnitRef(machine, unit), "")
		c.putRaw(machineAliveRef(machine, unit), "")
		return c, nil
	})
}

// AddSubordinate returns the unit of the subordinate service beside the
// named principal unit, creating it when there is none. The principal and
// the subordinate service must be alive (U1, S1), and the subordinate's
// static host claims must not conflict with those of the units on the
// principal's machine (P1, claims.go). A principal's agent calls it when
// its unit enters a container-scoped relation.
func (s *State) AddSubordinate(ctx context.Context, principal, subService string) (*pb.Unit, error) {
	var sub *pb.Unit
	err := s.apply(ctx, "add subordinate "+subService+" to "+principal, func(ctx context.Context) (*change, error) {
		if err := checkUnitName(principal); err != nil {
			return nil, err
		}
		if err := checkServiceName(subService); err != nil {
			return nil, err
		}
		existing := subordinatesPrefix(principal) + subService + "/"
		r, err := s.read(ctx, get(UnitKey(principal)), get(ServiceKey(subService)), get(seqUnitKey(subService)), getKeys(existing, 1),
			get(RolloutKey(subService)))
		if err != nil {
			return nil, err
		}
		if kv := r.one(3); kv != nil {
			u, err := s.Unit(ctx, lastTwo(string(kv.Key)))
			if err != nil {
				return nil, err
			}
			sub = u
			return nil, errNothingToDo
		}
		p, err := unitFrom(r.one(0), principal)
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(1), subService)
		if err != nil {
			return nil, err
		}
		switch {
		case p.v.Principal != "":
			return nil, invalidf("unit %s is itself a subordinate", principal)
		case !svc.v.Subordinate:
			return nil, invalidf("service %s is not a subordinate", subService)
		case p.v.Life != pb.Life_LIFE_ALIVE:
			return nil, refused("U1", "unit %s is %s: subordinates are added only to an alive principal", principal, lifeName(p.v.Life))
		case svc.v.Life != pb.Life_LIFE_ALIVE:
			return nil, refused("S1", "service %s is %s: units are added only to an alive service", subService, lifeName(svc.v.Life))
		case p.v.MachineId == "":
			return nil, refused("U1", "unit %s is not assigned to a machine: a subordinate goes beside an assigned principal", principal)
		}
		n, seqRev, err := seqValue(r.one(2))
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(4), subService)
		if err != nil {
			return nil, err
		}
		sub = &pb.Unit{Name: unitName(subService, n), Service: subService, Life: pb.Life_LIFE_ALIVE, MachineId: p.v.MachineId, Principal: principal}
		c := &change{}
		claims, err := s.revisionClaims(ctx, subService, ro.v.Target)
		if err != nil {
			return nil, err
		}
		if claims != nil {
			held, err := s.readMachineClaims(ctx, p.v.MachineId)
			if err != nil {
				return nil, err
			}
			if err := held.check(sub.Name, claims); err != nil {
				return nil, err
			}
			// The principal's reference put again, unchanged, is what a
			// placement racing on the machine compares (claims.go).
			c.ifNoNewer(machineUnitsPrefix(p.v.MachineId), held.rev)
			c.putRaw(machineUnitRef(p.v.MachineId, principal), "")
		}
		c.ifMod(p.key, p.mod)
		c.ifMod(svc.key, svc.mod)
		c.ifMod(seqUnitKey(subService), seqRev)
		c.ifEmpty(existing)
		c.putRaw(seqUnitKey(subService), strconv.FormatInt(n+1, 10))
		c.put(UnitKey(sub.Name), sub)
		c.putRaw(subordinateRef(principal, sub.Name), "")
		c.ifExists(RevisionKey(subService, ro.v.Target))
		c.put(UnitRevisionKey(sub.Name), &pb.UnitRevision{Current: ro.v.Target, Target: ro.v.Target})
		return c, nil
	})
	return sub, err
}

// lastTwo returns the last two "/"-separated segments of key: a unit name.
func lastTwo(key string) string {
	i := len(key)
	for n := 0; i > 0; i-- {
		if key[i-1] == '/' {
			if n++; n == 2 {
				break
			}
		}
	}
	return key[i:]
}

func (s *State) unit(ctx context.Context, name string) (*record[*pb.Unit], error) {
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(UnitKey(name)))
	if err != nil {
		return nil, err
	}
	return unitFrom(r.one(0), name)
}

func unitFrom(kv *mvccpb.KeyValue, name string) (*record[*pb.Unit], error) {
	u, err := decode[pb.Unit](kv)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, notFoundf("unit %s not found", name)
	}
	return u, nil
}

// Unit returns the named unit.
func (s *State) Unit(ctx context.Context, name string) (*pb.Unit, error) {
	u, err := s.unit(ctx, name)
	if err != nil {
		return nil, err
	}
	return u.v, nil
}

// Units returns the named service's units.
func (s *State) Units(ctx context.Context, service string) ([]*pb.Unit, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	return listDecoded[pb.Unit](ctx, s, ServiceUnitsPrefix(service))
}

// AllUnits returns every unit.
func (s *State) AllUnits(ctx context.Context) ([]*pb.Unit, error) {
	return listDecoded[pb.Unit](ctx, s, unitsPrefix)
}

// Subordinates returns the names of the named unit's subordinates.
func (s *State) Subordinates(ctx context.Context, unit string) ([]string, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, subordinatesPrefix(unit), true)
	if err != nil {
		return nil, err
	}
	return keySuffixes(kvs, subordinatesPrefix(unit)), nil
}

// UnitScopes returns the ids of the relations whose scope the named unit is in.
func (s *State) UnitScopes(ctx context.Context, unit string) ([]int64, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, unitScopesPrefix(unit), true)
	if err != nil {
		return nil, err
	}
	return relationIDs(kvs)
}

func relationIDs(kvs []*mvccpb.KeyValue) ([]int64, error) {
	ids := make([]int64, len(kvs))
	for i, kv := range kvs {
		id, err := strconv.ParseInt(lastSegment(string(kv.Key)), 10, 64)
		if err != nil {
			return nil, invalidf("corrupt reference %s", kv.Key)
		}
		ids[i] = id
	}
	return ids, nil
}

// DestroyUnit sets the named unit dying (U2); its agent then takes it out
// of its relations and sets it dead. An alive unit never assigned to a
// machine has no agent and is removed at once. With Force, a cleanup item
// has the cleaner do the agent's work after MaxWait. Destroying a dying or
// dead unit does nothing (but may shorten a forced wait).
func (s *State) DestroyUnit(ctx context.Context, name string, opts DestroyOptions) error {
	return s.apply(ctx, "destroy unit "+name, func(ctx context.Context) (*change, error) {
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(UnitKey(name)), getKeys(subordinatesPrefix(name), 1), getKeys(unitScopesPrefix(name), 1),
			get(cleanupKey(cleanupForceUnit, name)), getKeys(UnitTasksPrefix(name), 1))
		if err != nil {
			return nil, err
		}
		u, err := unitFrom(r.one(0), name)
		if err != nil {
			return nil, err
		}
		c := &change{}
		if u.v.Life == pb.Life_LIFE_ALIVE && u.v.MachineId == "" && u.v.Principal == "" && r.one(1) == nil && r.one(2) == nil {
			// Nothing runs this unit: nobody else would ever remove it.
			v, vr, err := s.readServiceView(ctx, names.UnitService(name), name, unitRevisionGets(name)...)
			if err != nil {
				return nil, err
			}
			c.ifMod(u.key, u.mod)
			c.ifEmpty(subordinatesPrefix(name))
			c.ifEmpty(unitScopesPrefix(name))
			removeUnitOps(c, u.v)
			unitTasksOps(c, name, r.one(4))
			gone := v.settle(c, u.key, "")
			if err := removeUnitRevisionOps(c, name, vr.one(0), vr.one(1), gone); err != nil {
				return nil, err
			}
			return c, nil
		}
		if opts.Force && u.v.Life != pb.Life_LIFE_DEAD {
			s.forceItem(c, r.one(3), pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT, name, opts.MaxWait)
		}
		if u.v.Life == pb.Life_LIFE_ALIVE {
			unitDyingOps(c, u, r.one(1))
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		return c, nil
	})
}

// unitDyingOps sets alive unit u dying. firstSub is one of its subordinates,
// or nil: when it has any, a cleanup item has the cleaner set them dying
// should the unit's agent not do it first.
func unitDyingOps(c *change, u *record[*pb.Unit], firstSub *mvccpb.KeyValue) {
	next := protoClone(u.v)
	next.Life = pb.Life_LIFE_DYING
	c.ifMod(u.key, u.mod)
	c.put(u.key, next)
	if u.v.Principal == "" && u.v.MachineId != "" {
		c.del(machineAliveRef(u.v.MachineId, u.v.Name))
	}
	if firstSub != nil {
		c.put(cleanupKey(cleanupUnitDying, u.v.Name), &pb.Cleanup{Kind: pb.CleanupKind_CLEANUP_KIND_UNIT_DYING, Target: u.v.Name})
	} else {
		c.ifEmpty(subordinatesPrefix(u.v.Name))
	}
}

// EnsureUnitDead sets the named unit dead, once it is in no relation scope
// and has no subordinates (U3). Its own agent calls it after departing its
// relations, removing its subordinates and running stop and remove (U4).
//
// It first takes the unit out of the scopes of the relations leave names,
// each as LeaveScope would, in a transaction of its own. The last of those
// reads what the death needs too, and the death is made from that read
// when it can be (the unit in no other scope, without subordinates): its
// comparisons hold it to what was read, so that it fails and is made
// again from a read of its own should anything else have changed. A unit
// leaving its last scope and dying costs one read less.
func (s *State) EnsureUnitDead(ctx context.Context, name string, leave ...int64) error {
	if err := checkUnitName(name); err != nil {
		return err
	}
	gets := []getOp{get(UnitKey(name)), getKeys(subordinatesPrefix(name), 4), getKeys(unitScopesPrefix(name), 4)}
	var early *reads // gets' answers, read with the last leave
	var left string  // the reference to the scope it took the unit out of
	for i, id := range leave {
		var extra []getOp
		if i == len(leave)-1 {
			extra, left = gets, unitScopeRef(name, id)
		}
		r, err := s.leaveScope(ctx, id, name, extra...)
		if err != nil {
			return err
		}
		early = r
	}
	return s.apply(ctx, "set unit "+name+" dead", func(ctx context.Context) (*change, error) {
		if r := early; r != nil {
			early = nil
			if c, err := unitDeathChange(r, name, left); c != nil || errors.Is(err, errNothingToDo) {
				return c, err
			}
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		return unitDeathChange(r, name, "")
	})
}

// unitDeathChange sets the unit dead from the answers to EnsureUnitDead's
// gets, read after it left every scope but possibly left's, or refuses
// (U3).
func unitDeathChange(r *reads, name, left string) (*change, error) {
	u, err := unitFrom(r.one(0), name)
	if err != nil {
		return nil, err
	}
	if u.v.Life == pb.Life_LIFE_DEAD {
		return nil, errNothingToDo
	}
	var scopes []*mvccpb.KeyValue
	for _, kv := range r.all(2) {
		if string(kv.Key) != left {
			scopes = append(scopes, kv)
		}
	}
	if len(scopes) > 0 {
		ids, err := relationIDs(scopes)
		if err != nil {
			return nil, err
		}
		rels := make([]string, len(ids))
		for i, id := range ids {
			rels[i] = strconv.FormatInt(id, 10)
		}
		return nil, refused("U3", "unit %s is still in the scope of relation %s", name, joinMore(rels, r.more(2)))
	}
	if subs := r.all(1); len(subs) > 0 {
		return nil, refused("U3", "unit %s still has subordinate %s", name, joinMore(keySuffixes(subs, subordinatesPrefix(name)), r.more(1)))
	}
	next := protoClone(u.v)
	next.Life = pb.Life_LIFE_DEAD
	c := &change{}
	c.ifMod(u.key, u.mod)
	c.ifEmpty(subordinatesPrefix(name))
	c.ifEmpty(unitScopesPrefix(name))
	c.put(u.key, next)
	if u.v.Life == pb.Life_LIFE_ALIVE && u.v.Principal == "" && u.v.MachineId != "" {
		// A dying unit's went when it became dying (unitDyingOps).
		c.del(machineAliveRef(u.v.MachineId, name))
	}
	return c, nil
}

// RemoveUnit removes the named dead unit from the model (U5): the machine's
// agent removes a principal, the principal's agent a subordinate. When the
// unit was the last thing holding its dying service, the service goes too
// (S3).
func (s *State) RemoveUnit(ctx context.Context, name string) error {
	return s.RemoveUnitIf(ctx, name, nil)
}

// RemoveUnitIf is RemoveUnit once allow, when not nil, accepts the unit as
// read for the removal: the caller's check of the unit (its machine, its
// principal) costs no read of its own. allow's error is returned as it is.
func (s *State) RemoveUnitIf(ctx context.Context, name string, allow func(*pb.Unit) error) error {
	return s.apply(ctx, "remove unit "+name, func(ctx context.Context) (*change, error) {
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		v, r, err := s.readServiceView(ctx, names.UnitService(name), name,
			append([]getOp{get(UnitKey(name)), getKeys(UnitTasksPrefix(name), 1)}, unitRevisionGets(name)...)...)
		if r == nil {
			return nil, err
		}
		u, uerr := unitFrom(r.one(0), name)
		if uerr != nil {
			return nil, uerr
		}
		if allow != nil {
			if err := allow(u.v); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
		if u.v.Life != pb.Life_LIFE_DEAD {
			return nil, refused("U5", "unit %s is %s: only a dead unit can be removed", name, lifeName(u.v.Life))
		}
		c := &change{}
		c.ifMod(u.key, u.mod)
		removeUnitOps(c, u.v)
		unitTasksOps(c, name, r.one(1))
		gone := v.settle(c, u.key, "")
		if err := removeUnitRevisionOps(c, name, r.one(2), r.one(3), gone); err != nil {
			return nil, err
		}
		return c, nil
	})
}

// unitTasksOps adds to a unit's removal what its open tasks need: when
// it has any (first is one of them), a unit-tasks cleanup item has the
// cleaner stop them; else the removal asserts it has none.
func unitTasksOps(c *change, name string, first *mvccpb.KeyValue) {
	if first != nil {
		c.put(cleanupKey(cleanupUnitTasks, name), &pb.Cleanup{Kind: pb.CleanupKind_CLEANUP_KIND_UNIT_TASKS, Target: name})
		return
	}
	c.ifEmpty(UnitTasksPrefix(name))
}

// removeUnitOps removes a unit, its references and its records: a dead
// unit, or an alive one no machine or principal runs. The reference that
// says a unit of a machine is alive went when it became dying or dead: a
// deletion of a key not there still costs etcd a lookup.
func removeUnitOps(c *change, u *pb.Unit) {
	c.del(UnitKey(u.Name))
	if u.Principal != "" {
		c.del(subordinateRef(u.Principal, u.Name))
	} else if u.MachineId != "" {
		c.del(machineUnitRef(u.MachineId, u.Name))
		if u.Life == pb.Life_LIFE_ALIVE {
			c.del(machineAliveRef(u.MachineId, u.Name))
		}
	}
	for _, k := range unitStatusKinds {
		c.del(StatusKey(k, u.Name))
	}
	c.delPrefix(StatusHistoryPrefix(u.Name))
	c.del(cleanupKey(cleanupUnitDying, u.Name))
	c.del(ResolvedKey(u.Name))
	c.del(HostReportKey(u.Name))
	c.del(HostPortsKey(u.Name))
	c.del(credentialKey(names.UnitTag(u.Name)))
	c.del(UnitRevisionKey(u.Name))
	c.del(PermitKey(u.Name))
	c.del(LeadershipKey(u.Name))
}

// joinMore joins names with commas, adding "and more" when the list was cut.
func joinMore(names []string, more bool) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	if more {
		out += " and more"
	}
	return out
}
