package unitagent

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/hooks"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The leadership tools (is-leader, leader-get, leader-set) of hooks and
// actions ask the controller each time: leadership is the controller's
// to say, and a leader that lost it since the hook started must not
// write.

func (a *Agent) isLeader(ctx context.Context) (bool, error) {
	resp, err := a.cfg.API.GetLeadership(ctx, &pb.GetLeadershipRequest{Unit: a.cfg.Unit})
	if err != nil {
		return false, err
	}
	return resp.IsLeader, nil
}

func (a *Agent) leaderSettings(ctx context.Context) (map[string]string, error) {
	resp, err := a.cfg.API.GetLeadership(ctx, &pb.GetLeadershipRequest{Unit: a.cfg.Unit})
	if err != nil {
		return nil, err
	}
	return resp.Settings, nil
}

func (a *Agent) setLeaderSettings(ctx context.Context, set map[string]string) error {
	_, err := a.cfg.API.SetLeaderSettings(ctx, &pb.SetLeaderSettingsRequest{Unit: a.cfg.Unit, Set: set})
	if status.Code(err) == codes.FailedPrecondition {
		return hooks.ErrNotLeader
	}
	return err
}

func (hc *hookContext) IsLeader(ctx context.Context) (bool, error) { return hc.a.isLeader(ctx) }

func (hc *hookContext) LeaderSettings(ctx context.Context) (map[string]string, error) {
	return hc.a.leaderSettings(ctx)
}

func (hc *hookContext) SetLeaderSettings(ctx context.Context, set map[string]string) error {
	return hc.a.setLeaderSettings(ctx, set)
}

func (ac *actionContext) IsLeader(ctx context.Context) (bool, error) { return ac.a.isLeader(ctx) }

func (ac *actionContext) LeaderSettings(ctx context.Context) (map[string]string, error) {
	return ac.a.leaderSettings(ctx)
}

func (ac *actionContext) SetLeaderSettings(ctx context.Context, set map[string]string) error {
	return ac.a.setLeaderSettings(ctx, set)
}

var (
	_ hooks.LeadershipContext = (*hookContext)(nil)
	_ hooks.LeadershipContext = (*actionContext)(nil)
)
