package state

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// EndpointSpec names one side of a relation to add: a service, and the
// endpoint when the service has several that could match.
type EndpointSpec struct {
	Service  string
	Endpoint string
}

// ParseEndpointSpec parses "SERVICE" or "SERVICE:ENDPOINT".
func ParseEndpointSpec(s string) (EndpointSpec, error) {
	svc, ep, _ := strings.Cut(s, ":")
	if err := checkServiceName(svc); err != nil {
		return EndpointSpec{}, err
	}
	if strings.Contains(s, ":") && !names.ValidEndpoint(ep) {
		return EndpointSpec{}, invalidf("invalid endpoint name %q in %q", ep, s)
	}
	return EndpointSpec{Service: svc, Endpoint: ep}, nil
}

func (e EndpointSpec) String() string {
	if e.Endpoint == "" {
		return e.Service
	}
	return e.Service + ":" + e.Endpoint
}

func newRelation(id int64, eps []*pb.RelationEndpoint) *pb.Relation {
	scope := pb.Scope_SCOPE_GLOBAL
	for _, ep := range eps {
		if ep.Endpoint.Scope == pb.Scope_SCOPE_CONTAINER {
			scope = pb.Scope_SCOPE_CONTAINER
		}
	}
	return &pb.Relation{Id: id, Key: relationKeyOf(eps), Life: pb.Life_LIFE_ALIVE, Endpoints: eps, Scope: scope}
}

