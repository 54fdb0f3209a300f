package state

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ScopeUnitsOf returns up to limit of the named service's units in
// relation id's scope, in key order, and how many there are in all (the
// count from etcd's index, without reading them).
func (s *State) ScopeUnitsOf(ctx context.Context, id int64, service string, limit int) ([]string, int64, error) {
	if err := checkServiceName(service); err != nil {
		return nil, 0, err
	}
	if limit <= 0 {
		return nil, 0, invalidf("scope units limit %d: want at least 1", limit)
	}
	prefix := ScopePrefix(id) + service + "/"
	count := getKeys(prefix, 0)
	count.CountOnly = true
	r, err := s.read(ctx, getKeys(prefix, int64(limit)), count)
	if err != nil {
		return nil, 0, err
	}
	return keySuffixes(r.all(0), ScopePrefix(id)), r.ranges[1].Count, nil
}

// SettingsOf returns the named units' settings in relation id, in one
// read at one revision: units not in its scope have none in the map. At
// most selectBatch units.
func (s *State) SettingsOf(ctx context.Context, id int64, units []string) (map[string]map[string]string, error) {
	if len(units) > selectBatch {
		return nil, invalidf("%d units: at most %d", len(units), selectBatch)
	}
	gets := make([]getOp, 0, len(units))
	for _, u := range units {
		if err := checkUnitName(u); err != nil {
			return nil, err
		}
		gets = append(gets, get(SettingsKey(id, u)))
	}
	out := map[string]map[string]string{}
	if len(gets) == 0 {
		return out, nil
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return nil, err
	}
	for i, u := range units {
		st, err := decode[pb.Settings](r.one(i))
		if err != nil {
			return nil, err
		}
		if st != nil {
			out[u] = st.v.Values
			if out[u] == nil {
				out[u] = map[string]string{}
			}
		}
	}
	return out, nil
}
