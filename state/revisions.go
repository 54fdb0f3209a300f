package state

import (
	"context"
	"fmt"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// A service's spec (its charm and its complete configuration) changes
// only by a new revision (ChangeSpec): revision n+1, written with the
// rollout that moves the units to it and with the mirrors today's readers
// read, services/<svc>.charm and config/<svc>, which always hold the
// head's spec. Every write of a unit's target or current revision is
// conditioned on the rollout or on the revision existing, and a rollout's
// previous moves only when the rollout is done, when every unit runs its
// target: so every unit's revisions are at or after the rollout's
// previous (checkRevisions), and pruning the revisions before it and
// before the newest History needs no read of the units.

// SpecChange is a change of a service's spec.
type SpecChange struct {
	// By is the user who asks; "" for the controller itself.
	By string
	// Reason is the revision's: "config", "refresh", "rollback to 3".
	Reason string
	// Next returns the spec to make, from the head revision, and the
	// endpoints of its charm when they change (a refresh); nil keeps the
	// service's. It may be called more than once, and must not change
	// head.
	Next func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error)
	// History is how many revisions to keep, at least; 0 for
	// DefaultRevisionHistory.
	History int
	// SkipCanary rolls the revision out without the policy's canary.
	SkipCanary bool
	// Reverting is the failed revision this one returns from, for an
	// abort or an auto-revert; 0 otherwise.
	Reverting int64
}

// ChangeSpec makes the next revision of the named service's spec, and
// the rollout to it, in one transaction. A spec the same as the head's is
// refused (ErrNoChange). A change of endpoints is refused while a
// relation of the service uses an endpoint (name, interface and role)
// the new ones lack.
func (s *State) ChangeSpec(ctx context.Context, service string, sc SpecChange) (*pb.Revision, error) {
	return s.changeSpec(ctx, service, sc, nil)
}

