package state

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A service's settings in a relation (Juju's application databag): one
// record per side, app-settings/<relation>/<service>, beside its units'
// settings/<relation>/<unit>. Only the service's leader writes it; any
// unit of either side reads it. It is versioned by its mod revision, as
// a unit's settings are, and deleted with the relation. It lives under
// a prefix of its own, not settings/<relation>/, so that the scope's
// watches and listings, which read unit names there, never see it.
const appSettingsPrefix = "app-settings/"

// MaxAppSettingsBytes bounds a service's settings in a relation, encoded,
// as MaxSettingsBytes bounds a unit's.
const MaxAppSettingsBytes = MaxSettingsBytes

// AppSettingsPrefix is the prefix of the service settings of relation id.
func AppSettingsPrefix(relation int64) string {
	return appSettingsPrefix + strconv.FormatInt(relation, 10) + "/"
}

// AppSettingsKey is the key of service's settings in relation id.
func AppSettingsKey(relation int64, service string) string {
	return AppSettingsPrefix(relation) + service
}

// AppSettings returns service's settings in relation id (empty when its
// leader wrote none) and their version (0 for none). The relation must
// exist and service be one of its.
func (s *State) AppSettings(ctx context.Context, id int64, service string) (map[string]string, int64, error) {
	if err := checkServiceName(service); err != nil {
		return nil, 0, err
	}
	r, err := s.read(ctx, get(RelationKey(id)), get(AppSettingsKey(id, service)))
	if err != nil {
		return nil, 0, err
	}
	rel, err := relationFrom(r.one(0), id)
	if err != nil {
		return nil, 0, err
	}
	if !relationHasService(rel.v, service) {
		return nil, 0, notFoundf("service %s is not in relation %d (%s)", service, id, rel.v.Key)
	}
	st, err := decode[pb.Settings](r.one(1))
	if err != nil {
		return nil, 0, err
	}
	if st == nil {
		return map[string]string{}, 0, nil
	}
	return st.v.Values, st.mod, nil
}

// UpdateAppSettings applies changes to the settings of unit's service in
// the relations named, all in one transaction, when unit is its
// service's leader and holds (L3, as SetLeaderSettings checks it): a
// leader replaced meanwhile writes nothing. Each relation must exist and
// hold the service. Settings equal to those stored write nothing, so
// that no remote unit runs relation-changed for nothing.
func (s *State) UpdateAppSettings(ctx context.Context, unit string, changes []SettingsChange) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	if len(changes) > maxSettingsChanges {
		return invalidf("service settings of %d relations in one update: at most %d", len(changes), maxSettingsChanges)
	}
	service := names.UnitService(unit)
	return s.apply(ctx, "update the settings of service "+service, func(ctx context.Context) (*change, error) {
		gets := []getOp{get(LeadershipKey(unit)), get(UnitKey(unit))}
		for _, ch := range changes {
			gets = append(gets, get(RelationKey(ch.Relation)), get(AppSettingsKey(ch.Relation, service)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		if _, err := unitFrom(r.one(1), unit); err != nil {
			return nil, err
		}
		rec, err := decode[pb.Leadership](r.one(0))
		if err != nil {
			return nil, err
		}
		if rec == nil {
			return nil, refused("L3", "cannot write relation settings: unit %s is not the leader of %s", unit, service)
		}
		h, err := s.holderFrom(ctx, service, []*mvccpb.KeyValue{r.one(0)})
		if err != nil {
			return nil, err
		}
		if holds, err := h.holds(); err != nil || !holds {
			if err == nil {
				err = refused("L3", "cannot write relation settings: unit %s is no longer the leader of %s", unit, service)
			}
			return nil, err
		}
		c := &change{}
		for i, ch := range changes {
			rel, err := relationFrom(r.one(2+2*i), ch.Relation)
			if err != nil {
				return nil, err
			}
			if !relationHasService(rel.v, service) {
				return nil, invalidf("service %s is not in relation %d (%s)", service, ch.Relation, rel.v.Key)
			}
			key := AppSettingsKey(ch.Relation, service)
			st, err := decode[pb.Settings](r.one(3 + 2*i))
			if err != nil {
				return nil, err
			}
			next := &pb.Settings{Values: map[string]string{}}
			if st != nil {
				maps.Copy(next.Values, st.v.Values)
			}
			for k, v := range ch.Set {
				if k == "" {
					return nil, invalidf("a setting needs a key")
				}
				next.Values[k] = v
			}
			for _, k := range ch.Unset {
				delete(next.Values, k)
			}
			if st != nil && maps.Equal(next.Values, st.v.Values) || st == nil && len(next.Values) == 0 {
				continue
			}
			if n := proto.Size(next); n > MaxAppSettingsBytes {
				return nil, tooLarge(fmt.Sprintf("the settings of service %s in relation %d", service, ch.Relation), n, MaxAppSettingsBytes)
			}
			c.ifMod(rel.key, rel.mod)
			c.ifMod(key, modOf(r.one(3+2*i)))
			c.put(key, next)
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		c.ifMod(rec.key, rec.mod)
		c.ifMod(UnitKey(unit), h.unit.ModRevision)
		c.ifExists(presenceKey(names.MachineTag(rec.v.MachineId)))
		return c, nil
	})
}

// checkAppSettings checks the service settings in relations: each of an
// existing relation's service, decodable and within its bound.
func checkAppSettings(snap *Snapshot, m *model, bad func(string, ...any)) {
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, appSettingsPrefix) {
			continue
		}
		idText, svc, ok := strings.Cut(strings.TrimPrefix(k, appSettingsPrefix), "/")
		id, err := strconv.ParseInt(idText, 10, 64)
		if !ok || err != nil || checkServiceName(svc) != nil {
			bad("service settings key %s names no relation and service", k)
			continue
		}
		rel := m.relations[id]
		switch {
		case rel == nil:
			bad("settings of service %s in relation %d, which does not exist", svc, id)
		case !relationHasService(rel, svc):
			bad("settings of service %s in relation %d (%s), which it is not in", svc, id, rel.Key)
		}
		st := &pb.Settings{}
		if err := proto.Unmarshal(v, st); err != nil {
			bad("%s: undecodable value: %v", k, err)
		} else if n := proto.Size(st); n > MaxAppSettingsBytes {
			bad("settings of service %s in relation %d are %d bytes, over %d", svc, id, n, MaxAppSettingsBytes)
		}
	}
}
