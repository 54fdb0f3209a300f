package state

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// What operators read and change of a rollout beside its verbs
// (rollouts.go): the policy changed field by field, and the whole of a
// service's rollout read at one revision for ctl rollout status.

// UpdateRolloutPolicy changes the named service's rollout policy as edit
// decides, from the policy it has (the defaults when none was set), and
// returns the policy stored. The result is validated; the write is
// conditioned on the policy as read, so that two operators' changes of
// different fields both hold.
func (s *State) UpdateRolloutPolicy(ctx context.Context, service string, edit func(p *pb.RolloutPolicy) error) (*pb.RolloutPolicy, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	var out *pb.RolloutPolicy
	err := s.apply(ctx, "set the rollout policy of service "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(ServiceKey(service)), get(RolloutPolicyKey(service)))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		p, err := policyFrom(r.one(1))
		if err != nil {
			return nil, err
		}
		next := protoClone(p)
		if err := edit(next); err != nil {
			return nil, err
		}
		if err := ValidateRolloutPolicy(next); err != nil {
			return nil, err
		}
		c := &change{}
		c.ifSame(svc.key, svc.create)
		c.ifMod(RolloutPolicyKey(service), modOf(r.one(1)))
		c.put(RolloutPolicyKey(service), next)
		out = next
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RolloutView is a service's rollout as ctl rollout status shows it, all
// read at one revision.
type RolloutView struct {
	// Revision is etcd's revision read at.
	Revision int64
	Rollout  *pb.Rollout
	Policy   *pb.RolloutPolicy
	// Units are the service's units, by name as etcd sorts them.
	Units []*pb.Unit
	// UnitRevisions and Permits are by unit name.
	UnitRevisions map[string]*pb.UnitRevision
	Permits       map[string]*pb.Permit
	// Agents and Workloads are the units' agent and workload statuses, by
	// unit name.
	Agents, Workloads map[string]*pb.Status
	// Decisions are the gate's decisions kept (at most MaxGateDecisions),
	// oldest first.
	Decisions []*pb.GateDecision
}

// ReadRolloutView reads the named service's rollout, policy, units, their
// revisions, permits and statuses, and its gate's decisions, at one
// revision: one read of each range, none of a unit alone.
func (s *State) ReadRolloutView(ctx context.Context, service string) (*RolloutView, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(RolloutKey(service)), get(RolloutPolicyKey(service)))
	if err != nil {
		return nil, err
	}
	ro, err := rolloutFrom(r.one(0), service)
	if err != nil {
		return nil, err
	}
	policy, err := policyFrom(r.one(1))
	if err != nil {
		return nil, err
	}
	v := &RolloutView{
		Revision: r.rev, Rollout: ro.v, Policy: policy,
		UnitRevisions: map[string]*pb.UnitRevision{}, Permits: map[string]*pb.Permit{},
		Agents: map[string]*pb.Status{}, Workloads: map[string]*pb.Status{},
	}
	kvs, err := s.listRev(ctx, ServiceUnitsPrefix(service), false, r.rev)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		u, err := decode[pb.Unit](kv)
		if err != nil {
			return nil, err
		}
		v.Units = append(v.Units, u.v)
	}
	if err := decodeInto(ctx, s, UnitRevisionsPrefix(service), r.rev, unitRevisionsPrefix, v.UnitRevisions); err != nil {
		return nil, err
	}
	if err := decodeInto(ctx, s, PermitsPrefix(service), r.rev, PermitsPrefix(service), v.Permits); err != nil {
		return nil, err
	}
	agents := StatusKey(StatusUnitAgent, service+"/")
	if err := decodeInto(ctx, s, agents, r.rev, StatusKey(StatusUnitAgent, ""), v.Agents); err != nil {
		return nil, err
	}
	workloads := StatusKey(StatusUnit, service+"/")
	if err := decodeInto(ctx, s, workloads, r.rev, StatusKey(StatusUnit, ""), v.Workloads); err != nil {
		return nil, err
	}
	kvs, err = s.listRev(ctx, GateDecisionsPrefix(service), false, r.rev)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		d, err := decode[pb.GateDecision](kv)
		if err != nil {
			return nil, err
		}
		v.Decisions = append(v.Decisions, d.v)
	}
	return v, nil
}

// decodeInto decodes every record under prefix, at revision rev, into
// out by its key less trim.
func decodeInto[T any, P interface {
	*T
	proto.Message
}](ctx context.Context, s *State, prefix string, rev int64, trim string, out map[string]P) error {
	kvs, err := s.listRev(ctx, prefix, false, rev)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		rec, err := decode[T, P](kv)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(string(kv.Key), trim)] = rec.v
	}
	return nil
}