// changeSpec is ChangeSpec, refused with check's error when check, not
// nil, refuses the rollout as read.
func (s *State) changeSpec(ctx context.Context, service string, sc SpecChange, check func(*pb.Rollout) error) (*pb.Revision, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	if sc.Next == nil {
		return nil, invalidf("change of service %s: no spec given", service)
	}
	if sc.History == 0 {
		sc.History = s.cfg.RevisionHistory
	}
	if sc.History == 0 {
		sc.History = DefaultRevisionHistory
	}
	if sc.History < 1 || sc.History > MaxRevisionHistory {
		return nil, invalidf("revision history %d: want 1 to %d", sc.History, MaxRevisionHistory)
	}
	var out *pb.Revision
	err := s.apply(ctx, "change the spec of service "+service, func(ctx context.Context) (*change, error) {
		newest := getPrefix(RevisionsPrefix(service), 1)
		newest.NewestFirst = true
		r, err := s.read(ctx, get(ServiceKey(service)), get(RolloutKey(service)), get(RolloutPolicyKey(service)),
			newest, getKeys(RevisionsPrefix(service), 1), getPrefix(serviceRelationsPrefix(service), 0))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(1), service)
		if err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(ro.v); err != nil {
				return nil, err
			}
		}
		policy, err := policyFrom(r.one(2))
		if err != nil {
			return nil, err
		}
		head, err := decode[pb.Revision](r.one(3))
		if err != nil {
			return nil, err
		}
		if head == nil || head.v.Number != ro.v.Head {
			return nil, fmt.Errorf("service %s: its rollout's head %d is not its newest revision", service, ro.v.Head)
		}
		spec, eps, err := sc.Next(protoClone(head.v))
		if err != nil {
			return nil, err
		}
		if spec.GetCharm().GetName() == "" {
			return nil, invalidf("change of service %s: the spec has no charm", service)
		}
		endpoints := svc.v.Endpoints
		if eps != nil {
			eps = keepInfoName(svc.v.Endpoints, eps)
			endpoints = eps
		}
		if err := (AddServiceArgs{Name: service, Charm: spec.Charm, Subordinate: svc.v.Subordinate, Endpoints: endpoints, Config: spec.Config}).validate(); err != nil {
			return nil, err
		}
		id := SpecID(spec)
		if id == head.v.Id {
			return nil, noChangef("service %s is already at that spec (revision %d)", service, head.v.Number)
		}
		n := ro.v.Head + 1
		next := protoClone(ro.v)
		next.Head, next.Target = n, n
		if ro.v.State == pb.RolloutState_ROLLOUT_STATE_DONE {
			next.Previous = ro.v.Target
		}
		// Otherwise the change comes during a rollout, its units spread
		// between previous and the old target: previous stays the last
		// spec every unit ran, the one an abort or a failure returns to.
		now := s.now()
		startRollout(next, policy, sc.SkipCanary, now.UnixNano())
		next.Reverting = sc.Reverting
		rev := &pb.Revision{
			Service: service, Number: n, Id: id, Spec: spec, By: sc.By, CreatedUnixNano: now.UnixNano(),
			Reason: sc.Reason, Changes: specChanges(head.v.Spec, spec), Endpoints: endpoints,
		}
		if size := proto.Size(rev); size > MaxRevisionBytes {
			return nil, tooLarge(fmt.Sprintf("revision %d of service %s", n, service), size, MaxRevisionBytes)
		}
		c := &change{}
		c.ifMod(svc.key, svc.mod)
		c.ifMod(ro.key, ro.mod)
		c.ifAbsent(RevisionKey(service, n))
		c.put(RevisionKey(service, n), rev)
		c.put(ro.key, next)
		c.put(ServiceConfigKey(service), &pb.ServiceConfig{Values: spec.Config})
		if eps != nil {
			if err := endpointsKept(service, svc.v.Endpoints, eps, r.all(5)); err != nil {
				return nil, err
			}
			c.ifNoNewer(serviceRelationsPrefix(service), r.rev)
		}
		if eps != nil || !proto.Equal(svc.v.Charm, spec.Charm) {
			nsvc := protoClone(svc.v)
			nsvc.Charm, nsvc.Endpoints = spec.Charm, endpoints
			c.put(svc.key, nsvc)
		}
		if err := s.pruneOps(ctx, c, service, n, next.Previous, sc.History, r); err != nil {
			return nil, err
		}
		out = rev
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pruneOps adds to the change that makes revision n of service the
// deletion of the revisions it need not keep: those before the newest
// history, but the rollout's previous and any a unit runs or targets. The
// units' revisions are at or after previous (checkRevisions), so those
// before it go in one deletion of a range without a read of the units;
// those after it are read for only when more than history of them are
// kept, and go at most maxPrunes a change. No write can take a unit to a
// revision deleted here: a unit's target is only ever set to its rollout's
// target, by a grant conditioned on the rollout, or by a new unit's
// addition conditioned on the revision existing.
func (s *State) pruneOps(ctx context.Context, c *change, service string, n, previous int64, history int, r *reads) error {
	keep := n - int64(history) + 1
	below := keep
	if previous > 0 {
		below = min(keep, previous)
	}
	if oldest := r.one(4); oldest != nil && below > 1 {
		if num, err := parseNum(lastSegment(string(oldest.Key))); err == nil && num < below {
			c.delRange(RevisionsPrefix(service), RevisionKey(service, below))
		}
	}
	if below >= keep-1 {
		return nil
	}
	kvs, err := s.listRev(ctx, RevisionsPrefix(service), true, r.rev)
	if err != nil {
		return err
	}
	used := map[int64]bool{previous: true}
	units, err := s.listRev(ctx, UnitRevisionsPrefix(service), false, r.rev)
	if err != nil {
		return err
	}
	for _, kv := range units {
		ur, err := decode[pb.UnitRevision](kv)
		if err != nil {
			return err
		}
		used[ur.v.Current], used[ur.v.Target] = true, true
	}
	pruned := 0
	for _, kv := range kvs {
		num, err := parseNum(lastSegment(string(kv.Key)))
		if err != nil || num <= below || num >= keep || used[num] {
			continue
		}
		if pruned == maxPrunes {
			break
		}
		c.del(string(kv.Key))
		pruned++
	}
	return nil
}

// maxPrunes bounds the revisions one change deletes one by one.
const maxPrunes = 16

// startRollout makes ro a rollout, begun at now, to its target: with the
// policy's canary unless skipCanary, its permits out kept (a unit holding
// one for the old target is retargeted by GrantPermits or releases it).
func startRollout(ro *pb.Rollout, policy *pb.RolloutPolicy, skipCanary bool, now int64) {
	ro.State = pb.RolloutState_ROLLOUT_STATE_ROLLING
	ro.Canary, ro.CanaryGranted = 0, 0
	if !skipCanary && policy.Canary > 0 {
		ro.State, ro.Canary = pb.RolloutState_ROLLOUT_STATE_CANARY, policy.Canary
	}
	ro.Reason = ""
	ro.StartedUnixNano = now
	ro.DeadlineUnixNano = now + policy.DeadlineMs*1e6
}

// endpointsKept refuses new endpoints of service that lack one a relation
// of the service uses: rels are its relation references, each naming
// the endpoint in its value, old the endpoints it has now.
func endpointsKept(service string, old, eps []*pb.Endpoint, rels []*mvccpb.KeyValue) error {
	byName := map[string]*pb.Endpoint{}
	for _, ep := range old {
		byName[ep.Name] = ep
	}
	for _, kv := range rels {
		name := string(kv.Value)
		was := byName[name]
		found := false
		for _, ep := range eps {
			if ep.Name == name && ep.Interface == was.GetInterface() && ep.Role == was.GetRole() {
				found = true
				break
			}
		}
		if !found {
			return refused("V1", "relation %s of service %s uses endpoint %s (%s, %s), which the new charm lacks",
				lastSegment(string(kv.Key)), service, name, was.GetInterface(), strings.ToLower(strings.TrimPrefix(was.GetRole().String(), "ROLE_")))
		}
	}
	return nil
}

// firstRevisionOps writes a new service's revision 1 and its rollout, done.
func (s *State) firstRevisionOps(c *change, args AddServiceArgs) {
	spec := &pb.ServiceSpec{Charm: args.Charm, Config: args.Config}
	now := s.now().UnixNano()
	c.put(RevisionKey(args.Name, 1), &pb.Revision{
		Service: args.Name, Number: 1, Id: SpecID(spec), Spec: spec, By: args.By, CreatedUnixNano: now,
		Reason: "deploy", Endpoints: args.Endpoints,
	})
	c.put(RolloutKey(args.Name), &pb.Rollout{
		Service: args.Name, Head: 1, Target: 1, State: pb.RolloutState_ROLLOUT_STATE_DONE,
		StartedUnixNano: now, DeadlineUnixNano: now,
	})
}

func rolloutFrom(kv *mvccpb.KeyValue, service string) (*record[*pb.Rollout], error) {
	ro, err := decode[pb.Rollout](kv)
	if err != nil {
		return nil, err
	}
	if ro == nil {
		return nil, notFoundf("service %s not found", service)
	}
	return ro, nil
}

// policyFrom decodes a policy record; absent is the defaults.
func policyFrom(kv *mvccpb.KeyValue) (*pb.RolloutPolicy, error) {
	p, err := decode[pb.RolloutPolicy](kv)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return DefaultRolloutPolicy(), nil
	}
	return p.v, nil
}

