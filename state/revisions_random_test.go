package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// revRandomSteps is how many steps TestRevisionsRandomized takes, across
// its goroutines.
const revRandomSteps = 1200

// TestRevisionsRandomized changes a service's config and policy, grants,
// releases, reports, fails, pauses, resumes, promotes and completes its
// rollouts, records gate decisions and adds and removes units, from
// several goroutines at once. A monitor checks the invariants at every
// committed revision, and a watch checks at every revision that the
// permits out are as many as the rollout counts and within the limit its
// last grant checked, and, at each revision where permits were granted
// under a policy of a fixed number, within that number.
func TestRevisionsRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 6, state.Placement{Unassigned: true})
	mon := statetest.Start(t, st)
	bound := watchPermits(ctx, st)

	var steps atomic.Int64
	counts := make([]map[string]int, 4)
	var wg sync.WaitGroup
	for w := range counts {
		counts[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for steps.Add(1) <= revRandomSteps {
				what, err := revStep(ctx, st, rng)
				switch {
				case err == nil:
					counts[w][what]++
				case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrNoChange),
					errors.Is(err, state.ErrAborted):
					counts[w][what+" refused"]++
				default:
					t.Errorf("%s: %v", what, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	driveToDone(t, ctx, st, "kv")
	mon.Stop(t)
	violations, revisions := bound.stop()
	for i, v := range violations {
		if i == 10 {
			t.Errorf("... and %d more", len(violations)-10)
			break
		}
		t.Error(v)
	}
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("seed %d; steps: %v; permits checked at %d revisions; %+v", seed, total, revisions, st.Stats())
	if total["grant"] == 0 || total["release"] == 0 || total["config"] == 0 {
		t.Errorf("steps %v: want permits granted and released, and rollouts made", total)
	}
	if s := st.Stats(); s.MaxOps > state.MaxTxnOps {
		t.Errorf("largest transaction held %d operations, want at most %d", s.MaxOps, state.MaxTxnOps)
	}
}

// driveToDone takes the service's rollout to done as the leader's worker
// and the agents would: resumed, promoted, every unit granted a permit,
// moved and released.
func driveToDone(t *testing.T, ctx context.Context, st *state.State, service string) {
	t.Helper()
	for range 100 {
		ro, err := st.Rollout(ctx, service)
		must(t, "Rollout", err)
		switch ro.State {
		case pb.RolloutState_ROLLOUT_STATE_DONE:
			return
		case pb.RolloutState_ROLLOUT_STATE_PAUSED, pb.RolloutState_ROLLOUT_STATE_FAILED:
			must(t, "ResumeRollout", st.ResumeRollout(ctx, service))
			continue
		case pb.RolloutState_ROLLOUT_STATE_CANARY:
			if ro.CanaryGranted >= ro.Canary {
				must(t, "PromoteRollout", st.PromoteRollout(ctx, service))
				continue
			}
		}
		urs, err := st.UnitRevisions(ctx, service)
		must(t, "UnitRevisions", err)
		var units []string
		for u := range urs {
			units = append(units, u)
		}
		for i := 0; i < len(units); i += state.MaxGrantUnits {
			batch := units[i:min(i+state.MaxGrantUnits, len(units))]
			granted, err := st.GrantPermits(ctx, service, ro.Target, batch)
			if err != nil && !errors.Is(err, state.ErrRefused) {
				t.Fatalf("GrantPermits: %v", err)
			}
			for _, u := range granted {
				must(t, "SetUnitRevision", st.SetUnitRevision(ctx, u, ro.Target))
			}
			must(t, "ReleasePermits", st.ReleasePermits(ctx, service, batch))
		}
		if err := st.CompleteRollout(ctx, service, ro.Target); err != nil && !errors.Is(err, state.ErrRefused) {
			t.Fatalf("CompleteRollout: %v", err)
		}
	}
	t.Fatalf("the rollout of %s is not done after 100 rounds", service)
}

// revStep takes one random step and says which.
func revStep(ctx context.Context, st *state.State, rng *rand.Rand) (string, error) {
	someUnits := func() []string {
		urs, err := st.UnitRevisions(ctx, "kv")
		if err != nil || len(urs) == 0 || rng.IntN(10) == 0 {
			return []string{fmt.Sprintf("kv/%d", rng.IntN(20))}
		}
		var us []string
		for u := range urs {
			if rng.IntN(2) == 0 && len(us) < state.MaxGrantUnits-1 {
				us = append(us, u)
			}
		}
		if len(us) > 1 && rng.IntN(4) == 0 {
			// A unit named twice, apart: granted or released once.
			us = append(us, us[0])
		}
		return us
	}
	target := func() int64 {
		ro, err := st.Rollout(ctx, "kv")
		if err != nil {
			return 1
		}
		return ro.Target - int64(rng.IntN(5)/4)
	}
	switch n := rng.IntN(100); {
	case n < 10:
		_, err := setConfig(ctx, st, "kv", "port", int64(rng.IntN(4)))
		return "config", err
	case n < 30:
		_, err := st.GrantPermits(ctx, "kv", target(), someUnits())
		return "grant", err
	case n < 50:
		// The agents: each unit holding a permit reports its target.
		urs, err := st.UnitRevisions(ctx, "kv")
		if err != nil {
			return "report", err
		}
		for u, ur := range urs {
			if ur.Current != ur.Target && rng.IntN(2) == 0 {
				if err := st.SetUnitRevision(ctx, u, ur.Target); err != nil && !errors.Is(err, state.ErrNotFound) && !errors.Is(err, state.ErrRefused) {
					return "report", err
				}
			}
		}
		return "report", nil
	case n < 62:
		return "release", st.ReleasePermits(ctx, "kv", someUnits())
	case n < 70:
		return "complete", st.CompleteRollout(ctx, "kv", target())
	case n < 73:
		_, err := st.FailRollout(ctx, "kv", target(), "unhealthy")
		return "fail", err
	case n < 76:
		_, err := st.RevertRollout(ctx, "kv", "alice", "abort")
		return "abort", err
	case n < 79:
		return "pause", st.PauseRollout(ctx, "kv")
	case n < 83:
		return "resume", st.ResumeRollout(ctx, "kv")
	case n < 86:
		return "promote", st.PromoteRollout(ctx, "kv")
	case n < 89:
		mp := []string{"1", "2", "3", "50%", "100%"}[rng.IntN(5)]
		return "policy", st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: mp, Canary: int64(rng.IntN(3)), DeadlineMs: 1000, AutoRevert: rng.IntN(2) == 0})
	case n < 92:
		us := someUnits()
		if len(us) == 0 {
			return "gate", nil
		}
		verdict := pb.GateVerdict(1 + rng.IntN(3))
		return "gate", st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: us[0], Gate: "orly", Decision: verdict, Reason: "because"})
	case n < 96:
		_, err := st.AddUnits(ctx, "kv", 1+rng.IntN(2), state.Placement{Unassigned: true})
		return "add units", err
	default:
		us := someUnits()
		if len(us) == 0 {
			return "remove unit", nil
		}
		return "remove unit", st.DestroyUnit(ctx, us[0], state.DestroyOptions{})
	}
}

