package controller

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// RefreshService makes a new revision of a service whose charm is an
// uploaded one, its configuration carried over (docs/DESIGN.md,
// Revisions and rollouts): options the new charm lacks are dropped,
// those it adds take their defaults, a value still at the old charm's
// default takes the new default, and a value set by an operator that
// the new option's type refuses is refused, naming the option, unless
// the request sets it. The units then move to it as the rollout policy
// allows, running upgrade-charm.
func (s *Server) RefreshService(ctx context.Context, req *pb.RefreshServiceRequest) (*pb.RefreshServiceResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	if !names.ValidService(req.Charm) {
		return nil, invalid("invalid charm name %q", req.Charm)
	}
	if req.Revision < 1 {
		return nil, invalid("charm %s: revision %d: want the revision the upload answered", req.Charm, req.Revision)
	}
	svc, err := s.st.Service(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	if svc.Charm.GetName() != req.Charm && !req.SwitchCharm {
		return nil, status.Errorf(codes.FailedPrecondition,
			"service %s runs charm %s, not %s: switching to another charm needs --switch", req.Service, svc.Charm.GetName(), req.Charm)
	}
	c, err := s.st.Charm(ctx, req.Charm, req.Revision)
	if err != nil {
		return nil, err
	}
	if c.Subordinate != svc.Subordinate {
		return nil, status.Errorf(codes.FailedPrecondition, "charm %s-%d is %s and service %s is %s: a refresh keeps what a service is",
			c.Name, c.Revision, subordinateText(c.Subordinate), req.Service, subordinateText(svc.Subordinate))
	}
	cfg := charm.ConfigFromOptions(c.Options)
	set, err := cfg.ParseValues(req.Config)
	if err != nil {
		return nil, err
	}
	ref := &pb.CharmRef{Name: c.Name, Revision: c.Revision, Sha256: c.Sha256}
	var dropped, defaulted []string
	rev, err := s.st.ChangeSpec(ctx, req.Service, state.SpecChange{By: userName(ctx), Reason: "refresh", History: s.cfg.RevisionHistory,
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			if proto.Equal(head.Spec.GetCharm(), ref) {
				return nil, nil, status.Errorf(codes.FailedPrecondition,
					"service %s is already at charm %s-%d (revision %d): change its configuration with ctl config", req.Service, c.Name, c.Revision, head.Number)
			}
			old, err := s.st.Charm(ctx, head.Spec.GetCharm().GetName(), head.Spec.GetCharm().GetRevision())
			if err != nil {
				return nil, nil, fmt.Errorf("the charm of revision %d: %w", head.Number, err)
			}
			var values map[string]*pb.ConfigValue
			values, dropped, defaulted, err = carryConfig(head, charm.ConfigFromOptions(old.Options), cfg, set, c)
			if err != nil {
				return nil, nil, err
			}
			return &pb.ServiceSpec{Charm: ref, Config: values}, c.Endpoints, nil
		}})
	if err != nil {
		return nil, err
	}
	s.logger.Info("refreshed", "service", req.Service, "charm", c.Name, "charm_revision", c.Revision, "revision", rev.Number)
	return &pb.RefreshServiceResponse{Revision: revisionBrief(rev, nil), Dropped: dropped, Defaulted: defaulted}, nil
}

// carryConfig is the configuration a refresh from head to the charm c
// (its options next, the head's charm's old) gives the service, with set
// set, and the options dropped and defaulted on the way.
func carryConfig(head *pb.Revision, old, next *charm.Config, set map[string]*pb.ConfigValue, c *pb.Charm) (values map[string]*pb.ConfigValue, dropped, defaulted []string, err error) {
	oldDefaults := old.Defaults()
	values = map[string]*pb.ConfigValue{}
	for _, k := range sortedConfigKeys(head.Spec.GetConfig()) {
		v := head.Spec.Config[k]
		if _, ok := next.Options[k]; !ok {
			dropped = append(dropped, k)
			continue
		}
		if _, ok := set[k]; ok {
			continue
		}
		if d, ok := oldDefaults[k]; ok && proto.Equal(d, v) {
			// Never set by an operator: the new charm's default.
			continue
		}
		if err := next.Validate(map[string]*pb.ConfigValue{k: v}); err != nil {
			return nil, nil, nil, status.Errorf(codes.FailedPrecondition,
				"option %q is %s in revision %d, which charm %s-%d refuses (%v): give --config %s=VALUE with the refresh",
				k, charm.FormatValue(v), head.Number, c.Name, c.Revision, err, k)
		}
		values[k] = v
	}
	for k, v := range set {
		values[k] = v
	}
	for _, k := range sortedOptionNames(next) {
		if _, ok := head.Spec.GetConfig()[k]; !ok {
			if _, ok := set[k]; !ok {
				if _, ok := old.Options[k]; !ok {
					defaulted = append(defaulted, k)
				}
			}
		}
	}
	return next.WithDefaults(values), dropped, defaulted, nil
}

func sortedConfigKeys(m map[string]*pb.ConfigValue) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedOptionNames(c *charm.Config) []string {
	keys := make([]string, 0, len(c.Options))
	for k := range c.Options {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func subordinateText(sub bool) string {
	if sub {
		return "a subordinate"
	}
	return "a principal"
}
