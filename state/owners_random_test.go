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

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

const ownersRandomSteps = 300

// TestOwnersRandomized adds and destroys services (reusing their names),
// their units (each removal may take its dying service) and their
// relations with app (each removal may take a dying service too), adds,
// destroys and removes machines, and claims them all for two manifests,
// from several goroutines at once, while a monitor checks the invariants
// at every committed revision: among them, that every owner record names
// an entity that exists (its removal took the record). At every step a
// claim must never take an entity another manifest owns. At the end a
// destroyed service's owner is gone from the model, and a new service of
// the same name is not owned.
func TestOwnersRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addService(t, ctx, st, "app", appEndpoints)
	mon := statetest.Start(t, st)

	var steps atomic.Int64
	counts := make([]map[string]int, 3)
	var wg sync.WaitGroup
	for w := range counts {
		counts[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for steps.Add(1) <= ownersRandomSteps {
				what, err := ownersStep(ctx, st, rng)
				switch {
				case err == nil:
					counts[w][what]++
				case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrAlreadyExists),
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
	mon.Stop(t)
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	t.Logf("seed %d; steps: %v", seed, total)
	for _, want := range []string{"claim", "add service", "destroy service", "add machine", "add relation", "destroy relation", "add unit", "remove unit", "remove machine"} {
		if total[want] == 0 {
			t.Errorf("steps %v: want some %q that succeeded", total, want)
		}
	}

	// A service claimed, destroyed and added again is not owned.
	removeService(t, ctx, st, "own")
	addService(t, ctx, st, "own", kvEndpoints)
	must(t, "claim own", st.ClaimOwnership(ctx, "shop", "admin", []*pb.OwnedEntity{{Kind: state.OwnService, Id: "own", Resource: "own"}}))
	if err := st.ClaimOwnership(ctx, "other", "admin", []*pb.OwnedEntity{{Kind: state.OwnService, Id: "own", Resource: "own"}}); !errors.Is(err, state.ErrRefused) {
		t.Errorf("claim of a service another manifest owns: %v, want refused", err)
	}
	removeService(t, ctx, st, "own")
	addService(t, ctx, st, "own", kvEndpoints)
	m, err := st.Model(ctx)
	must(t, "model", err)
	if o := m.Owners["service/own"]; o != nil {
		t.Errorf("a new service of a destroyed owned one's name is owned by %s", o.Manifest)
	}
	must(t, "claim own again", st.ClaimOwnership(ctx, "other", "admin", []*pb.OwnedEntity{{Kind: state.OwnService, Id: "own", Resource: "own"}}))
	checkInvariants(t, st)
	if s := st.Stats(); s.MaxOps > state.MaxTxnOps {
		t.Errorf("largest transaction held %d operations, want at most %d", s.MaxOps, state.MaxTxnOps)
	}
	drain(t, ctx, st)
}

// ownersStep takes one random step and says which.
func ownersStep(ctx context.Context, st *state.State, rng *rand.Rand) (string, error) {
	svc := "own"
	if rng.IntN(2) == 0 {
		svc = "own" + strconv.Itoa(rng.IntN(3))
	}
	manifest := []string{"shop", "other"}[rng.IntN(2)]
	switch n := rng.IntN(100); {
	case n < 16:
		_, err := st.AddService(ctx, state.AddServiceArgs{Name: svc, Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Endpoints: kvEndpoints})
		return "add service", err
	case n < 23:
		return "destroy service", st.DestroyService(ctx, svc)
	case n < 30:
		_, err := st.AddUnits(ctx, svc, 1, state.Placement{Unassigned: true})
		return "add unit", err
	case n < 35:
		// As an agent does: the unit dead, then removed.
		units, err := st.Units(ctx, svc)
		if err != nil || len(units) == 0 {
			return "remove unit", err
		}
		u := units[rng.IntN(len(units))].Name
		if err := st.EnsureUnitDead(ctx, u); err != nil {
			return "remove unit", err
		}
		return "remove unit", st.RemoveUnit(ctx, u)
	case n < 42:
		a, _ := state.ParseEndpointSpec("app:db")
		b, _ := state.ParseEndpointSpec(svc + ":server")
		_, err := st.AddRelation(ctx, a, b)
		return "add relation", err
	case n < 46:
		id, err := randomRelation(ctx, st, rng)
		if err != nil || id < 0 {
			return "destroy relation", err
		}
		return "destroy relation", st.DestroyRelation(ctx, id)
	case n < 52:
		_, err := st.AddMachines(ctx, 1+rng.IntN(3))
		return "add machine", err
	case n < 58:
		return "destroy machine", st.DestroyMachine(ctx, strconv.Itoa(rng.IntN(10)), state.DestroyOptions{})
	case n < 62:
		// Destroyed, then as the provisioner does: dead, then removed.
		id := strconv.Itoa(rng.IntN(10))
		if err := st.DestroyMachine(ctx, id, state.DestroyOptions{}); err != nil {
			return "remove machine", err
		}
		if err := st.EnsureMachineDead(ctx, id); err != nil {
			return "remove machine", err
		}
		return "remove machine", st.RemoveMachine(ctx, id)
	case n < 68:
		_, err := state.NewCleaner(st, 0).Pass(ctx)
		return "clean", err
	default:
		var es []*pb.OwnedEntity
		seen := map[string]bool{}
		for range 1 + rng.IntN(3) {
			e := &pb.OwnedEntity{Kind: state.OwnService, Id: svc, Resource: svc}
			switch rng.IntN(3) {
			case 0:
				id := strconv.Itoa(rng.IntN(10))
				e = &pb.OwnedEntity{Kind: state.OwnMachine, Id: id, Resource: "machines"}
			case 1:
				if id, err := randomRelation(ctx, st, rng); err == nil && id >= 0 {
					e = &pb.OwnedEntity{Kind: state.OwnRelation, Id: strconv.FormatInt(id, 10), Resource: "rel"}
				}
			}
			if !seen[e.Kind+e.Id] {
				seen[e.Kind+e.Id] = true
				es = append(es, e)
			}
		}
		before, err := st.Model(ctx)
		if err != nil {
			return "claim", err
		}
		err = st.ClaimOwnership(ctx, manifest, "admin", es)
		if err == nil {
			for _, e := range es {
				if o := before.Owners[e.Kind+"/"+e.Id]; o != nil && o.Manifest != manifest {
					// Owned by the other manifest before: the claim may
					// succeed only if the entity was replaced since.
					after, aerr := st.Model(ctx)
					if aerr == nil && after.Owners[e.Kind+"/"+e.Id] != nil && sameOwnerIncarnation(o, after.Owners[e.Kind+"/"+e.Id]) {
						return "claim", fmt.Errorf("claimed %s %s owned by %s", e.Kind, e.Id, o.Manifest)
					}
				}
			}
		}
		m, merr := st.Model(ctx)
		if merr == nil {
			if err := ownersExist(m); err != nil {
				return "claim", err
			}
		}
		return "claim", err
	}
}

// randomRelation is the id of one of the model's relations between two
// services, -1 when it has none.
func randomRelation(ctx context.Context, st *state.State, rng *rand.Rand) (int64, error) {
	rels, err := st.Relations(ctx)
	if err != nil {
		return -1, err
	}
	var ids []int64
	for _, r := range rels {
		if len(r.Endpoints) == 2 {
			ids = append(ids, r.Id)
		}
	}
	if len(ids) == 0 {
		return -1, nil
	}
	return ids[rng.IntN(len(ids))], nil
}

// removeService destroys a service and runs the cleaner until it is gone.
func removeService(t *testing.T, ctx context.Context, st *state.State, name string) {
	t.Helper()
	for range 20 {
		if err := st.DestroyService(ctx, name); errors.Is(err, state.ErrNotFound) {
			return
		}
		if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
			t.Fatalf("cleaner: %v", err)
		}
	}
	t.Fatalf("service %s not removed", name)
}

func sameOwnerIncarnation(a, b *pb.Owner) bool {
	return a.EntityCreateRevision == b.EntityCreateRevision
}

// ownersExist checks that the model's owners name entities it has.
func ownersExist(m *state.Model) error {
	have := map[string]bool{}
	for _, s := range m.Services {
		have["service/"+s.Name] = true
	}
	for _, mc := range m.Machines {
		have["machine/"+mc.Id] = true
	}
	for _, r := range m.Relations {
		have["relation/"+strconv.FormatInt(r.Id, 10)] = true
	}
	for k := range m.Owners {
		if !have[k] {
			return fmt.Errorf("model's owners name %s, which it does not have", k)
		}
	}
	return nil
}
