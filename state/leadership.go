package state

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Service leadership (docs/DESIGN.md, Leadership). A service's leader is
// the unit named by its one key under leadership/<service>/: the unit's
// name is in the key, so that a unit's removal deletes its leadership
// without reading it (removeUnitOps), and "the service has no leader" is
// a prefix-empty comparison. The leader settings are
// leader-settings/<service>, versioned by the key's mod revision as a
// unit's relation settings are.
//
// A leadership holds while its unit is alive and the agent of the unit's
// machine is present (presence/machine-<id>). Nothing deletes it the
// moment either stops being so: the controller's elector replaces it
// (ElectLeader) or drops it (VacateLeadership), each asserting in its
// transaction that the holder no longer holds. Meanwhile every check that
// matters (SetLeaderSettings, GetLeadership's IsLeader) reads the holder's
// unit and presence with the record, so that a leader whose agent is gone
// can neither write nor call itself leader.
const (
	leadershipPrefix     = "leadership/"
	leaderSettingsPrefix = "leader-settings/"
)

// leadershipPrefixes are the prefixes of the leadership records: gone
// with their services, so gone when the model is empty.
var leadershipPrefixes = []string{leadershipPrefix, leaderSettingsPrefix}

// LeadershipPrefix is where the leadership records are, for watching
// them: LeadershipKey(service, unit) names service's leader.
const LeadershipPrefix = leadershipPrefix

// LeaderSettingsPrefix is where the leader settings are, for watching
// them.
const LeaderSettingsPrefix = leaderSettingsPrefix

// MaxLeaderSettingsBytes bounds a service's leader settings, encoded, as
// they stand after a change.
const MaxLeaderSettingsBytes = 64 << 10

// maxLeaderSettingsChange bounds the keys one SetLeaderSettings names,
// set and unset together.
const maxLeaderSettingsChange = 1000

// LeadershipServicePrefix is the prefix of service's leadership key.
func LeadershipServicePrefix(service string) string { return leadershipPrefix + service + "/" }

// LeadershipKey is the key saying unit leads its service.
func LeadershipKey(unit string) string {
	return LeadershipServicePrefix(names.UnitService(unit)) + lastSegment(unit)
}

// LeaderSettingsKey is the key of service's leader settings.
func LeaderSettingsKey(service string) string { return leaderSettingsPrefix + service }

// LeaderOfKey returns the unit a leadership key names ("kv/0" for
// "leadership/kv/0"), or "" for another key.
func LeaderOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, leadershipPrefix)
	if !ok || strings.Count(rest, "/") != 1 {
		return ""
	}
	return rest
}

// holder is a service's leadership as read: the record and what decides
// whether it still holds.
type holder struct {
	rec      *record[*pb.Leadership]
	unit     *mvccpb.KeyValue // the holder's unit; nil when gone
	presence *mvccpb.KeyValue // its machine agent's presence; nil when absent
}

// holds says whether the holder still leads: its unit alive, its
// machine's agent present.
func (h *holder) holds() (bool, error) {
	u, err := decode[pb.Unit](h.unit)
	if err != nil {
		return false, err
	}
	return u != nil && u.v.Life == pb.Life_LIFE_ALIVE && h.presence != nil, nil
}

// assertGone asserts in c what made holds false, and deletes the record.
func (h *holder) assertGone(c *change) error {
	u, err := decode[pb.Unit](h.unit)
	if err != nil {
		return err
	}
	c.ifMod(h.rec.key, h.rec.mod)
	if u == nil || u.v.Life != pb.Life_LIFE_ALIVE {
		// A unit not alive never is again; gone, its key's absence.
		c.ifMod(UnitKey(h.rec.v.Unit), modOf(h.unit))
	} else {
		c.ifAbsent(presenceKey(names.MachineTag(h.rec.v.MachineId)))
	}
	c.del(h.rec.key)
	return nil
}

// readHolder reads service's leadership and what decides whether it
// holds; nil when the service has none.
func (s *State) readHolder(ctx context.Context, service string) (*holder, error) {
	r, err := s.read(ctx, getPrefix(LeadershipServicePrefix(service), 2))
	if err != nil {
		return nil, err
	}
	return s.holderFrom(ctx, service, r.all(0))
}

