package state_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The race tests run operators' and agents' conflicting changes at the same
// time, many rounds each, with a monitor checking the invariants at every
// committed revision. CI runs them with -race -count=20.

const raceRounds = 10

// parallel runs the functions at once and returns their errors.
func parallel(fs ...func() error) []error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// allowed fails the test for an error that is not one of the kinds the
// race may legitimately produce.
func allowed(t *testing.T, err error, kinds ...error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Errorf("unexpected error: %v", err)
}

// (a) Assigning units to machine M while M is destroyed: never a dying
// machine with an alive unit assigned.
func TestRaceAssignWhileDestroyingMachine(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "app", appEndpoints)
	for round := 0; round < raceRounds; round++ {
		ms, err := st.AddMachines(ctx, 1)
		must(t, "AddMachines", err)
		m := ms[0].Id
		us := addUnits(t, ctx, st, "app", 3, state.Placement{Unassigned: true})
		fs := []func() error{func() error { return st.DestroyMachine(ctx, m, state.DestroyOptions{}) }}
		for _, u := range us {
			fs = append(fs, func() error { return st.AssignUnit(ctx, u.Name, m) })
		}
		fs = append(fs, func() error { _, err := st.AddUnits(ctx, "app", 2, state.Placement{Machine: m}); return err })
		errs := parallel(fs...)
		for _, err := range errs {
			allowed(t, err, state.ErrRefused)
		}
		mach, err := st.Machine(ctx, m)
		must(t, "Machine", err)
		assigned, err := st.MachinePrincipals(ctx, m)
		must(t, "MachineUnits", err)
		if mach.Life == pb.Life_LIFE_DYING {
			if errs[0] != nil {
				t.Errorf("round %d: machine dying though DestroyMachine said %v", round, errs[0])
			}
			for _, u := range assigned {
				if got := life(t, ctx, st, "unit", u); got == "alive" {
					t.Errorf("round %d: dying machine %s has alive unit %s", round, m, u)
				}
			}
		} else if errs[0] == nil || len(assigned) == 0 {
			t.Errorf("round %d: machine %s alive with %v assigned, DestroyMachine = %v", round, m, assigned, errs[0])
		}
	}
	mon.Stop(t)
	t.Logf("%+v", st.Stats())
}

// (a') Assigning units to a manual machine that never joined while it is
// destroyed: it is removed only with no unit assigned, and otherwise
// becomes dying (or the destroy is refused) as any machine would.
func TestRaceAssignWhileDestroyingManualMachine(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "app", appEndpoints)
	removed := 0
	for round := 0; round < raceRounds; round++ {
		ms, err := st.AddMachinesWith(ctx, 1, state.MachineOptions{Manual: true})
		must(t, "AddMachines", err)
		m := ms[0].Id
		us := addUnits(t, ctx, st, "app", 2, state.Placement{Unassigned: true})
		fs := []func() error{func() error { return st.DestroyMachine(ctx, m, state.DestroyOptions{}) }}
		for _, u := range us {
			fs = append(fs, func() error { return st.AssignUnit(ctx, u.Name, m) })
		}
		fs = append(fs, func() error { _, err := st.AddUnits(ctx, "app", 1, state.Placement{Machine: m}); return err })
		errs := parallel(fs...)
		for _, err := range errs {
			allowed(t, err, state.ErrRefused, state.ErrNotFound)
		}
		assigned, err := st.MachinePrincipals(ctx, m)
		must(t, "MachineUnits", err)
		mach, err := st.Machine(ctx, m)
		switch {
		case errors.Is(err, state.ErrNotFound):
			removed++
			if errs[0] != nil || len(assigned) != 0 {
				t.Errorf("round %d: machine %s removed with %v assigned, DestroyMachine = %v", round, m, assigned, errs[0])
			}
		case err != nil:
			t.Fatal(err)
		case mach.Life == pb.Life_LIFE_DYING:
			if errs[0] != nil || len(assigned) == 0 {
				t.Errorf("round %d: machine %s dying with %v assigned, DestroyMachine = %v", round, m, assigned, errs[0])
			}
		case errs[0] == nil || len(assigned) == 0:
			t.Errorf("round %d: machine %s alive with %v assigned, DestroyMachine = %v", round, m, assigned, errs[0])
		}
	}
	mon.Stop(t)
	t.Logf("removed at once in %d of %d rounds; %+v", removed, raceRounds, st.Stats())
}