// UpdateServiceConfig sets and unsets the named service's configuration
// values, as a new revision by the controller (ChangeSpec): an unset key
// is absent from the spec. The caller has checked the values against the
// charm. The controller's SetConfig, which knows the charm's defaults,
// makes its own revisions.
func (s *State) UpdateServiceConfig(ctx context.Context, name string, set map[string]*pb.ConfigValue, unset []string) error {
	_, err := s.ChangeSpec(ctx, name, SpecChange{Reason: "config", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		next := protoClone(head.Spec)
		if next.Config == nil {
			next.Config = map[string]*pb.ConfigValue{}
		}
		for k, v := range set {
			next.Config[k] = v
		}
		for _, k := range unset {
			delete(next.Config, k)
		}
		return next, nil, nil
	}})
	return err
}

// Revisions returns the named service's revisions kept, oldest first.
func (s *State) Revisions(ctx context.Context, service string) ([]*pb.Revision, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	return listDecoded[pb.Revision](ctx, s, RevisionsPrefix(service))
}

// RevisionNumbers returns the numbers of the named service's revisions
// kept, oldest first, read without the revisions themselves.
func (s *State) RevisionNumbers(ctx context.Context, service string) ([]int64, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, RevisionsPrefix(service), true)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(kvs))
	for _, kv := range kvs {
		n, err := parseNum(lastSegment(string(kv.Key)))
		if err != nil {
			return nil, fmt.Errorf("revision key %s: %w", kv.Key, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// ServiceRevision returns the named service's revision n. (Revision is
// etcd's.)
func (s *State) ServiceRevision(ctx context.Context, service string, n int64) (*pb.Revision, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(RevisionKey(service, n)))
	if err != nil {
		return nil, err
	}
	rev, err := decode[pb.Revision](r.one(0))
	if err != nil {
		return nil, err
	}
	if rev == nil {
		return nil, notFoundf("service %s has no revision %d", service, n)
	}
	return rev.v, nil
}

// Rollout returns the named service's rollout.
func (s *State) Rollout(ctx context.Context, service string) (*pb.Rollout, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(RolloutKey(service)))
	if err != nil {
		return nil, err
	}
	ro, err := rolloutFrom(r.one(0), service)
	if err != nil {
		return nil, err
	}
	return ro.v, nil
}

// RolloutPolicy returns the named service's rollout policy: the defaults
// when none was set.
func (s *State) RolloutPolicy(ctx context.Context, service string) (*pb.RolloutPolicy, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(ServiceKey(service)), get(RolloutPolicyKey(service)))
	if err != nil {
		return nil, err
	}
	if _, err := serviceFrom(r.one(0), service); err != nil {
		return nil, err
	}
	return policyFrom(r.one(1))
}