// permitWatch checks the permits at every revision.
type permitWatch struct {
	cancel     context.CancelFunc
	done       chan struct{}
	violations []string
	revisions  int
}

func watchPermits(ctx context.Context, st *state.State) *permitWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &permitWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		values := map[string][]byte{}
		last := 0
		for b := range st.Watch(ctx, "", 0) {
			if b.Reset {
				clear(values)
			}
			// A batch may hold several revisions: each is checked.
			var cur int64
			for _, e := range b.Events {
				if !b.Reset && cur != 0 && e.ModRevision != cur {
					w.revisions++
					last = w.check(cur, values, last)
				}
				cur = e.ModRevision
				if e.Type == state.EventDelete {
					delete(values, e.Key)
				} else {
					values[e.Key] = e.Value
				}
			}
			if len(b.Events) > 0 {
				w.revisions++
				last = w.check(b.Revision, values, last)
			}
		}
	}()
	return w
}

func (w *permitWatch) check(rev int64, values map[string][]byte, last int) int {
	permits, units := 0, 0
	for k := range values {
		switch {
		case strings.HasPrefix(k, state.PermitsPrefix("kv")):
			permits++
		case strings.HasPrefix(k, state.ServiceUnitsPrefix("kv")):
			units++
		}
	}
	ro := &pb.Rollout{}
	if proto.Unmarshal(values[state.RolloutKey("kv")], ro) != nil {
		return permits
	}
	if int64(permits) != ro.Permits || (permits > 0 && ro.Permits > ro.PermitLimit) {
		w.violations = append(w.violations, fmt.Sprintf("revision %d: %d permits out, the rollout counts %d of at most %d", rev, permits, ro.Permits, ro.PermitLimit))
	}
	policy := state.DefaultRolloutPolicy()
	if v, ok := values[state.RolloutPolicyKey("kv")]; ok {
		_ = proto.Unmarshal(v, policy)
	}
	if permits > last && !strings.HasSuffix(policy.MaxParallel, "%") && permits > state.MaxParallelUnits(policy, units) {
		w.violations = append(w.violations, fmt.Sprintf("revision %d: %d permits out, over max-parallel %s", rev, permits, policy.MaxParallel))
	}
	return permits
}

func (w *permitWatch) stop() ([]string, int) {
	w.cancel()
	<-w.done
	return w.violations, w.revisions
}
