package state

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxSettingsChanges bounds UpdateSettings: one hook's relation-set calls
// across the relations its unit is in.
const maxSettingsChanges = 16

// EnterScope puts the named unit in relation id's scope with its initial
// settings. The relation and the unit must be alive (R1), and the unit's
// service one of the relation's. Entering again does nothing.
func (s *State) EnterScope(ctx context.Context, id int64, unit string, settings map[string]string) error {
	if n := proto.Size(&pb.Settings{Values: settings}); n > MaxSettingsBytes {
		return tooLarge(fmt.Sprintf("the settings of unit %s in relation %d", unit, id), n, MaxSettingsBytes)
	}
	return s.apply(ctx, fmt.Sprintf("enter %s into relation %d", unit, id), func(ctx context.Context) (*change, error) {
		if err := checkUnitName(unit); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(RelationKey(id)), get(UnitKey(unit)), get(ScopeKey(id, unit)))
		if err != nil {
			return nil, err
		}
		if r.one(2) != nil {
			return nil, errNothingToDo
		}
		rel, err := relationFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		u, err := unitFrom(r.one(1), unit)
		if err != nil {
			return nil, err
		}
		if !relationHasService(rel.v, u.v.Service) {
			return nil, invalidf("unit %s cannot enter relation %d (%s): its service is not in it", unit, id, rel.v.Key)
		}
		if rel.v.Life != pb.Life_LIFE_ALIVE {
			return nil, refused("R1", "relation %d (%s) is %s: units enter only an alive relation", id, rel.v.Key, lifeName(rel.v.Life))
		}
		if u.v.Life != pb.Life_LIFE_ALIVE {
			return nil, refused("R1", "unit %s is %s: only an alive unit enters a relation", unit, lifeName(u.v.Life))
		}
		c := &change{}
		c.ifMod(rel.key, rel.mod)
		c.ifMod(u.key, u.mod)
		c.ifAbsent(ScopeKey(id, unit))
		c.put(ScopeKey(id, unit), &pb.ScopeEntry{Unit: unit, RelationId: id})
		c.putRaw(unitScopeRef(unit, id), "")
		c.put(SettingsKey(id, unit), &pb.Settings{Values: settings})
		return c, nil
	})
}

func relationHasService(rel *pb.Relation, svc string) bool {
	for _, ep := range rel.Endpoints {
		if ep.Service == svc {
			return true
		}
	}
	return false
}

// LeaveScope takes the named unit out of relation id's scope and deletes its
// settings there. When the relation is dying and the unit was the last in
// its scope, the relation is removed, and with it any dying service it was
// the last thing holding (R3, S3). Leaving a scope the unit is not in does
// nothing.
func (s *State) LeaveScope(ctx context.Context, id int64, unit string) error {
	_, err := s.leaveScope(ctx, id, unit)
	return err
}

