package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/state"
)

// leaderRandomSteps is how many steps TestLeadershipRandomized takes,
// across its goroutines.
const leaderRandomSteps = 800

// TestLeadershipRandomized elects leaders, vacates leaderships, writes
// leader settings, makes machine agents present and absent, and adds,
// destroys, kills and removes units, from several goroutines at once. A
// monitor checks the invariants at every committed revision. Each
// successful leader-settings write is checked to have come from a unit
// the leadership named at a revision before it. At the end the service is
// destroyed and its leadership records must go with it.
func TestLeadershipRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 4, state.Placement{})
	mon := statetest.Start(t, st)

	toggle := presenceToggle(t, ctx, st)

	var steps atomic.Int64
	counts := make([]map[string]int, 4)
	var wg sync.WaitGroup
	for w := range counts {
		counts[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for steps.Add(1) <= leaderRandomSteps {
				what, err := leaderStep(ctx, st, rng, toggle)
				switch {
				case err == nil:
					counts[w][what]++
				case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrAborted):
					counts[w][what+" refused"]++
				default:
					t.Errorf("%s: %v", what, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mon.Stop(t)
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("seed %d; steps: %v", seed, total)
	for _, want := range []string{"elect", "set", "vacate", "remove"} {
		if total[want] == 0 {
			t.Errorf("steps %v: want some %q that succeeded", total, want)
		}
	}
	if s := st.Stats(); s.MaxOps > state.MaxTxnOps {
		t.Errorf("largest transaction held %d operations, want at most %d", s.MaxOps, state.MaxTxnOps)
	}
	drain(t, ctx, st)
}

// presenceToggle returns a func that makes machine id's agent present
// when it is not, and absent when it is, saying which ("present",
// "absent"); every presence it made ends with the test.
func presenceToggle(t *testing.T, ctx context.Context, st *state.State) func(id string) (string, error) {
	var mu sync.Mutex
	presences := map[string]*state.Presence{}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range presences {
			p.Close()
		}
	})
	return func(id string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if p := presences[id]; p != nil {
			p.Close()
			delete(presences, id)
			return "absent", nil
		}
		p, err := st.Present(ctx, names.MachineTag(id), 10*time.Second)
		if err != nil {
			return "present", err
		}
		presences[id] = p
		return "present", nil
	}
}

// leaderStep takes one random step and says which.
func leaderStep(ctx context.Context, st *state.State, rng *rand.Rand, toggle func(string) (string, error)) (string, error) {
	units, err := st.Units(ctx, "kv")
	if err != nil {
		return "list", err
	}
	unit := fmt.Sprintf("kv/%d", rng.IntN(8))
	if len(units) > 0 && rng.IntN(4) > 0 {
		unit = units[rng.IntN(len(units))].Name
	}
	switch n := rng.IntN(100); {
	case n < 25:
		return "elect", st.ElectLeader(ctx, unit)
	case n < 45:
		before, err := st.Leadership(ctx, "kv")
		if err != nil {
			return "set", err
		}
		if before.Leader != "" && rng.IntN(2) == 0 {
			unit = before.Leader // mostly the leader, which may still hold
		}
		_, err = st.SetLeaderSettings(ctx, unit, map[string]string{"k" + strconv.Itoa(rng.IntN(4)): strconv.Itoa(rng.IntN(3))}, nil)
		if err == nil && before.Leader != unit {
			// Only a leader named before the write can have written: an
			// election in between names a unit that then holds, never
			// this one's write.
			after, aerr := st.Leadership(ctx, "kv")
			if aerr == nil && after.Leader != unit {
				return "set", fmt.Errorf("%s wrote leader settings, leader %q before and %q after", unit, before.Leader, after.Leader)
			}
		}
		return "set", err
	case n < 55:
		_, err := st.VacateLeadership(ctx, "kv")
		return "vacate", err
	case n < 75:
		return toggle(strconv.Itoa(rng.IntN(6)))
	case n < 82:
		if len(units) >= 6 {
			return "add", nil
		}
		_, err := st.AddUnits(ctx, "kv", 1, state.Placement{Machine: strconv.Itoa(rng.IntN(4))})
		return "add", err
	case n < 90:
		return "destroy", st.DestroyUnit(ctx, unit, state.DestroyOptions{})
	default:
		if err := st.EnsureUnitDead(ctx, unit); err != nil {
			return "dead", err
		}
		return "remove", st.RemoveUnit(ctx, unit)
	}
}
