package statetest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Roll moves the units of every service to its rollout's target until
// the test ends, standing in for the leader's rollout worker in tests
// that change a spec and want its units to follow: it grants the units'
// permits as the policy allows, releases those of units that run the
// target, and completes the rollout once every unit does. It asks no
// gate and waits for no health; a refusal (the rollout moved meanwhile)
// is looked at again at the next pass, every 20 ms.
func Roll(t testing.TB, st *state.State) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if svcs, err := st.Services(ctx); err == nil {
				for _, svc := range svcs {
					RollOnce(ctx, st, svc.Name)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// RollOnce takes one step of the named service's rollout: grants, then
// releases, then completion, each as far as the model allows now. It
// returns whether the rollout is done.
func RollOnce(ctx context.Context, st *state.State, service string) bool {
	ro, err := st.Rollout(ctx, service)
	if err != nil {
		return false
	}
	if ro.State == pb.RolloutState_ROLLOUT_STATE_DONE {
		return true
	}
	urs, err := st.UnitRevisions(ctx, service)
	if err != nil {
		return false
	}
	var behind, arrived []string
	for _, u := range slices.Sorted(maps.Keys(urs)) {
		ur := urs[u]
		switch {
		case ur.Current != ro.Target && ur.Target != ro.Target:
			behind = append(behind, u)
		case ur.Current == ro.Target && ur.Target == ro.Target:
			arrived = append(arrived, u)
		}
	}
	if ro.State == pb.RolloutState_ROLLOUT_STATE_ROLLING || ro.State == pb.RolloutState_ROLLOUT_STATE_CANARY {
		for len(behind) > 0 {
			n := min(len(behind), state.MaxGrantUnits)
			if _, err := st.GrantPermits(ctx, service, ro.Target, behind[:n]); err != nil {
				break
			}
			behind = behind[n:]
		}
	}
	for len(arrived) > 0 {
		n := min(len(arrived), state.MaxReleaseUnits)
		if err := st.ReleasePermits(ctx, service, arrived[:n]); err != nil {
			break
		}
		arrived = arrived[n:]
	}
	return st.CompleteRollout(ctx, service, ro.Target) == nil
}
