package state

import (
	"context"
	"strconv"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Read-only queries for the API's authorization and watches. Each costs
// point reads, or range reads bounded by what one machine or one unit
// holds, never a read that grows with the model.

// MachineUnitsPrefix is the prefix of the references to the principal units
// assigned to machine id: the keys under it end in unit names.
func MachineUnitsPrefix(id string) string { return machineUnitsPrefix(id) }

// SubordinatesPrefix is the prefix of the references to the named unit's
// subordinates: the keys under it end in unit names.
func SubordinatesPrefix(unit string) string { return subordinatesPrefix(unit) }

// ServiceRelationsPrefix is the prefix of the references to the named
// service's relations: the keys under it end in relation ids, in decimal.
func ServiceRelationsPrefix(service string) string { return serviceRelationsPrefix(service) }

// maxPointReads bounds the gets of one read round trip (a transaction, so
// within etcd's --max-txn-ops).
const maxPointReads = MaxTxnOps

// UnitsNamed returns the named units, in order, in one round trip: nil for
// a unit that does not exist.
func (s *State) UnitsNamed(ctx context.Context, unitNames ...string) ([]*pb.Unit, error) {
	if len(unitNames) > maxPointReads {
		return nil, invalidf("%d units in one read: at most %d", len(unitNames), maxPointReads)
	}
	gets := make([]getOp, len(unitNames))
	for i, n := range unitNames {
		if err := checkUnitName(n); err != nil {
			return nil, err
		}
		gets[i] = get(UnitKey(n))
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Unit, len(unitNames))
	for i := range unitNames {
		u, err := decode[pb.Unit](r.one(i))
		if err != nil {
			return nil, err
		}
		if u != nil {
			out[i] = u.v
		}
	}
	return out, nil
}

// ServicesNamed returns the named services, in order, in one round trip:
// nil for a service that does not exist.
func (s *State) ServicesNamed(ctx context.Context, serviceNames ...string) ([]*pb.Service, error) {
	if len(serviceNames) > maxPointReads {
		return nil, invalidf("%d services in one read: at most %d", len(serviceNames), maxPointReads)
	}
	gets := make([]getOp, len(serviceNames))
	for i, n := range serviceNames {
		if err := checkServiceName(n); err != nil {
			return nil, err
		}
		gets[i] = get(ServiceKey(n))
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Service, len(serviceNames))
	for i := range serviceNames {
		svc, err := decode[pb.Service](r.one(i))
		if err != nil {
			return nil, err
		}
		if svc != nil {
			out[i] = svc.v
		}
	}
	return out, nil
}

// MachineUnitNames returns the names of the units on machine id: the
// principals assigned to it and their subordinates. It costs what the
// machine holds: a range read of its principals and, when there are any, a
// round trip reading their subordinates.
func (s *State) MachineUnitNames(ctx context.Context, id string) ([]string, error) {
	principals, err := s.MachinePrincipals(ctx, id)
	if err != nil {
		return nil, err
	}
	subs, err := s.subordinatesOf(ctx, principals, "")
	if err != nil {
		return nil, err
	}
	return append(principals, subs...), nil
}

// subordinatesOf returns the subordinates of the principals, only those of
// service when it is not "", reading the principals' references in round
// trips of at most maxPointReads ranges.
func (s *State) subordinatesOf(ctx context.Context, principals []string, service string) ([]string, error) {
	var out []string
	for len(principals) > 0 {
		batch := principals[:min(len(principals), maxPointReads)]
		principals = principals[len(batch):]
		gets := make([]getOp, len(batch))
		for i, p := range batch {
			prefix := subordinatesPrefix(p)
			if service != "" {
				prefix += service + "/"
			}
			gets[i] = getKeys(prefix, 0)
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for i, p := range batch {
			out = append(out, keySuffixes(r.all(i), subordinatesPrefix(p))...)
		}
	}
	return out, nil
}

// MachineRunsService reports whether a unit of the named service is on
// machine id: a principal assigned to it, or a subordinate of one. A
// principal is found in one round trip, which also lists the machine's
// principals; only when none is of the service are their subordinates read.
func (s *State) MachineRunsService(ctx context.Context, id, service string) (bool, error) {
	if err := checkMachineID(id); err != nil {
		return false, err
	}
	if err := checkServiceName(service); err != nil {
		return false, err
	}
	prefix := machineUnitsPrefix(id)
	r, err := s.read(ctx, getKeys(prefix+service+"/", 1), getKeys(prefix, 0))
	if err != nil {
		return false, err
	}
	if r.one(0) != nil {
		return true, nil
	}
	subs, err := s.subordinatesOf(ctx, keySuffixes(r.all(1), prefix), service)
	if err != nil {
		return false, err
	}
	return len(subs) > 0, nil
}

// SubordinateOfService returns the name of the named principal's
// subordinate of the named service, or "" when it has none.
func (s *State) SubordinateOfService(ctx context.Context, principal, service string) (string, error) {
	if err := checkUnitName(principal); err != nil {
		return "", err
	}
	if err := checkServiceName(service); err != nil {
		return "", err
	}
	subs, err := s.subordinatesOf(ctx, []string{principal}, service)
	if err != nil || len(subs) == 0 {
		return "", err
	}
	return subs[0], nil
}

// RelationsBetween returns the relations between services a and b (two
// different services). It reads both services, derives the keys of the
// relations their endpoints could form, and reads those: point reads only,
// however many relations either service is in.
func (s *State) RelationsBetween(ctx context.Context, a, b string) ([]*pb.Relation, error) {
	svcs, err := s.ServicesNamed(ctx, a, b)
	if err != nil {
		return nil, err
	}
	for i, name := range []string{a, b} {
		if svcs[i] == nil {
			return nil, notFoundf("service %s not found", name)
		}
	}
	var keys []string
	for _, ea := range svcs[0].Endpoints {
		for _, eb := range svcs[1].Endpoints {
			if compatible(svcs[0], ea, svcs[1], eb) == nil {
				keys = append(keys, relationKeyOf([]*pb.RelationEndpoint{{Service: a, Endpoint: ea}, {Service: b, Endpoint: eb}}))
			}
		}
	}
	var ids []int64
	for len(keys) > 0 {
		batch := keys[:min(len(keys), maxPointReads)]
		keys = keys[len(batch):]
		gets := make([]getOp, len(batch))
		for i, k := range batch {
			gets[i] = get(relkeyKey(k))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for i := range batch {
			if kv := r.one(i); kv != nil {
				id, err := strconv.ParseInt(string(kv.Value), 10, 64)
				if err != nil {
					return nil, invalidf("corrupt relation key index %s", kv.Key)
				}
				ids = append(ids, id)
			}
		}
	}
	var out []*pb.Relation
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxPointReads)]
		ids = ids[len(batch):]
		gets := make([]getOp, len(batch))
		for i, id := range batch {
			gets[i] = get(RelationKey(id))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for i := range batch {
			rel, err := decode[pb.Relation](r.one(i))
			if err != nil {
				return nil, err
			}
			if rel != nil {
				out = append(out, rel.v)
			}
		}
	}
	return out, nil
}