// UnitRevisions returns the revisions of the named service's units, by
// unit.
func (s *State) UnitRevisions(ctx context.Context, service string) (map[string]*pb.UnitRevision, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, UnitRevisionsPrefix(service), false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*pb.UnitRevision, len(kvs))
	for _, kv := range kvs {
		ur, err := decode[pb.UnitRevision](kv)
		if err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(string(kv.Key), unitRevisionsPrefix)] = ur.v
	}
	return out, nil
}

// UnitRevision returns the named unit's revisions.
func (s *State) UnitRevision(ctx context.Context, unit string) (*pb.UnitRevision, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(UnitRevisionKey(unit)))
	if err != nil {
		return nil, err
	}
	ur, err := unitRevisionFrom(r.one(0), unit)
	if err != nil {
		return nil, err
	}
	return ur.v, nil
}

func unitRevisionFrom(kv *mvccpb.KeyValue, unit string) (*record[*pb.UnitRevision], error) {
	ur, err := decode[pb.UnitRevision](kv)
	if err != nil {
		return nil, err
	}
	if ur == nil {
		return nil, notFoundf("unit %s not found", unit)
	}
	return ur, nil
}

// Permits returns the named service's permits out, by unit.
func (s *State) Permits(ctx context.Context, service string) (map[string]*pb.Permit, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, PermitsPrefix(service), false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*pb.Permit, len(kvs))
	for _, kv := range kvs {
		p, err := decode[pb.Permit](kv)
		if err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(string(kv.Key), PermitsPrefix(service))] = p.v
	}
	return out, nil
}

// GateDecisions returns the named service's gate decisions kept, oldest
// first.
func (s *State) GateDecisions(ctx context.Context, service string) ([]*pb.GateDecision, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	return listDecoded[pb.GateDecision](ctx, s, GateDecisionsPrefix(service))
}
