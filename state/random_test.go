package state_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

var (
	seedFlag = flag.Uint64("seed", 0, "seed for the randomized tests (0: from the clock)")
	opsFlag  = flag.Int("random-ops", 6000, "operations in TestRandomized, across all its goroutines")
)

const randomWorkers = 8

// randomSeed is the seed of a randomized test: -seed, or one from the
// clock; the test names it when it fails, to be run again with it.
func randomSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s failed with -seed=%d", t.Name(), seed)
		}
	})
	return seed
}

// TestRandomized runs random operators' and agents' operations from eight
// goroutines, with a monitor checking the invariants at every committed
// revision; then the goroutines play the agents and drive everything to
// removal, and the keyspace must hold no entity keys.
func TestRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	// The deadline only ends a hang: with the race detector on a loaded
	// 2-core machine the operations and the drain take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mon := statetest.Start(t, st)
	charms := claimingCharms(t, ctx, st)

	var opCount, failures atomic.Int64
	counts := make([]map[string]int, randomWorkers)
	var wg sync.WaitGroup
	for w := 0; w < randomWorkers; w++ {
		wg.Add(1)
		counts[w] = map[string]int{}
		go func() {
			defer wg.Done()
			r := &randomWorker{st: st, rng: rand.New(rand.NewPCG(seed, uint64(w))), id: w, counts: counts[w], charms: charms}
			for opCount.Load() < int64(*opsFlag) {
				if err := r.step(ctx, &opCount); err != nil {
					failures.Add(1)
					t.Errorf("worker %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("seed %d; operations: %v; %+v", seed, total, st.Stats())
	if n := total["ok"] + total["refused"] + total["aborted"]; n < *opsFlag {
		t.Errorf("ran %d operations, want %d", n, *opsFlag)
	}
	if t.Failed() {
		mon.Stop(t)
		return
	}
	checkInvariants(t, st)
	checkPlacedClaims(t, ctx, st)
	drain(t, ctx, st)
	mon.Stop(t)
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if keys := snap.EntityKeys(); len(keys) != 0 {
		t.Errorf("after draining, entity keys are left: %v", keys)
	}
}

// randomWorker issues random operations against the model it last saw.
type randomWorker struct {
	st     *state.State
	rng    *rand.Rand
	id     int
	counts map[string]int
	view   *view
	steps  int
	// charms are those the services are deployed from, some with static
	// host claims that conflict (claimingCharms).
	charms []*pb.CharmRef
}

// view is a worker's recent, possibly stale, picture of the model.
type view struct {
	machines  []string
	services  []*pb.Service
	units     []*pb.Unit
	relations []*pb.Relation
}

func (r *randomWorker) refresh(ctx context.Context) error {
	v := &view{}
	ms, err := r.st.Machines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		v.machines = append(v.machines, m.Id)
	}
	if v.services, err = r.st.Services(ctx); err != nil {
		return err
	}
	if v.units, err = r.st.AllUnits(ctx); err != nil {
		return err
	}
	if v.relations, err = r.st.Relations(ctx); err != nil {
		return err
	}
	r.view = v
	return nil
}

func pick[T any](rng *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[rng.IntN(len(xs))], true
}

// The charms the random services are made of.
var randomCharms = [][]*pb.Endpoint{appEndpoints, kvEndpoints, plainEndpoints, loggerEndpoints}

// step runs one random operation, counting it in ops when it ran.
func (r *randomWorker) step(ctx context.Context, ops *atomic.Int64) error {
	if r.view == nil || r.steps%10 == 0 {
		if err := r.refresh(ctx); err != nil {
			return err
		}
	}
	r.steps++
	v, rng, st := r.view, r.rng, r.st
	op, err := "", error(nil)
	switch n := rng.IntN(100); {
	case n < 3:
		op = "add-machines"
		// A third manual: destroyed before a unit is placed there, it
		// goes at once (its agent never joined).
		_, err = st.AddMachinesWith(ctx, 1+rng.IntN(2), state.MachineOptions{Manual: rng.IntN(3) == 0})
	case n < 7:
		op = "add-service"
		eps := randomCharms[rng.IntN(len(randomCharms))]
		_, err = st.AddService(ctx, state.AddServiceArgs{
			Name: fmt.Sprintf("s%d-%c", rng.IntN(12), 'a'+rune(rng.IntN(2))), Charm: r.charms[rng.IntN(len(r.charms))],
			Endpoints: eps, Subordinate: eps[0].Scope == pb.Scope_SCOPE_CONTAINER,
		})
	case n < 17:
		op = "add-units"
		svc, ok := pick(rng, v.services)
		if !ok {
			return nil
		}
		p := state.Placement{}
		switch rng.IntN(3) {
		case 0:
			p.Unassigned = true
		case 1:
			if m, ok := pick(rng, v.machines); ok {
				p.Machine = m
			}
		}
		_, err = st.AddUnits(ctx, svc.Name, 1+rng.IntN(3), p)
	case n < 21:
		op = "assign"
		u, ok1 := pick(rng, v.units)
		m, ok2 := pick(rng, v.machines)
		if !ok1 || !ok2 {
			return nil
		}
		err = st.AssignUnit(ctx, u.Name, m)
	case n < 27:
		op = "add-relation"
		a, ok1 := pick(rng, v.services)
		b, ok2 := pick(rng, v.services)
		if !ok1 || !ok2 {
			return nil
		}
		_, err = st.AddRelation(ctx, state.EndpointSpec{Service: a.Name}, state.EndpointSpec{Service: b.Name})
	case n < 31:
		op = "add-subordinate"
		u, ok1 := pick(rng, v.units)
		svc, ok2 := pick(rng, v.services)
		if !ok1 || !ok2 {
			return nil
		}
		_, err = st.AddSubordinate(ctx, u.Name, svc.Name)
	case n < 45:
		op = "enter-scope"
		rel, ok1 := pick(rng, v.relations)
		u, ok2 := pick(rng, v.units)
		if !ok1 || !ok2 {
			return nil
		}
		err = st.EnterScope(ctx, rel.Id, u.Name, map[string]string{"by": u.Name})
	case n < 53:
		op = "leave-scope"
		rel, ok1 := pick(rng, v.relations)
		u, ok2 := pick(rng, v.units)
		if !ok1 || !ok2 {
			return nil
		}
		err = st.LeaveScope(ctx, rel.Id, u.Name)
	case n < 56:
		op = "update-settings"
		rel, ok1 := pick(rng, v.relations)
		u, ok2 := pick(rng, v.units)
		if !ok1 || !ok2 {
			return nil
		}
		err = st.UpdateSettings(ctx, u.Name, []state.SettingsChange{{Relation: rel.Id, Set: map[string]string{"n": strconv.Itoa(rng.IntN(9))}}})
	case n < 60:
		op = "destroy-machine"
		m, ok := pick(rng, v.machines)
		if !ok {
			return nil
		}
		err = st.DestroyMachine(ctx, m, r.destroyOptions())
	case n < 68:
		op = "destroy-unit"
		u, ok := pick(rng, v.units)
		if !ok {
			return nil
		}
		err = st.DestroyUnit(ctx, u.Name, r.destroyOptions())
	case n < 71:
		op = "destroy-service"
		svc, ok := pick(rng, v.services)
		if !ok {
			return nil
		}
		err = st.DestroyService(ctx, svc.Name)
	case n < 75:
		op = "destroy-relation"
		rel, ok := pick(rng, v.relations)
		if !ok {
			return nil
		}
		err = st.DestroyRelation(ctx, rel.Id)
	case n < 83:
		op = "ensure-dead"
		if rng.IntN(4) == 0 {
			m, ok := pick(rng, v.machines)
			if !ok {
				return nil
			}
			err = st.EnsureMachineDead(ctx, m)
		} else {
			u, ok := pick(rng, v.units)
			if !ok {
				return nil
			}
			err = st.EnsureUnitDead(ctx, u.Name)
		}
	case n < 91:
		op = "remove"
		if rng.IntN(4) == 0 {
			m, ok := pick(rng, v.machines)
			if !ok {
				return nil
			}
			err = st.RemoveMachine(ctx, m)
		} else {
			u, ok := pick(rng, v.units)
			if !ok {
				return nil
			}
			err = st.RemoveUnit(ctx, u.Name)
		}
	case n < 92:
		// Join tokens for random machines (refused for those not
		// manual), some expired; joins with them, some with the wrong
		// secret, racing the machines' destruction and removal.
		m, ok := pick(rng, v.machines)
		if !ok {
			return nil
		}
		hash := fmt.Sprintf("t%d", rng.IntN(3))
		if rng.IntN(2) == 0 {
			op = "join-token"
			expires := time.Now().Add(time.Duration(rng.IntN(3)-1) * time.Hour)
			err = st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{m: {Hash: hash, ExpiresUnixNano: expires.UnixNano()}})
		} else {
			op = "join"
			err = st.JoinMachine(ctx, m, func(h string) bool { return h == hash }, time.Now(), "c-"+hash)
		}
	case n < 94:
		u, ok := pick(rng, v.units)
		if !ok {
			return nil
		}
		if rng.IntN(2) == 0 {
			op = "set-status"
			// The unit's workload status, or its service's status or
			// version (status-set --application, application-version-set),
			// racing the service's removal.
			service, _, _ := strings.Cut(u.Name, "/")
			switch rng.IntN(3) {
			case 0:
				err = st.SetStatus(ctx, state.StatusUnit, u.Name, &pb.Status{Status: "active"})
			case 1:
				err = st.SetStatus(ctx, state.StatusService, service, &pb.Status{Status: "active"})
			default:
				err = st.SetStatus(ctx, state.StatusServiceVersion, service, &pb.Status{Status: "1.2.3"})
			}
		} else {
			// Its agent's host report, racing the unit's removal, its
			// ports changing or not.
			op = "host-report"
			ports := [][]string{nil, {"80/tcp"}, {"80/tcp", "53/udp"}}[rng.IntN(3)]
			err = st.SetHostReport(ctx, u.Name, &pb.HostReport{AppliedRevision: int64(1 + rng.IntN(3)),
				Claims:  &pb.HostClaimsReport{OpenedPorts: ports},
				Daemons: []*pb.DaemonReport{{Name: "d", State: "running", Pid: int64(rng.IntN(1000))}}})
		}
	case n < 95:
		op = "barrier"
		var rev int64
		if rev, err = st.Barrier(ctx, 0); err == nil {
			if u, ok := pick(rng, v.units); ok {
				err = st.SetStatus(ctx, state.StatusUnitAgent, u.Name, &pb.Status{Status: "idle", SyncedRevision: rev})
			}
		}
	case n < 99:
		op = "cleaner-pass"
		_, err = state.NewCleaner(st, 0).Pass(ctx)
	default:
		// The controllers' join tokens, among a few ids: issued, used
		// once, refused.
		id := fmt.Sprintf("%016x", rng.IntN(8))
		if rng.IntN(2) == 0 {
			op = "add-controller-join"
			err = st.AddControllerJoin(ctx, id, &pb.ControllerJoin{SecretHash: "sha256:x", ExpiresUnixNano: time.Now().Add(time.Hour).UnixNano()})
		} else {
			op = "use-controller-join"
			err = st.UseControllerJoin(ctx, id, func(*pb.ControllerJoin) error { return nil })
		}
	}
	r.counts[op]++
	ops.Add(1)
	switch {
	case err == nil:
		r.counts["ok"]++
	case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound),
		errors.Is(err, state.ErrAlreadyExists), errors.Is(err, state.ErrInvalid),
		errors.Is(err, state.ErrBadJoinToken):
		r.counts["refused"]++
		if state.RuleOf(err) == "P1" {
			r.counts["refused-claims"]++
		}
	case errors.Is(err, state.ErrAborted):
		r.counts["aborted"]++
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func (r *randomWorker) destroyOptions() state.DestroyOptions {
	if r.rng.IntN(4) == 0 {
		return state.DestroyOptions{Force: true, MaxWait: time.Duration(r.rng.IntN(3)) * time.Millisecond}
	}
	return state.DestroyOptions{}
}

// drain plays every agent, the provisioner and the operator until the model
// is empty: everything destroyed, every unit departed, dead and removed,
// every machine dead and removed.
func drain(t *testing.T, ctx context.Context, st *state.State) {
	t.Helper()
	ignore := func(err error) error {
		if err == nil || errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrRefused) || errors.Is(err, state.ErrAborted) {
			return nil
		}
		return err
	}
	for round := 0; ; round++ {
		snap, err := st.Snapshot(ctx)
		must(t, "Snapshot", err)
		if len(snap.EntityKeys()) == 0 {
			return
		}
		if round == 50 {
			t.Fatalf("model not empty after %d rounds: %v", round, snap.EntityKeys())
		}
		services, err := st.Services(ctx)
		must(t, "Services", err)
		for _, s := range services {
			must(t, "DestroyService", ignore(st.DestroyService(ctx, s.Name)))
		}
		if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
			t.Fatalf("cleaner: %v", err)
		}
		units, err := st.AllUnits(ctx)
		must(t, "AllUnits", err)
		// Subordinates first, then principals: each as its agent would.
		sort.Slice(units, func(i, j int) bool { return units[i].Principal > units[j].Principal })
		errs := make(chan error, len(units))
		var wg sync.WaitGroup
		for i := 0; i < randomWorkers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < len(units); j += randomWorkers {
					errs <- ignore(playUnitAgent(ctx, st, units[j].Name))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, "unit agent", err)
		}
		machines, err := st.Machines(ctx)
		must(t, "Machines", err)
		for _, m := range machines {
			must(t, "DestroyMachine", ignore(st.DestroyMachine(ctx, m.Id, state.DestroyOptions{})))
			must(t, "EnsureMachineDead", ignore(st.EnsureMachineDead(ctx, m.Id)))
			must(t, "RemoveMachine", ignore(st.RemoveMachine(ctx, m.Id)))
		}
		rels, err := st.Relations(ctx)
		must(t, "Relations", err)
		for _, rel := range rels {
			err := st.DestroyRelation(ctx, rel.Id)
			if !errors.Is(err, state.ErrInvalid) {
				must(t, "DestroyRelation", ignore(err))
			}
		}
	}
}

// playUnitAgent does what a unit's agent (and its principal's or machine's
// agent, for the removal) would do for a unit of a dying service.
func playUnitAgent(ctx context.Context, st *state.State, unit string) error {
	if err := st.DestroyUnit(ctx, unit, state.DestroyOptions{}); err != nil {
		return err
	}
	scopes, err := st.UnitScopes(ctx, unit)
	if err != nil {
		return err
	}
	for _, id := range scopes {
		if err := st.LeaveScope(ctx, id, unit); err != nil {
			return err
		}
	}
	subs, err := st.Subordinates(ctx, unit)
	if err != nil {
		return err
	}
	if len(subs) > 0 {
		return nil // the subordinates' agents go first; next round
	}
	if err := st.EnsureUnitDead(ctx, unit); err != nil {
		return err
	}
	return st.RemoveUnit(ctx, unit)
}