func (s *State) holderFrom(ctx context.Context, service string, kvs []*mvccpb.KeyValue) (*holder, error) {
	switch len(kvs) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("service %s has more than one leadership record", service)
	}
	rec, err := decode[pb.Leadership](kvs[0])
	if err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(UnitKey(rec.v.Unit)), getExists(presenceKey(names.MachineTag(rec.v.MachineId))))
	if err != nil {
		return nil, err
	}
	h := &holder{rec: rec, unit: r.one(0)}
	if r.ranges[1].Count > 0 {
		h.presence = &mvccpb.KeyValue{}
	}
	return h, nil
}

// ElectLeader makes unit its service's leader, when the service has no
// leader or its leader no longer holds (L1): the unit must be alive,
// assigned, and its machine's agent present (L2). A leader that no longer
// holds is replaced in the same transaction, which asserts why it no
// longer holds. Electing the leader again does nothing; electing another
// while the leader holds is refused.
func (s *State) ElectLeader(ctx context.Context, unit string) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	service := names.UnitService(unit)
	return s.apply(ctx, "elect "+unit+" leader of "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(UnitKey(unit)), getPrefix(LeadershipServicePrefix(service), 2))
		if err != nil {
			return nil, err
		}
		u, err := unitFrom(r.one(0), unit)
		if err != nil {
			return nil, err
		}
		switch {
		case u.v.Life != pb.Life_LIFE_ALIVE:
			return nil, refused("L2", "unit %s is %s: only an alive unit leads", unit, lifeName(u.v.Life))
		case u.v.MachineId == "":
			return nil, refused("L2", "unit %s is not assigned to a machine: it cannot lead", unit)
		}
		pk := presenceKey(names.MachineTag(u.v.MachineId))
		pr, err := s.read(ctx, getExists(pk))
		if err != nil {
			return nil, err
		}
		if pr.ranges[0].Count == 0 {
			return nil, refused("L2", "the agent of machine %s is not present: unit %s cannot lead", u.v.MachineId, unit)
		}
		h, err := s.holderFrom(ctx, service, r.all(1))
		if err != nil {
			return nil, err
		}
		c := &change{}
		if h == nil {
			c.ifEmpty(LeadershipServicePrefix(service))
		} else {
			holds, err := h.holds()
			if err != nil {
				return nil, err
			}
			switch {
			case h.rec.v.Unit == unit:
				// Its own record holds, or was read while its machine's
				// agent was absent, which the read of its presence after
				// says it no longer is: the record holds as it is. (Deleting
				// it and putting it again would name one key twice in the
				// transaction, which etcd refuses.)
				return nil, errNothingToDo
			case holds:
				return nil, refused("L1", "service %s has leader %s", service, h.rec.v.Unit)
			}
			if err := h.assertGone(c); err != nil {
				return nil, err
			}
			c.ifOnly(LeadershipServicePrefix(service), h.rec.key)
		}
		c.ifMod(u.key, u.mod)
		c.ifExists(pk)
		c.put(LeadershipKey(unit), &pb.Leadership{Unit: unit, MachineId: u.v.MachineId, ElectedUnixNano: s.now().UnixNano()})
		return c, nil
	})
}

// VacateLeadership deletes service's leadership when its leader no longer
// holds (its unit not alive, or its machine's agent absent), and reports
// whether it did. The elector calls it for a service none of whose units
// can lead, so that nothing names a leader that does not hold.
func (s *State) VacateLeadership(ctx context.Context, service string) (bool, error) {
	if err := checkServiceName(service); err != nil {
		return false, err
	}
	var vacated bool
	err := s.apply(ctx, "vacate the leadership of "+service, func(ctx context.Context) (*change, error) {
		vacated = false
		h, err := s.readHolder(ctx, service)
		if err != nil || h == nil {
			return nil, orNothing(err)
		}
		holds, err := h.holds()
		if err != nil || holds {
			return nil, orNothing(err)
		}
		c := &change{}
		if err := h.assertGone(c); err != nil {
			return nil, err
		}
		vacated = true
		return c, nil
	})
	return vacated && err == nil, err
}

func orNothing(err error) error {
	if err == nil {
		return errNothingToDo
	}
	return err
}

// LeadershipView is a service's leadership as a unit sees it.
type LeadershipView struct {
	// Leader is the unit the record names, "" when none does; Holds says
	// whether it still holds (alive, its machine's agent present).
	Leader string
	Holds  bool
	// Settings are the leader settings, Version their version: the mod
	// revision of their key, 0 when there are none.
	Settings map[string]string
	Version  int64
}

