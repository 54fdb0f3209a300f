package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// maxEndpoints bounds a charm's endpoints, and so the size of the
// transaction that adds a service with its peer relations.
const maxEndpoints = 32

// maxPeers bounds the peer relations created with a service.
const maxPeers = 8

// AddServiceArgs describe a new service.
type AddServiceArgs struct {
	Name        string
	Charm       *pb.CharmRef
	Subordinate bool
	Endpoints   []*pb.Endpoint
	// Config holds the service's complete configuration (the charm's
	// defaults applied), already checked against the charm's config.yaml
	// by the caller: revision 1's spec with Charm.
	Config map[string]*pb.ConfigValue
	// By is the user who deploys, for revision 1; "" for the controller.
	By string
}

func (a AddServiceArgs) validate() error {
	if err := checkServiceName(a.Name); err != nil {
		return err
	}
	if a.Charm == nil || a.Charm.Name == "" {
		return invalidf("service %s needs a charm", a.Name)
	}
	if n := proto.Size(&pb.ServiceConfig{Values: a.Config}); n > MaxConfigBytes {
		return tooLarge("the configuration of service "+a.Name, n, MaxConfigBytes)
	}
	if len(a.Endpoints) > maxEndpoints {
		return invalidf("service %s has %d endpoints: at most %d", a.Name, len(a.Endpoints), maxEndpoints)
	}
	seen := map[string]bool{}
	peers, container := 0, false
	for _, ep := range a.Endpoints {
		if ep == nil || !names.ValidEndpoint(ep.Name) {
			return invalidf("service %s: invalid endpoint name %q", a.Name, ep.GetName())
		}
		if seen[ep.Name] {
			return invalidf("service %s: endpoint %q declared twice", a.Name, ep.Name)
		}
		seen[ep.Name] = true
		if !names.ValidEndpoint(ep.Interface) {
			return invalidf("service %s: endpoint %s has invalid interface %q", a.Name, ep.Name, ep.Interface)
		}
		switch ep.Role {
		case pb.Role_ROLE_PROVIDER, pb.Role_ROLE_REQUIRER:
		case pb.Role_ROLE_PEER:
			peers++
		default:
			return invalidf("service %s: endpoint %s has no role", a.Name, ep.Name)
		}
		switch ep.Scope {
		case pb.Scope_SCOPE_GLOBAL:
		case pb.Scope_SCOPE_CONTAINER:
			container = true
		default:
			return invalidf("service %s: endpoint %s has no scope", a.Name, ep.Name)
		}
		if ep.Limit < 0 {
			return invalidf("service %s: endpoint %s has a negative limit", a.Name, ep.Name)
		}
	}
	if peers > maxPeers {
		return invalidf("service %s has %d peer endpoints: at most %d", a.Name, peers, maxPeers)
	}
	if a.Subordinate && !container {
		return invalidf("subordinate service %s needs a container-scoped endpoint", a.Name)
	}
	return nil
}

// AddService adds an alive service, with a peer relation for each of its
// peer endpoints, its revision 1 and its rollout, done.
func (s *State) AddService(ctx context.Context, args AddServiceArgs) (*pb.Service, error) {
	if err := args.validate(); err != nil {
		return nil, err
	}
	svc := &pb.Service{
		Name:        args.Name,
		Life:        pb.Life_LIFE_ALIVE,
		Charm:       args.Charm,
		Subordinate: args.Subordinate,
		Endpoints:   args.Endpoints,
	}
	err := s.apply(ctx, "add service "+args.Name, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(ServiceKey(args.Name)), get(seqRelation))
		if err != nil {
			return nil, err
		}
		if r.one(0) != nil {
			return nil, existsf("service %s already exists", args.Name)
		}
		next, seqRev, err := seqValue(r.one(1))
		if err != nil {
			return nil, err
		}
		c := &change{}
		c.ifAbsent(ServiceKey(args.Name))
		c.put(ServiceKey(args.Name), svc)
		c.put(ServiceConfigKey(args.Name), &pb.ServiceConfig{Values: args.Config})
		c.ifEmpty(RevisionsPrefix(args.Name))
		s.firstRevisionOps(c, args)
		peers := 0
		for _, ep := range args.Endpoints {
			if ep.Role != pb.Role_ROLE_PEER {
				continue
			}
			rel := newRelation(next+int64(peers), []*pb.RelationEndpoint{{Service: args.Name, Endpoint: ep, Subordinate: args.Subordinate}})
			peers++
			c.ifAbsent(relkeyKey(rel.Key))
			c.put(RelationKey(rel.Id), rel)
			c.putRaw(relkeyKey(rel.Key), strconv.FormatInt(rel.Id, 10))
			c.putRaw(serviceRelationRef(args.Name, rel.Id), ep.Name)
		}
		if peers > 0 {
			c.ifMod(seqRelation, seqRev)
			c.putRaw(seqRelation, strconv.FormatInt(next+int64(peers), 10))
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return svc, nil
}

func (s *State) service(ctx context.Context, name string) (*record[*pb.Service], error) {
	if err := checkServiceName(name); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(ServiceKey(name)))
	if err != nil {
		return nil, err
	}
	return serviceFrom(r.one(0), name)
}