// (b) Units entering a relation's scope while the relation is destroyed:
// the relation is removed exactly when its last unit leaves, never while
// one is in scope.
func TestRaceEnterScopeWhileDestroyingRelation(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	units := append(addUnits(t, ctx, st, "app", 3, state.Placement{}), addUnits(t, ctx, st, "kv", 3, state.Placement{})...)
	for round := 0; round < raceRounds; round++ {
		rel := relate(t, ctx, st, "app", "kv")
		fs := []func() error{func() error { return st.DestroyRelation(ctx, rel.Id) }}
		for _, u := range units {
			fs = append(fs, func() error {
				if err := st.EnterScope(ctx, rel.Id, u.Name, nil); err != nil {
					return err
				}
				return st.LeaveScope(ctx, rel.Id, u.Name)
			})
		}
		for _, err := range parallel(fs...) {
			allowed(t, err, state.ErrRefused, state.ErrNotFound)
		}
		// Every unit is out; the relation was destroyed: it must be gone.
		if _, err := st.Relation(ctx, rel.Id); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("round %d: relation %d = %v after destroy and every unit leaving, want removed", round, rel.Id, err)
		}
		if n := mon.Deleted(state.RelationKey(rel.Id)); n > 1 {
			t.Errorf("round %d: relation %d deleted %d times", round, rel.Id, n)
		}
	}
	mon.Stop(t)
	t.Logf("%+v", st.Stats())
}

// (c) Adding units while the service is destroyed: no unit outlives its
// service.
func TestRaceAddUnitsWhileDestroyingService(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	for round := 0; round < raceRounds; round++ {
		svc := fmt.Sprintf("app%c", 'a'+round)
		addService(t, ctx, st, svc, appEndpoints)
		fs := []func() error{func() error { return st.DestroyService(ctx, svc) }}
		for i := 0; i < 4; i++ {
			fs = append(fs, func() error {
				_, err := st.AddUnits(ctx, svc, 1+i%2, state.Placement{Unassigned: i%2 == 0})
				return err
			})
		}
		for _, err := range parallel(fs...) {
			allowed(t, err, state.ErrRefused, state.ErrNotFound)
		}
		// Play the agents: every unit that made it in goes away, and the
		// service with the last of them.
		units, err := st.Units(ctx, svc)
		must(t, "Units", err)
		for _, u := range units {
			if err := st.DestroyUnit(ctx, u.Name, state.DestroyOptions{}); err != nil {
				allowed(t, err, state.ErrNotFound)
				continue
			}
			if err := st.EnsureUnitDead(ctx, u.Name); err != nil {
				allowed(t, err, state.ErrNotFound)
				continue
			}
			allowed(t, st.RemoveUnit(ctx, u.Name), state.ErrNotFound)
		}
		if got := life(t, ctx, st, "service", svc); got != "removed" {
			t.Errorf("round %d: %s is %s after its units went, want removed", round, svc, got)
		}
	}
	mon.Stop(t)
	t.Logf("%+v", st.Stats())
}

// (d) The last unit leaving the last relation of a dying service, while the
// service's own last unit goes: the service is removed exactly once.
func TestRaceLastHoldOfDyingService(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "kv", kvEndpoints)
	kvs := addUnits(t, ctx, st, "kv", 3, state.Placement{})
	for round := 0; round < raceRounds; round++ {
		svc := fmt.Sprintf("app%c", 'a'+round)
		addService(t, ctx, st, svc, appEndpoints)
		apps := addUnits(t, ctx, st, svc, 2, state.Placement{})
		rel := relate(t, ctx, st, svc, "kv")
		for _, u := range kvs {
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, u.Name, nil))
		}
		must(t, "EnterScope", st.EnterScope(ctx, rel.Id, apps[0].Name, nil))
		must(t, "DestroyService", st.DestroyService(ctx, svc))
		if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
			t.Fatal(err)
		}
		var fs []func() error
		for _, u := range kvs {
			fs = append(fs, func() error { return st.LeaveScope(ctx, rel.Id, u.Name) })
		}
		for i, u := range apps {
			fs = append(fs, func() error {
				if i == 0 {
					if err := st.LeaveScope(ctx, rel.Id, u.Name); err != nil {
						return err
					}
				}
				if err := st.EnsureUnitDead(ctx, u.Name); err != nil {
					return err
				}
				return st.RemoveUnit(ctx, u.Name)
			})
		}
		for _, err := range parallel(fs...) {
			allowed(t, err)
		}
		if got := life(t, ctx, st, "service", svc); got != "removed" {
			t.Errorf("round %d: %s is %s, want removed", round, svc, got)
		}
	}
	mon.Stop(t)
	for round := 0; round < raceRounds; round++ {
		if n := mon.Deleted(state.ServiceKey(fmt.Sprintf("app%c", 'a'+round))); n != 1 {
			t.Errorf("service app%c deleted %d times, want exactly once", 'a'+round, n)
		}
	}
}