// matchEndpoints finds the one pair of endpoints of services a and b that
// can be related: the same interface, a provider and a requirer, and
// container scope only with a subordinate on one side.
func matchEndpoints(a, b *pb.Service, sa, sb EndpointSpec) ([]*pb.RelationEndpoint, error) {
	var found [][]*pb.RelationEndpoint
	for _, ea := range a.Endpoints {
		if sa.Endpoint != "" && !endpointIs(ea, sa.Endpoint) {
			continue
		}
		for _, eb := range b.Endpoints {
			if sb.Endpoint != "" && !endpointIs(eb, sb.Endpoint) {
				continue
			}
			if compatible(a, ea, b, eb) == nil {
				found = append(found, []*pb.RelationEndpoint{
					{Service: a.Name, Endpoint: ea, Subordinate: a.Subordinate},
					{Service: b.Name, Endpoint: eb, Subordinate: b.Subordinate},
				})
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		// Explain the most specific reason when both endpoints were named.
		if ea, eb := endpointNamed(a, sa.Endpoint), endpointNamed(b, sb.Endpoint); ea != nil && eb != nil {
			return nil, compatible(a, ea, b, eb)
		}
		for _, s := range []struct {
			svc  *pb.Service
			spec EndpointSpec
		}{{a, sa}, {b, sb}} {
			if s.spec.Endpoint != "" && endpointNamed(s.svc, s.spec.Endpoint) == nil {
				return nil, notFoundf("service %s has no endpoint %q", s.svc.Name, s.spec.Endpoint)
			}
		}
		return nil, invalidf("no endpoints of %s and %s can be related: %s; %s", sa, sb, offers(a, sa.Endpoint), offers(b, sb.Endpoint))
	default:
		keys := make([]string, len(found))
		for i, f := range found {
			keys[i] = relationKeyOf(f)
		}
		return nil, invalidf("ambiguous relation: %s %s could be %s; name the endpoints", sa, sb, strings.Join(keys, " or "))
	}
}

func endpointNamed(svc *pb.Service, name string) *pb.Endpoint {
	for _, ep := range svc.Endpoints {
		if endpointIs(ep, name) {
			return ep
		}
	}
	return nil
}

// The implicit endpoint every principal provides (charm.InfoEndpoint,
// Juju's juju-info), and its second name (charm.InfoAlias), which services
// may hold in their records: each name stands for the other, as an
// endpoint's name and as an interface.
const (
	infoEndpoint = "juju-info"
	infoAlias    = "lifeline-info"
)

// infoName says whether name is either name of the implicit endpoint or
// of its interface.
func infoName(name string) bool { return name == infoEndpoint || name == infoAlias }

// isInfo says whether ep is the implicit endpoint, under either name.
func isInfo(ep *pb.Endpoint) bool {
	return ep.Role == pb.Role_ROLE_PROVIDER && infoName(ep.Name) && infoName(ep.Interface)
}

// endpointIs says whether ep is the endpoint named name: by its name, or
// the implicit endpoint by either of its names.
func endpointIs(ep *pb.Endpoint, name string) bool {
	return ep.Name == name || isInfo(ep) && infoName(name)
}

// keepInfoName returns eps, a service's new endpoints, with the implicit
// endpoint under the name (and interface) it has in old, the service's
// endpoints now: a service keeps its implicit endpoint's name for its life,
// so that its relations and its units' hooks go on naming it so whichever
// name a new charm's record gives it.
func keepInfoName(old, eps []*pb.Endpoint) []*pb.Endpoint {
	var was *pb.Endpoint
	for _, ep := range old {
		if isInfo(ep) {
			was = ep
		}
	}
	if was == nil {
		return eps
	}
	i := slices.IndexFunc(eps, isInfo)
	if i < 0 || eps[i].Name == was.Name && eps[i].Interface == was.Interface {
		return eps
	}
	out := slices.Clone(eps)
	out[i] = protoClone(eps[i])
	out[i].Name, out[i].Interface = was.Name, was.Interface
	slices.SortFunc(out, func(a, b *pb.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sameInterface says whether endpoints of interfaces x and y may relate:
// the same, or the implicit endpoint's under its two names.
func sameInterface(x, y string) bool {
	return x == y || infoName(x) && infoName(y)
}

// offers says what endpoints svc could relate through (those named name
// when given), for a refusal: "ubuntu offers juju-info (juju-info, alias
// lifeline-info)", "papertrail requires juju-info (juju-info,
// container)".
func offers(svc *pb.Service, name string) string {
	var provides, requires []string
	for _, ep := range svc.Endpoints {
		if ep.Role == pb.Role_ROLE_PEER || name != "" && !endpointIs(ep, name) {
			continue
		}
		name, what := ep.Name, ep.Interface
		if isInfo(ep) {
			// Either name names it: the refusal shows Juju's.
			name, what = infoEndpoint, infoEndpoint+", alias "+infoAlias
		}
		if ep.Scope == pb.Scope_SCOPE_CONTAINER {
			what += ", container"
		}
		desc := fmt.Sprintf("%s (%s)", name, what)
		if ep.Role == pb.Role_ROLE_PROVIDER {
			provides = append(provides, desc)
		} else {
			requires = append(requires, desc)
		}
	}
	var parts []string
	if len(provides) > 0 {
		parts = append(parts, "offers "+strings.Join(provides, ", "))
	}
	if len(requires) > 0 {
		parts = append(parts, "requires "+strings.Join(requires, ", "))
	}
	if len(parts) == 0 {
		return svc.Name + " has no endpoint to relate"
	}
	return svc.Name + " " + strings.Join(parts, " and ")
}

// compatible says why endpoints ea of a and eb of b cannot be related, or nil.
func compatible(a *pb.Service, ea *pb.Endpoint, b *pb.Service, eb *pb.Endpoint) error {
	pair := fmt.Sprintf("%s:%s and %s:%s", a.Name, ea.Name, b.Name, eb.Name)
	switch {
	case !sameInterface(ea.Interface, eb.Interface):
		return invalidf("cannot relate %s: interfaces %s and %s differ", pair, ea.Interface, eb.Interface)
	case ea.Role == pb.Role_ROLE_PEER || eb.Role == pb.Role_ROLE_PEER:
		return invalidf("cannot relate %s: peer relations come with their service", pair)
	case ea.Role == eb.Role:
		return invalidf("cannot relate %s: both %s", pair, roleName(ea.Role))
	case a.Name == b.Name:
		return invalidf("cannot relate %s: a service relates to itself only through peer endpoints", pair)
	case (ea.Scope == pb.Scope_SCOPE_CONTAINER || eb.Scope == pb.Scope_SCOPE_CONTAINER) && !a.Subordinate && !b.Subordinate:
		return invalidf("cannot relate %s: a container-scoped relation needs a subordinate service", pair)
	}
	return nil
}

func roleName(r pb.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_")) + "s"
}

// AddRelation relates two alive services (S1) through matching endpoints,
// inferred when not named.
func (s *State) AddRelation(ctx context.Context, a, b EndpointSpec) (*pb.Relation, error) {
	var rel *pb.Relation
	err := s.apply(ctx, "add relation", func(ctx context.Context) (*change, error) {
		if err := checkServiceName(a.Service); err != nil {
			return nil, err
		}
		if err := checkServiceName(b.Service); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(ServiceKey(a.Service)), get(ServiceKey(b.Service)), get(seqRelation),
			getPrefix(serviceRelationsPrefix(a.Service), 0), getPrefix(serviceRelationsPrefix(b.Service), 0))
		if err != nil {
			return nil, err
		}
		sa, err := serviceFrom(r.one(0), a.Service)
		if err != nil {
			return nil, err
		}
		sb, err := serviceFrom(r.one(1), b.Service)
		if err != nil {
			return nil, err
		}
		eps, err := matchEndpoints(sa.v, sb.v, a, b)
		if err != nil {
			return nil, err
		}
		for _, svc := range []*pb.Service{sa.v, sb.v} {
			if svc.Life != pb.Life_LIFE_ALIVE {
				return nil, refused("S1", "service %s is %s: relations are added only to an alive service", svc.Name, lifeName(svc.Life))
			}
		}
		id, seqRev, err := seqValue(r.one(2))
		if err != nil {
			return nil, err
		}
		rel = newRelation(id, eps)
		dup, err := s.read(ctx, get(relkeyKey(rel.Key)))
		if err != nil {
			return nil, err
		}
		if dup.one(0) != nil {
			return nil, existsf("relation %s already exists", rel.Key)
		}
		c := &change{}
		c.ifMod(sa.key, sa.mod)
		c.ifMod(sb.key, sb.mod)
		c.ifMod(seqRelation, seqRev)
		c.ifAbsent(relkeyKey(rel.Key))
		for i, ep := range eps {
			// An endpoint's limit counts the relations it is in now; the
			// set must not have grown when the new one lands.
			if lim := ep.Endpoint.Limit; lim > 0 {
				n := 0
				for _, kv := range r.all(3 + i) {
					if string(kv.Value) == ep.Endpoint.Name {
						n++
					}
				}
				if n >= int(lim) {
					return nil, refused("S1", "endpoint %s:%s is already in %d relations, its limit", ep.Service, ep.Endpoint.Name, n)
				}
				c.ifNoNewer(serviceRelationsPrefix(ep.Service), r.rev)
			}
		}
		c.putRaw(seqRelation, strconv.FormatInt(id+1, 10))
		c.put(RelationKey(id), rel)
		c.putRaw(relkeyKey(rel.Key), strconv.FormatInt(id, 10))
		for _, ep := range eps {
			c.putRaw(serviceRelationRef(ep.Service, id), ep.Endpoint.Name)
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return rel, nil
}

func (s *State) relation(ctx context.Context, id int64) (*record[*pb.Relation], error) {
	r, err := s.read(ctx, get(RelationKey(id)))
	if err != nil {
		return nil, err
	}
	return relationFrom(r.one(0), id)
}

func relationFrom(kv *mvccpb.KeyValue, id int64) (*record[*pb.Relation], error) {
	rel, err := decode[pb.Relation](kv)
	if err != nil {
		return nil, err
	}
	if rel == nil {
		return nil, notFoundf("relation %d not found", id)
	}
	return rel, nil
}

// Relation returns relation id.
func (s *State) Relation(ctx context.Context, id int64) (*pb.Relation, error) {
	rel, err := s.relation(ctx, id)
	if err != nil {
		return nil, err
	}
	return rel.v, nil
}

// RelationByKey returns the relation with the given key ("app:db kv:server").
func (s *State) RelationByKey(ctx context.Context, key string) (*pb.Relation, error) {
	r, err := s.read(ctx, get(relkeyKey(key)))
	if err != nil {
		return nil, err
	}
	kv := r.one(0)
	if kv == nil {
		return nil, notFoundf("relation %q not found", key)
	}
	id, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return nil, invalidf("corrupt relation key index %s", kv.Key)
	}
	return s.Relation(ctx, id)
}

// Relations returns every relation.
func (s *State) Relations(ctx context.Context) ([]*pb.Relation, error) {
	return listDecoded[pb.Relation](ctx, s, relationsPrefix)
}

// ServiceRelations returns the ids of the named service's relations.
func (s *State) ServiceRelations(ctx context.Context, service string) ([]int64, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, serviceRelationsPrefix(service), true)
	if err != nil {
		return nil, err
	}
	return relationIDs(kvs)
}

// DestroyRelation removes relation id at once when no unit is in its scope,
// and otherwise sets it dying: the units in its scope depart, and the last
// to leave removes it (R2). A peer relation goes only with its service.
// Destroying a dying relation does nothing.
func (s *State) DestroyRelation(ctx context.Context, id int64) error {
	return s.destroyRelation(ctx, id, false)
}

func (s *State) destroyRelation(ctx context.Context, id int64, peerToo bool) error {
	return s.apply(ctx, fmt.Sprintf("destroy relation %d", id), func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(RelationKey(id)), getKeys(ScopePrefix(id), 1), get(OwnerKey(OwnRelation, strconv.FormatInt(id, 10))))
		if err != nil {
			return nil, err
		}
		rel, err := relationFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		if rel.v.Life != pb.Life_LIFE_ALIVE {
			return nil, errNothingToDo
		}
		if len(rel.v.Endpoints) == 1 && !peerToo {
			return nil, invalidf("relation %d (%s) is a peer relation: it goes with its service", id, rel.v.Key)
		}
		c := &change{}
		c.ifMod(rel.key, rel.mod)
		if w := r.one(1); w != nil {
			c.ifSame(string(w.Key), w.CreateRevision)
			next := protoClone(rel.v)
			next.Life = pb.Life_LIFE_DYING
			c.put(rel.key, next)
			return c, nil
		}
		c.ifEmpty(ScopePrefix(id))
		if err := s.removeRelationOps(ctx, c, rel.v, r.one(2), true); err != nil {
			return nil, err
		}
		return c, nil
	})
}

// removeRelationOps removes relation rel, whose scope is empty, and its
// owner record owner (as read with it; nil when none: removeOwnerOps, where
// compare is said), and settles its services (S3): a dying service it was
// the last thing holding goes too.
func (s *State) removeRelationOps(ctx context.Context, c *change, rel *pb.Relation, owner *mvccpb.KeyValue, compare bool) error {
	c.del(RelationKey(rel.Id))
	removeOwnerOps(c, OwnRelation, strconv.FormatInt(rel.Id, 10), owner, compare)
	c.del(relkeyKey(rel.Key))
	c.delPrefix(SettingsPrefix(rel.Id))
	c.delPrefix(AppSettingsPrefix(rel.Id))
	for _, svc := range relationServices(rel) {
		v, _, err := s.readServiceView(ctx, svc, "")
		if err != nil {
			return err
		}
		ref := serviceRelationRef(svc, rel.Id)
		c.del(ref)
		v.settle(c, "", ref)
	}
	return nil
}

// relationServices returns the distinct services of rel.
func relationServices(rel *pb.Relation) []string {
	var out []string
	for _, ep := range rel.Endpoints {
		if len(out) == 0 || out[0] != ep.Service {
			out = append(out, ep.Service)
		}
	}
	return out
}