func serviceFrom(kv *mvccpb.KeyValue, name string) (*record[*pb.Service], error) {
	svc, err := decode[pb.Service](kv)
	if err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, notFoundf("service %s not found", name)
	}
	return svc, nil
}

// Service returns the named service.
func (s *State) Service(ctx context.Context, name string) (*pb.Service, error) {
	svc, err := s.service(ctx, name)
	if err != nil {
		return nil, err
	}
	return svc.v, nil
}

// Services returns every service.
func (s *State) Services(ctx context.Context) ([]*pb.Service, error) {
	return listDecoded[pb.Service](ctx, s, servicesPrefix)
}

// ServiceConfig returns the named service's configuration.
func (s *State) ServiceConfig(ctx context.Context, name string) (*pb.ServiceConfig, error) {
	if err := checkServiceName(name); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(ServiceConfigKey(name)))
	if err != nil {
		return nil, err
	}
	cfg, err := decode[pb.ServiceConfig](r.one(0))
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, notFoundf("service %s not found", name)
	}
	return cfg.v, nil
}

// DestroyService removes the named service at once when it has no units and
// no relations; otherwise it sets it dying and writes a cleanup item with
// which the cleaner sets its units and relations dying (S2). Destroying a
// dying service does nothing.
func (s *State) DestroyService(ctx context.Context, name string) error {
	return s.apply(ctx, "destroy service "+name, func(ctx context.Context) (*change, error) {
		if err := checkServiceName(name); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(ServiceKey(name)), getKeys(ServiceUnitsPrefix(name), 1), getKeys(serviceRelationsPrefix(name), 1),
			get(OwnerKey(OwnService, name)))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), name)
		if err != nil {
			return nil, err
		}
		if svc.v.Life != pb.Life_LIFE_ALIVE {
			return nil, errNothingToDo
		}
		c := &change{}
		c.ifMod(svc.key, svc.mod)
		unit, rel := r.one(1), r.one(2)
		if unit == nil && rel == nil {
			c.ifEmpty(ServiceUnitsPrefix(name))
			c.ifEmpty(serviceRelationsPrefix(name))
			removeServiceOps(c, name)
			removeOwnerOps(c, OwnService, name, r.one(3), true)
			return c, nil
		}
		// Something keeps the service: assert it still does, or whoever
		// removes it might not know to remove the service too (S3).
		if unit != nil {
			c.ifSame(string(unit.Key), unit.CreateRevision)
		} else {
			c.ifSame(string(rel.Key), rel.CreateRevision)
		}
		next := protoClone(svc.v)
		next.Life = pb.Life_LIFE_DYING
		c.put(svc.key, next)
		c.put(cleanupKey(cleanupServiceDying, name), &pb.Cleanup{Kind: pb.CleanupKind_CLEANUP_KIND_SERVICE_DYING, Target: name})
		return c, nil
	})
}