// Members far apart by number leave a dying relation, and the last units
// of a dying service go, all at once: none has a neighbour among the
// witness probes, so each looks for its witness by range, narrowest
// window first (rangeWitnesses). Exactly one removes the relation, or the
// service, every round.
func TestRaceFarApartLastHolds(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 101, state.Placement{Unassigned: true})
	far := []string{"kv/13", "kv/19", "kv/40", "kv/100"}
	var rels []int64
	for round := 0; round < raceRounds; round++ {
		svc := fmt.Sprintf("app%c", 'a'+round)
		addService(t, ctx, st, svc, appEndpoints)
		apps := addUnits(t, ctx, st, svc, 101, state.Placement{Unassigned: true})
		rel := relate(t, ctx, st, svc, "kv")
		rels = append(rels, rel.Id)
		for _, u := range append(far, svc+"/50") {
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, u, nil))
		}
		must(t, "DestroyRelation", st.DestroyRelation(ctx, rel.Id))
		for i, u := range apps {
			if i != 7 && i != 13 && i != 50 && i != 100 {
				must(t, "DestroyUnit", st.DestroyUnit(ctx, u.Name, state.DestroyOptions{}))
			}
		}
		var fs []func() error
		for _, u := range append(far, svc+"/50") {
			fs = append(fs, func() error { return st.LeaveScope(ctx, rel.Id, u) })
		}
		for _, n := range []int{7, 13, 100} {
			fs = append(fs, func() error { return st.DestroyUnit(ctx, fmt.Sprintf("%s/%d", svc, n), state.DestroyOptions{}) })
		}
		fs = append(fs, func() error { return st.DestroyService(ctx, svc) })
		for _, err := range parallel(fs...) {
			allowed(t, err)
		}
		if _, err := st.Relation(ctx, rel.Id); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("round %d: relation %d = %v, want it removed", round, rel.Id, err)
		}
		// app's last unit, out of scope now, goes last.
		must(t, "DestroyUnit", st.DestroyUnit(ctx, svc+"/50", state.DestroyOptions{}))
		if got := life(t, ctx, st, "service", svc); got != "removed" {
			t.Errorf("round %d: %s is %s, want removed", round, svc, got)
		}
	}
	mon.Stop(t)
	for round, id := range rels {
		if n := mon.Deleted(state.RelationKey(id)); n != 1 {
			t.Errorf("round %d: relation %d deleted %d times, want exactly once", round, id, n)
		}
		if n := mon.Deleted(state.ServiceKey(fmt.Sprintf("app%c", 'a'+round))); n != 1 {
			t.Errorf("service app%c deleted %d times, want exactly once", 'a'+round, n)
		}
	}
}

// (g) A unit leaving its scopes and dying in one EnsureUnitDead, while it
// enters another relation: the death is made from what the last leave
// read, and its comparisons must catch the entry. Never a dead unit in a
// scope: either the entry is refused or the death is.
func TestRaceDeathLeavingWhileEnteringAnother(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	db := relate(t, ctx, st, "app", "kv")
	host := relate(t, ctx, st, "app", "logger")
	var dead, refused int
	for round := 0; round < 2*raceRounds; round++ {
		u := addUnits(t, ctx, st, "app", 1, state.Placement{})[0].Name
		must(t, "EnterScope", st.EnterScope(ctx, db.Id, u, nil))
		errs := parallel(
			func() error { return st.EnsureUnitDead(ctx, u, db.Id) },
			func() error { return st.EnterScope(ctx, host.Id, u, nil) },
		)
		for _, err := range errs {
			allowed(t, err, state.ErrRefused)
		}
		switch {
		case errs[0] == nil && errs[1] == nil:
			t.Errorf("round %d: %s both died and entered relation %d", round, u, host.Id)
		case errs[0] == nil:
			dead++
		default:
			refused++
			must(t, "LeaveScope", st.LeaveScope(ctx, host.Id, u))
			must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, u))
		}
		if got := life(t, ctx, st, "unit", u); got != "dead" {
			t.Errorf("round %d: %s is %s, want dead", round, u, got)
		}
	}
	mon.Stop(t)
	t.Logf("died first %d times, refused %d times; %+v", dead, refused, st.Stats())
}