// leaveScope is LeaveScope reading extra too, with the reads the change
// was made from: it returns their answers (reads.from).
func (s *State) leaveScope(ctx context.Context, id int64, unit string, extra ...getOp) (*reads, error) {
	var read *reads
	err := s.apply(ctx, fmt.Sprintf("take %s out of relation %d", unit, id), func(ctx context.Context) (*change, error) {
		if err := checkUnitName(unit); err != nil {
			return nil, err
		}
		scopeKey := func(u string) string { return ScopeKey(id, u) }
		key := scopeKey(unit)
		// The scope's other members, should the relation be dying: first
		// the unit's farthest neighbours by number (point reads, which
		// spread the witnesses of units leaving at once; the first keys
		// of the scope were every leaver's witnesses, and a range read
		// costs as many keys as the scope holds, whatever its limit),
		// then, only when none of those is there, the nearer ones.
		first, later := probeStages(unit)
		probes, probeGets := neighbourProbes(unit, scopeKey, first)
		gets := append(append([]getOp{get(key), get(RelationKey(id))}, probeGets...), extra...)
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		read = r.from(len(gets) - len(extra))
		entry := r.one(0)
		if entry == nil {
			return nil, errNothingToDo
		}
		rel, err := relationFrom(r.one(1), id)
		if err != nil {
			return nil, err
		}
		c := &change{}
		c.ifMod(key, entry.ModRevision)
		c.ifMod(rel.key, rel.mod)
		c.del(key)
		c.del(unitScopeRef(unit, id))
		c.del(SettingsKey(id, unit))
		if rel.v.Life == pb.Life_LIFE_ALIVE {
			return c, nil
		}
		probed := s.witnessCandidates(r.existing(2, probes), unit)
		if len(probed) == 0 {
			probed, err = s.moreWitnesses(ctx, unit, later, scopeKey, ScopePrefix(id))
			if err != nil {
				return nil, err
			}
		}
		if w := witness(probed, key, siblingKeys(unit, scopeKey)...); w != nil {
			c.ifExists(string(w.Key))
			return c, nil
		}
		c.ifOnly(ScopePrefix(id), key)
		// Dying: its owner record, which no claim changes now, is read
		// only when it goes.
		or, err := s.read(ctx, get(OwnerKey(OwnRelation, strconv.FormatInt(id, 10))))
		if err != nil {
			return nil, err
		}
		if err := s.removeRelationOps(ctx, c, rel.v, or.one(0), false); err != nil {
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return read, nil
}

// ScopeMembers returns the units in relation id's scope.
func (s *State) ScopeMembers(ctx context.Context, id int64) ([]string, error) {
	kvs, err := s.listAll(ctx, ScopePrefix(id), true)
	if err != nil {
		return nil, err
	}
	return keySuffixes(kvs, ScopePrefix(id)), nil
}

// Settings returns the named unit's settings in relation id and their
// version, which changes with every update.
func (s *State) Settings(ctx context.Context, id int64, unit string) (map[string]string, int64, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, 0, err
	}
	r, err := s.read(ctx, get(SettingsKey(id, unit)))
	if err != nil {
		return nil, 0, err
	}
	st, err := decode[pb.Settings](r.one(0))
	if err != nil {
		return nil, 0, err
	}
	if st == nil {
		return nil, 0, notFoundf("unit %s has no settings in relation %d: it is not in its scope", unit, id)
	}
	return st.v.Values, st.mod, nil
}

// SettingsChange is one relation's part of an UpdateSettings.
type SettingsChange struct {
	Relation int64
	Set      map[string]string
	Unset    []string
}

// UpdateSettings applies a unit's settings changes to the relations it is
// in, all in one transaction: a hook's relation-set calls land together or
// not at all. The unit must be in each relation's scope.
func (s *State) UpdateSettings(ctx context.Context, unit string, changes []SettingsChange) error {
	if len(changes) > maxSettingsChanges {
		return invalidf("settings of %d relations in one update: at most %d", len(changes), maxSettingsChanges)
	}
	return s.apply(ctx, "update settings of "+unit, func(ctx context.Context) (*change, error) {
		if err := checkUnitName(unit); err != nil {
			return nil, err
		}
		var gets []getOp
		for _, ch := range changes {
			gets = append(gets, get(ScopeKey(ch.Relation, unit)), get(SettingsKey(ch.Relation, unit)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		for i, ch := range changes {
			scope := r.one(2 * i)
			if scope == nil {
				return nil, refused("R1", "unit %s is not in the scope of relation %d", unit, ch.Relation)
			}
			st, err := decode[pb.Settings](r.one(2*i + 1))
			if err != nil {
				return nil, err
			}
			next := &pb.Settings{Values: map[string]string{}}
			var mod int64
			if st != nil {
				mod = st.mod
				for k, v := range st.v.Values {
					next.Values[k] = v
				}
			}
			for k, v := range ch.Set {
				next.Values[k] = v
			}
			for _, k := range ch.Unset {
				delete(next.Values, k)
			}
			if st != nil && maps.Equal(next.Values, st.v.Values) {
				// The same settings again: no new version, so that no
				// remote unit runs relation-changed for nothing.
				continue
			}
			if n := proto.Size(next); n > MaxSettingsBytes {
				return nil, tooLarge(fmt.Sprintf("the settings of unit %s in relation %d", unit, ch.Relation), n, MaxSettingsBytes)
			}
			c.ifSame(string(scope.Key), scope.CreateRevision)
			c.ifMod(SettingsKey(ch.Relation, unit), mod)
			c.put(SettingsKey(ch.Relation, unit), next)
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		return c, nil
	})
}