// removeServiceOps removes a service and its records.
func removeServiceOps(c *change, name string) {
	c.del(ServiceKey(name))
	c.del(ServiceConfigKey(name))
	c.del(StatusKey(StatusService, name))
	c.del(StatusKey(StatusServiceVersion, name))
	c.del(cleanupKey(cleanupServiceDying, name))
	c.delPrefix(RevisionsPrefix(name))
	c.del(RolloutKey(name))
	c.del(RolloutPolicyKey(name))
	c.delPrefix(PermitsPrefix(name))
	c.delPrefix(GateDecisionsPrefix(name))
	c.delPrefix(LeadershipServicePrefix(name))
	c.del(LeaderSettingsKey(name))
}

// serviceView is what S3 needs to know about a service: the service, some
// of its units, and a few of its relation references.
type serviceView struct {
	name  string
	svc   *record[*pb.Service]
	units []*mvccpb.KeyValue
	rels  []*mvccpb.KeyValue
	// owner is the service's owner record (nil: none), which its removal
	// deletes.
	owner *mvccpb.KeyValue
	// siblings are the keys of the unit's neighbours by one, the
	// witnesses to pass over when there are others (siblingKeys).
	siblings []string
}

// witnessProbes are the unit numbers, relative to a unit being removed,
// whose keys are tried as witnesses that the service has other units, in
// pairs, nearest first. Point reads of neighbours cost little and spread
// the witnesses of concurrent removals; a range read of the service's
// units costs as much as the service has units, because etcd counts the
// whole range whatever the limit. The witness is one of the farthest pair
// there (farthestProbes): units added together are numbered one after the
// other and tend to go together (to one machine, set dying in one of the
// cleaner's batches), and a removal whose witness goes meanwhile conflicts
// and is tried again.
//
// The farthest probes a unit can have are read with the change's other
// reads, the nearer ones only when none of those is there (probeStages).
// Until most of the service's units are gone one of the farthest is, and
// the witness is one of it anyway: read at once, the nearer probes were
// eight of the twelve keys a departure from a dying relation read.
var witnessProbes = []int64{1, -1, 16, -16, 64, -64, 256, -256, 1024, -1024}

// probeStages splits witnessProbes for unit into the probes read first,
// with the change's other reads, and the rest, read only when none of the
// first exists. First come those as far as the farthest pair that has a
// neighbour below unit (units are numbered from 0), or farther: for
// bench/5000 the pair at 1024, for bench/100 those at 1024, 256 and 64,
// the only ones of those far that can be there. So the witness chosen is
// the one that reading every probe at once would choose, one of the
// farthest there.
func probeStages(unit string) (first, rest []int64) {
	n, err := strconv.ParseInt(lastSegment(unit), 10, 64)
	if err != nil {
		return witnessProbes, nil
	}
	near := int64(1)
	for _, d := range witnessProbes {
		if d > 0 && d <= n {
			near = max(near, d)
		}
	}
	for _, d := range witnessProbes {
		if max(d, -d) >= near {
			first = append(first, d)
		} else {
			rest = append(rest, d)
		}
	}
	return first, rest
}

// siblingKeys returns key(u) for the units u of unit's service numbered
// one below and one above it: units added together to one machine, which
// its agent takes through their ends at the same time (removals of four
// at once; departures, without hooks, all at once). As witnesses of each
// other's removal or departure they conflict far more often than the
// units further away, so those are chosen when there are any.
func siblingKeys(unit string, key func(unit string) string) []string {
	return neighbourKeys(unit, key, []int64{1, -1})
}

// neighbourProbes returns key(u) for the units u of unit's service whose
// numbers are unit's plus each of deltas (one of probeStages), the
// candidate witnesses of a removal or a departure, and the reads of
// whether each exists. A witness need only exist when the change commits
// (change.ifExists), so its existence is all that is read: from etcd's
// index, where reading the key itself read its record from etcd's
// database too.
func neighbourProbes(unit string, key func(unit string) string, deltas []int64) ([]string, []getOp) {
	keys := neighbourKeys(unit, key, deltas)
	gets := make([]getOp, len(keys))
	for i, k := range keys {
		gets[i] = getExists(k)
	}
	return keys, gets
}

