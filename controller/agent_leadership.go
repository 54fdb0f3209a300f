package controller

import (
	"context"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxLeaderSettingsKeys bounds the keys one SetLeaderSettings names, set
// and unset together; what they make is bounded by
// state.MaxLeaderSettingsBytes.
const maxLeaderSettingsKeys = 1000

// GetLeadership tells a unit's agent who leads its service, whether the
// unit does (and holds it: alive, its machine's agent present), and the
// leader settings with their version. Only the unit's own agent may ask.
func (a *agentServer) GetLeadership(ctx context.Context, req *pb.GetLeadershipRequest) (*pb.GetLeadershipResponse, error) {
	unit := req.GetUnit()
	if err := ownUnit(callerFrom(ctx), unit, "read the leadership of"); err != nil {
		return nil, err
	}
	v, err := a.s.st.Leadership(ctx, names.UnitService(unit))
	if err != nil {
		return nil, err
	}
	return &pb.GetLeadershipResponse{
		Leader:          v.Leader,
		IsLeader:        v.Leader == unit && v.Holds,
		Settings:        v.Settings,
		SettingsVersion: v.Version,
	}, nil
}

// SetLeaderSettings changes the leader settings of a unit's service for
// its own agent, when the unit is the leader and holds it
// (state.SetLeaderSettings checks it in the transaction that writes):
// FailedPrecondition otherwise, and nothing changes.
func (a *agentServer) SetLeaderSettings(ctx context.Context, req *pb.SetLeaderSettingsRequest) (*pb.SetLeaderSettingsResponse, error) {
	unit := req.GetUnit()
	if err := ownUnit(callerFrom(ctx), unit, "set the leader settings of"); err != nil {
		return nil, err
	}
	if n := len(req.GetSet()) + len(req.GetUnset()); n > maxLeaderSettingsKeys {
		return nil, invalid("leader settings of unit %s: %d keys in one change, at most %d", unit, n, maxLeaderSettingsKeys)
	}
	v, err := a.s.st.SetLeaderSettings(ctx, unit, req.GetSet(), req.GetUnset())
	if err != nil {
		return nil, err
	}
	return &pb.SetLeaderSettingsResponse{SettingsVersion: v}, nil
}

// ownService checks that the caller is the agent of a unit of the named
// service.
func ownService(c caller, service, verb string) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	if c.kind != names.KindUnit || names.UnitService(c.id) != service {
		return denied("%s may not %s service %s", c, verb, service)
	}
	return nil
}