// Leadership returns service's leadership and leader settings.
func (s *State) Leadership(ctx context.Context, service string) (*LeadershipView, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(ServiceKey(service)), getPrefix(LeadershipServicePrefix(service), 2), get(LeaderSettingsKey(service)))
	if err != nil {
		return nil, err
	}
	if _, err := serviceFrom(r.one(0), service); err != nil {
		return nil, err
	}
	v := &LeadershipView{Settings: map[string]string{}}
	st, err := decode[pb.LeaderSettings](r.one(2))
	if err != nil {
		return nil, err
	}
	if st != nil {
		maps.Copy(v.Settings, st.v.Values)
		v.Version = st.mod
	}
	h, err := s.holderFrom(ctx, service, r.all(1))
	if err != nil || h == nil {
		return v, err
	}
	v.Leader = h.rec.v.Unit
	v.Holds, err = h.holds()
	return v, err
}

// Leaders returns every service's leader by service, those that no
// longer hold included, for status.
func (s *State) Leaders(ctx context.Context) (map[string]string, error) {
	kvs, err := s.listAll(ctx, leadershipPrefix, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		if u := LeaderOfKey(string(kv.Key)); u != "" {
			out[names.UnitService(u)] = u
		}
	}
	return out, nil
}

// SetLeaderSettings applies set and unset to the leader settings of
// unit's service, when unit is its leader and holds (L3): the leadership,
// the unit and its machine's presence are compared in the transaction
// that writes, so a leader replaced meanwhile writes nothing. An empty
// value in set removes its key, as leader-set does. The same settings
// again write nothing. It returns the settings' version after.
func (s *State) SetLeaderSettings(ctx context.Context, unit string, set map[string]string, unset []string) (int64, error) {
	if err := checkUnitName(unit); err != nil {
		return 0, err
	}
	if n := len(set) + len(unset); n > maxLeaderSettingsChange {
		return 0, invalidf("%d leader settings in one change: at most %d", n, maxLeaderSettingsChange)
	}
	for k := range set {
		if k == "" {
			return 0, invalidf("a leader setting needs a key")
		}
	}
	service := names.UnitService(unit)
	key := LeaderSettingsKey(service)
	var version int64
	err := s.apply(ctx, "set the leader settings of "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(LeadershipKey(unit)), get(key), get(UnitKey(unit)))
		if err != nil {
			return nil, err
		}
		if _, err := unitFrom(r.one(2), unit); err != nil {
			return nil, err
		}
		rec, err := decode[pb.Leadership](r.one(0))
		if err != nil {
			return nil, err
		}
		if rec == nil {
			return nil, refused("L3", "unit %s is not the leader of %s", unit, service)
		}
		h, err := s.holderFrom(ctx, service, []*mvccpb.KeyValue{r.one(0)})
		if err != nil {
			return nil, err
		}
		if holds, err := h.holds(); err != nil || !holds {
			if err == nil {
				err = refused("L3", "unit %s is no longer the leader of %s", unit, service)
			}
			return nil, err
		}
		st, err := decode[pb.LeaderSettings](r.one(1))
		if err != nil {
			return nil, err
		}
		next := &pb.LeaderSettings{Values: map[string]string{}}
		if st != nil {
			maps.Copy(next.Values, st.v.Values)
			version = st.mod
		}
		for k, v := range set {
			if v == "" {
				delete(next.Values, k)
			} else {
				next.Values[k] = v
			}
		}
		for _, k := range unset {
			delete(next.Values, k)
		}
		if st != nil && maps.Equal(next.Values, st.v.Values) || st == nil && len(next.Values) == 0 {
			return nil, errNothingToDo
		}
		if n := proto.Size(next); n > MaxLeaderSettingsBytes {
			return nil, tooLarge("the leader settings of "+service, n, MaxLeaderSettingsBytes)
		}
		c := &change{}
		c.ifMod(rec.key, rec.mod)
		c.ifMod(UnitKey(unit), h.unit.ModRevision)
		c.ifExists(presenceKey(names.MachineTag(rec.v.MachineId)))
		c.ifMod(key, modOf(r.one(1)))
		c.put(key, next)
		version = -1
		return c, nil
	})
	if err != nil || version >= 0 {
		return version, err
	}
	r, err := s.read(ctx, get(key))
	if err != nil {
		return 0, err
	}
	return modOf(r.one(0)), nil
}