// farthestProbes returns those of found, the keys of unit's neighbours
// (neighbourProbes) that exist, furthest from unit by number: those most
// likely to be there still when the change commits.
func farthestProbes(found []*mvccpb.KeyValue, unit string) []*mvccpb.KeyValue {
	n, err := strconv.ParseInt(lastSegment(unit), 10, 64)
	if err != nil || len(found) < 2 {
		return found
	}
	dist := func(kv *mvccpb.KeyValue) int64 {
		m, err := strconv.ParseInt(lastSegment(string(kv.Key)), 10, 64)
		if err != nil {
			return 0
		}
		return max(m-n, n-m)
	}
	far := int64(0)
	for _, kv := range found {
		far = max(far, dist(kv))
	}
	var out []*mvccpb.KeyValue
	for _, kv := range found {
		if dist(kv) == far {
			out = append(out, kv)
		}
	}
	return out
}

// witnessCandidates returns the witnesses to choose from among found, the
// neighbours probed that exist: the farthest of those no transaction in
// flight deletes (deletions.staying), when there are any.
func (s *State) witnessCandidates(found []*mvccpb.KeyValue, unit string) []*mvccpb.KeyValue {
	return farthestProbes(s.deleting.staying(found), unit)
}

// neighbourKeys returns key(u) for the units u of unit's service whose
// numbers are unit's plus each of deltas, in their order, none below 0.
func neighbourKeys(unit string, key func(unit string) string, deltas []int64) []string {
	n, err := strconv.ParseInt(lastSegment(unit), 10, 64)
	if err != nil {
		return nil
	}
	svc := names.UnitService(unit)
	var out []string
	for _, d := range deltas {
		if n+d >= 0 {
			out = append(out, key(unitName(svc, n+d)))
		}
	}
	return out
}

// readServiceView reads, in one round trip with the extra gets (whose
// answers it returns), what S3 needs to decide on the named service when
// unit (possibly "") is removed. Only when the service is dying and none
// of unit's neighbours probed first exists does it read more
// (moreWitnesses), in a second round trip or more.
func (s *State) readServiceView(ctx context.Context, name, unit string, extra ...getOp) (*serviceView, *reads, error) {
	gets := append(extra, get(ServiceKey(name)), getKeys(serviceRelationsPrefix(name), 2), get(OwnerKey(OwnService, name)))
	var probes []string
	var later []int64
	if unit != "" {
		var first []int64
		var probeGets []getOp
		first, later = probeStages(unit)
		probes, probeGets = neighbourProbes(unit, UnitKey, first)
		gets = append(gets, probeGets...)
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return nil, nil, err
	}
	i := len(extra)
	svc, err := serviceFrom(r.one(i), name)
	if err != nil {
		return nil, r, err
	}
	v := &serviceView{name: name, svc: svc, rels: r.all(i + 1), owner: r.one(i + 2), units: s.witnessCandidates(r.existing(i+3, probes), unit)}
	if unit != "" {
		v.siblings = siblingKeys(unit, UnitKey)
	}
	if svc.v.Life != pb.Life_LIFE_ALIVE && len(v.units) == 0 {
		more, err := s.moreWitnesses(ctx, unit, later, UnitKey, ServiceUnitsPrefix(name))
		if err != nil {
			return nil, r, err
		}
		v.units = more
	}
	return v, r, nil
}

// witnessWindows returns the prefixes, narrowest first, of keyOf(u) for
// the units u of unit's service whose names share ever shorter leading
// parts with unit's: for bench/1234, keyOf("bench/123"), keyOf("bench/12")
// and keyOf("bench/1"). Each holds about ten times as many units as the
// one before it (11, 111, 1,111).
func witnessWindows(unit string, keyOf func(string) string) []string {
	svc, num := names.UnitService(unit), lastSegment(unit)
	var out []string
	for i := len(num) - 1; i >= 1; i-- {
		out = append(out, keyOf(svc+"/"+num[:i]))
	}
	return out
}

// moreWitnesses reads candidate witnesses of unit's removal from prefix
// (which holds keyOf of its service's units) when none of the neighbours
// probed first exists: the neighbours at the later probes (probeStages)
// in one round trip, and only when none of them exists either, a range
// (rangeWitnesses).
func (s *State) moreWitnesses(ctx context.Context, unit string, later []int64, keyOf func(string) string, prefix string) ([]*mvccpb.KeyValue, error) {
	probes, gets := neighbourProbes(unit, keyOf, later)
	if len(gets) > 0 {
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		if found := s.witnessCandidates(r.existing(0, probes), unit); len(found) > 0 {
			return found, nil
		}
	}
	return s.rangeWitnesses(ctx, unit, keyOf, prefix)
}

// rangeWitnesses reads up to two keys by range as candidate witnesses of
// unit's removal from prefix (which holds keyOf of its service's units),
// when none of its probed neighbours was one: under the narrowest of unit's
// witnessWindows that holds another key, else under the whole prefix. A
// range read costs as many keys as the range holds, deleted ones too
// until etcd compacts them, whatever its limit: late in a large destroy,
// a read of the whole prefix passed over thousands of deleted keys each
// time, where a narrow window that holds a witness costs a few.
func (s *State) rangeWitnesses(ctx context.Context, unit string, keyOf func(string) string, prefix string) ([]*mvccpb.KeyValue, error) {
	self := keyOf(unit)
	var kvs []*mvccpb.KeyValue
	for _, w := range append(witnessWindows(unit, keyOf), prefix) {
		r, err := s.read(ctx, getKeys(w, 2))
		if err != nil {
			return nil, err
		}
		if kvs = r.all(0); witness(kvs, self) != nil {
			break
		}
	}
	return kvs, nil
}

// settle is S3 at the moment a change removes unitKey or relRef (either may
// be ""): when the service is dying and nothing else holds it, the change
// removes the service too, and says so. Either way the change asserts
// what the decision rests on, so that of two concurrent removals exactly
// one removes the service.
func (v *serviceView) settle(c *change, unitKey, relRef string) bool {
	c.ifMod(v.svc.key, v.svc.mod)
	if v.svc.v.Life == pb.Life_LIFE_ALIVE {
		return false
	}
	if w := witness(v.units, unitKey, v.siblings...); w != nil {
		c.ifExists(string(w.Key))
		return false
	}
	if w := witness(v.rels, relRef); w != nil {
		c.ifExists(string(w.Key))
		return false
	}
	assertOnly(c, ServiceUnitsPrefix(v.name), unitKey)
	assertOnly(c, serviceRelationsPrefix(v.name), relRef)
	removeServiceOps(c, v.name)
	removeOwnerOps(c, OwnService, v.name, v.owner, false) // dying: no claim lands
	return true
}

// witness returns a key among kvs other than except, at random so that
// concurrent removals spread their witnesses: one of avoid only when no
// other will do.
func witness(kvs []*mvccpb.KeyValue, except string, avoid ...string) *mvccpb.KeyValue {
	var found, avoided []*mvccpb.KeyValue
	for _, kv := range kvs {
		switch k := string(kv.Key); {
		case k == except:
		case slices.Contains(avoid, k):
			avoided = append(avoided, kv)
		default:
			found = append(found, kv)
		}
	}
	if len(found) == 0 {
		found = avoided
	}
	if len(found) == 0 {
		return nil
	}
	return found[rand.IntN(len(found))]
}

// assertOnly asserts that the prefix holds key alone, or nothing when key is "".
func assertOnly(c *change, prefix, key string) {
	if key == "" {
		c.ifEmpty(prefix)
	} else {
		c.ifOnly(prefix, key)
	}
}

// relationKeyOf names a relation by its endpoints, sorted: "app:db kv:server".
func relationKeyOf(eps []*pb.RelationEndpoint) string {
	sides := make([]string, len(eps))
	for i, ep := range eps {
		sides[i] = ep.Service + ":" + ep.Endpoint.Name
	}
	sort.Strings(sides)
	if len(sides) == 1 {
		return sides[0]
	}
	return fmt.Sprintf("%s %s", sides[0], sides[1])
}
