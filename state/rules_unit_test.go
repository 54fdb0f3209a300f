package state_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestRuleU1_UnitsOnlyToAliveServicesAndPrincipals(t *testing.T) {
	tests := []struct {
		name string
		act  func(ctx context.Context, st *state.State) error
		want error
		rule string
		msg  string
	}{
		{"units to a dying service", func(ctx context.Context, st *state.State) error {
			if err := st.DestroyService(ctx, "app"); err != nil {
				return err
			}
			_, err := st.AddUnits(ctx, "app", 1, state.Placement{})
			return err
		}, state.ErrRefused, "U1", "service app is dying: units are added only to an alive service"},
		{"units to a missing service", func(ctx context.Context, st *state.State) error {
			_, err := st.AddUnits(ctx, "nope", 1, state.Placement{})
			return err
		}, state.ErrNotFound, "", "service nope not found"},
		{"principal units to a subordinate service", func(ctx context.Context, st *state.State) error {
			_, err := st.AddUnits(ctx, "logger", 1, state.Placement{})
			return err
		}, state.ErrInvalid, "", "service logger is a subordinate"},
		{"a subordinate to a dying principal", func(ctx context.Context, st *state.State) error {
			if err := st.DestroyUnit(ctx, "app/0", state.DestroyOptions{}); err != nil {
				return err
			}
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			return err
		}, state.ErrRefused, "U1", "unit app/0 is dying: subordinates are added only to an alive principal"},
		{"a subordinate of a dying service", func(ctx context.Context, st *state.State) error {
			if err := st.DestroyService(ctx, "logger"); err != nil {
				return err
			}
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			return err
		}, state.ErrNotFound, "", "service logger not found"},
		{"a subordinate of a principal service", func(ctx context.Context, st *state.State) error {
			_, err := st.AddSubordinate(ctx, "app/0", "app")
			return err
		}, state.ErrInvalid, "", "service app is not a subordinate"},
		{"a subordinate of a subordinate", func(ctx context.Context, st *state.State) error {
			sub, err := st.AddSubordinate(ctx, "app/0", "logger")
			if err != nil {
				return err
			}
			_, err = st.AddSubordinate(ctx, sub.Name, "logger")
			return err
		}, state.ErrInvalid, "", "unit logger/0 is itself a subordinate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "logger", loggerEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			before, err := st.AllUnits(ctx)
			must(t, "AllUnits", err)
			err = tt.act(ctx, st)
			wantErr(t, tt.name, err, tt.want, tt.rule, tt.msg)
			after, err := st.AllUnits(ctx)
			must(t, "AllUnits", err)
			if len(after) > len(before)+1 || (len(after) == len(before)+1 && tt.name != "a subordinate of a subordinate") {
				t.Errorf("%d units after a refusal, had %d", len(after), len(before))
			}
		})
	}
	t.Run("a subordinate beside an alive principal, once", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addService(t, ctx, st, "logger", loggerEndpoints)
		us := addUnits(t, ctx, st, "app", 1, state.Placement{})
		sub, err := st.AddSubordinate(ctx, "app/0", "logger")
		must(t, "AddSubordinate", err)
		if sub.Principal != "app/0" || sub.MachineId != us[0].MachineId {
			t.Errorf("AddSubordinate = %v, want principal app/0 on machine %s", sub, us[0].MachineId)
		}
		again, err := st.AddSubordinate(ctx, "app/0", "logger")
		must(t, "AddSubordinate again", err)
		if again.Name != sub.Name {
			t.Errorf("AddSubordinate again = %s, want the same %s", again.Name, sub.Name)
		}
	})
}

func TestRuleU2_UnitsBecomeDyingAnyTime(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, ctx context.Context, st *state.State)
		// how the unit is made dying
		act func(ctx context.Context, st *state.State) error
	}{
		{"destroy-unit of a plain unit", func(*testing.T, context.Context, *state.State) {}, destroyApp0},
		{"destroy-unit of a unit in scope with a subordinate", func(t *testing.T, ctx context.Context, st *state.State) {
			rel := relate(t, ctx, st, "app", "kv")
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/0", nil))
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			must(t, "AddSubordinate", err)
		}, destroyApp0},
		{"its service destroyed, then the cleaner", func(*testing.T, context.Context, *state.State) {}, func(ctx context.Context, st *state.State) error {
			if err := st.DestroyService(ctx, "app"); err != nil {
				return err
			}
			_, err := state.NewCleaner(st, 0).Pass(ctx)
			return err
		}},
		{"its principal destroyed, then the cleaner", func(t *testing.T, ctx context.Context, st *state.State) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{})
			must(t, "AddSubordinate", func() error { _, err := st.AddSubordinate(ctx, "kv/0", "logger"); return err }())
		}, func(ctx context.Context, st *state.State) error {
			// app/0 stands in as "the unit"; here the subordinate of kv/0
			// follows its principal.
			if err := st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}); err != nil {
				return err
			}
			if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
				return err
			}
			return st.DestroyUnit(ctx, "app/0", state.DestroyOptions{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addService(t, ctx, st, "logger", loggerEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			tt.setup(t, ctx, st)
			must(t, tt.name, tt.act(ctx, st))
			if got := life(t, ctx, st, "unit", "app/0"); got != "dying" {
				t.Errorf("app/0 is %s, want dying", got)
			}
			if subs, _ := st.Subordinates(ctx, "kv/0"); len(subs) > 0 {
				if got := life(t, ctx, st, "unit", subs[0]); got != "dying" {
					t.Errorf("subordinate %s of dying kv/0 is %s, want dying", subs[0], got)
				}
			}
			// Destroying again changes nothing.
			must(t, "DestroyUnit again", destroyApp0(ctx, st))
		})
	}
	t.Run("an unassigned unit has no agent and goes at once", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
		must(t, "DestroyUnit", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{}))
		if got := life(t, ctx, st, "unit", "app/0"); got != "removed" {
			t.Errorf("app/0 is %s, want removed", got)
		}
	})
}

func destroyApp0(ctx context.Context, st *state.State) error {
	return st.DestroyUnit(ctx, "app/0", state.DestroyOptions{})
}

func TestRuleU3_DeadOnlyOutOfScopeWithoutSubordinates(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, ctx context.Context, st *state.State)
		msg   string // the refusal's, "" for none
	}{
		{"in a relation scope", func(t *testing.T, ctx context.Context, st *state.State) {
			rel := relate(t, ctx, st, "app", "kv")
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/0", nil))
		}, "unit app/0 is still in the scope of relation 1"},
		{"with an alive subordinate", func(t *testing.T, ctx context.Context, st *state.State) {
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			must(t, "AddSubordinate", err)
		}, "unit app/0 still has subordinate logger/0"},
		{"with a dead subordinate not yet removed", func(t *testing.T, ctx context.Context, st *state.State) {
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			must(t, "AddSubordinate", err)
			must(t, "EnsureUnitDead(logger/0)", st.EnsureUnitDead(ctx, "logger/0"))
		}, "unit app/0 still has subordinate logger/0"},
		{"out of scope, subordinate removed", func(t *testing.T, ctx context.Context, st *state.State) {
			rel := relate(t, ctx, st, "app", "kv")
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/0", nil))
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			must(t, "AddSubordinate", err)
			must(t, "LeaveScope", st.LeaveScope(ctx, rel.Id, "app/0"))
			must(t, "EnsureUnitDead(logger/0)", st.EnsureUnitDead(ctx, "logger/0"))
			must(t, "RemoveUnit(logger/0)", st.RemoveUnit(ctx, "logger/0"))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newDeathModel(t)
			tt.setup(t, ctx, st)
			must(t, "DestroyUnit", destroyApp0(ctx, st))
			wantApp0Death(t, ctx, st, st.EnsureUnitDead(ctx, "app/0"), tt.msg)
		})
	}
}

// newDeathModel has services app, kv and logger, and unit app/0.
func newDeathModel(t *testing.T) (*state.State, context.Context) {
	t.Helper()
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{})
	return st, ctx
}

// wantApp0Death checks err, EnsureUnitDead's answer for app/0: refused
// under U3 saying msg and app/0 still dying, or (msg "") done and app/0
// dead.
func wantApp0Death(t *testing.T, ctx context.Context, st *state.State, err error, msg string) {
	t.Helper()
	want := "dead"
	if msg != "" {
		wantErr(t, "EnsureUnitDead", err, state.ErrRefused, "U3", msg)
		want = "dying"
	} else {
		must(t, "EnsureUnitDead", err)
	}
	if got := life(t, ctx, st, "unit", "app/0"); got != want {
		t.Errorf("app/0 is %s, want %s", got, want)
	}
}

// TestRuleU4_AgentTakesItsUnitToDead walks the unit agent's part in order:
// depart every relation, see subordinates dead and remove them, then dead.
// Each step taken too early is refused, naming what is still in the way.
func TestRuleU4_AgentTakesItsUnitToDead(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{})
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	db := relate(t, ctx, st, "app", "kv")
	host := relate(t, ctx, st, "app", "logger")
	sub, err := st.AddSubordinate(ctx, "app/0", "logger")
	must(t, "AddSubordinate", err)
	for _, step := range []struct {
		what string
		err  error
	}{
		{"app/0 enters db", st.EnterScope(ctx, db.Id, "app/0", nil)},
		{"kv/0 enters db", st.EnterScope(ctx, db.Id, "kv/0", nil)},
		{"app/0 enters host", st.EnterScope(ctx, host.Id, "app/0", nil)},
		{"logger enters host", st.EnterScope(ctx, host.Id, sub.Name, nil)},
		{"destroy app/0", destroyApp0(ctx, st)},
	} {
		must(t, step.what, step.err)
	}
	steps := []struct {
		what string
		do   func() error
		want string // the refusal's message, "" for success
	}{
		{"dead while in scope", func() error { return st.EnsureUnitDead(ctx, "app/0") }, "unit app/0 is still in the scope of relation 1"},
		{"depart db", func() error { return st.LeaveScope(ctx, db.Id, "app/0") }, ""},
		{"dead while in host", func() error { return st.EnsureUnitDead(ctx, "app/0") }, "unit app/0 is still in the scope of relation 2"},
		{"depart host", func() error { return st.LeaveScope(ctx, host.Id, "app/0") }, ""},
		{"dead with a subordinate", func() error { return st.EnsureUnitDead(ctx, "app/0") }, "unit app/0 still has subordinate logger/0"},
		// The subordinate follows its principal: its agent sets it dying,
		// departs, and goes dead; the principal's agent removes it.
		{"subordinate dying", func() error { return st.DestroyUnit(ctx, sub.Name, state.DestroyOptions{}) }, ""},
		{"remove the subordinate too early", func() error { return st.RemoveUnit(ctx, sub.Name) }, "unit logger/0 is dying: only a dead unit can be removed"},
		{"subordinate departs host", func() error { return st.LeaveScope(ctx, host.Id, sub.Name) }, ""},
		{"subordinate dead", func() error { return st.EnsureUnitDead(ctx, sub.Name) }, ""},
		{"dead with a dead subordinate", func() error { return st.EnsureUnitDead(ctx, "app/0") }, "unit app/0 still has subordinate logger/0"},
		{"principal removes subordinate", func() error { return st.RemoveUnit(ctx, sub.Name) }, ""},
		{"app/0 dead", func() error { return st.EnsureUnitDead(ctx, "app/0") }, ""},
	}
	for _, step := range steps {
		err := step.do()
		if step.want == "" {
			must(t, step.what, err)
			continue
		}
		rule := "U3"
		if step.what == "remove the subordinate too early" {
			rule = "U5"
		}
		wantErr(t, step.what, err, state.ErrRefused, rule, step.want)
	}
	if got := life(t, ctx, st, "unit", "app/0"); got != "dead" {
		t.Errorf("app/0 is %s, want dead", got)
	}
}

func TestRuleU5_OnlyDeadUnitsAreRemoved(t *testing.T) {
	for _, tt := range []struct {
		life string
		unit string
		want error
		msg  string
	}{
		{"alive", "app/0", state.ErrRefused, "unit app/0 is alive: only a dead unit can be removed"},
		{"dying", "app/0", state.ErrRefused, "unit app/0 is dying: only a dead unit can be removed"},
		{"dead", "app/0", nil, ""},
		{"dying", "logger/0", state.ErrRefused, "unit logger/0 is dying: only a dead unit can be removed"},
		{"dead", "logger/0", nil, ""},
	} {
		t.Run(tt.life+" "+tt.unit, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "logger", loggerEndpoints)
			us := addUnits(t, ctx, st, "app", 1, state.Placement{})
			if tt.unit == "logger/0" {
				_, err := st.AddSubordinate(ctx, "app/0", "logger")
				must(t, "AddSubordinate", err)
			}
			if tt.life != "alive" {
				must(t, "DestroyUnit", st.DestroyUnit(ctx, tt.unit, state.DestroyOptions{}))
			}
			if tt.life == "dead" {
				must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, tt.unit))
			}
			err := st.RemoveUnit(ctx, tt.unit)
			if tt.want != nil {
				wantErr(t, "RemoveUnit", err, tt.want, "U5", tt.msg)
				return
			}
			must(t, "RemoveUnit", err)
			if got := life(t, ctx, st, "unit", tt.unit); got != "removed" {
				t.Errorf("%s is %s, want removed", tt.unit, got)
			}
			if tt.unit == "app/0" {
				if units, _ := st.MachinePrincipals(ctx, us[0].MachineId); len(units) != 0 {
					t.Errorf("machine %s still has %v", us[0].MachineId, units)
				}
			} else if subs, _ := st.Subordinates(ctx, "app/0"); len(subs) != 0 {
				t.Errorf("app/0 still has subordinates %v", subs)
			}
		})
	}
}

var _ = pb.Life_LIFE_ALIVE

// TestAddUnitsSideBySide adds units to one service from many callers at
// once, each on its own machine as the harness does: every unit is there
// once under a number of its own, the sequence is just past the last one,
// and the invariants hold.
func TestAddUnitsSideBySide(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", nil)
	ms, err := st.AddMachines(ctx, 8)
	must(t, "AddMachines", err)
	const each = 20
	var wg sync.WaitGroup
	errs := make(chan error, len(ms))
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.AddUnits(ctx, "app", each, state.Placement{Machine: m.Id})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "AddUnits", err)
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	n := 0
	for k := range snap.Values {
		if strings.HasPrefix(k, state.UnitKey("app/")) {
			n++
		}
	}
	if want := len(ms) * each; n != want {
		t.Errorf("%d units of app, want %d", n, want)
	}
	for i := range len(ms) * each {
		if name := fmt.Sprintf("app/%d", i); snap.Values[state.UnitKey(name)] == nil {
			t.Errorf("unit %s missing of %d units added", name, len(ms)*each)
		}
	}
	if got, want := string(snap.Values["seq/unit/app"]), strconv.Itoa(len(ms)*each); got != want {
		t.Errorf("app's unit sequence = %q, want %q", got, want)
	}
	checkInvariants(t, st)
}

// EnsureUnitDead takes the unit out of the scopes it names first, each as
// LeaveScope would and committed on its own, then sets it dead when U3
// allows: a scope it does not name, or a subordinate, still stops the
// death, and the scopes it left stay left.
func TestEnsureUnitDeadLeavingScopes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		leave func(db, host int64) []int64
		sub   bool
		msg   string
	}{
		{"leaving both", func(db, host int64) []int64 { return []int64{db, host} }, false, ""},
		{"leaving one", func(db, host int64) []int64 { return []int64{db} }, false, "unit app/0 is still in the scope of relation 2"},
		{"leaving both, with a subordinate", func(db, host int64) []int64 { return []int64{host, db} }, true, "unit app/0 still has subordinate logger/0"},
		{"leaving one not entered too", func(db, host int64) []int64 { return []int64{99, db, host} }, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newDeathModel(t)
			db, host := relate(t, ctx, st, "app", "kv"), relate(t, ctx, st, "app", "logger")
			for _, rel := range []int64{db.Id, host.Id} {
				must(t, "EnterScope", st.EnterScope(ctx, rel, "app/0", nil))
			}
			if tt.sub {
				_, err := st.AddSubordinate(ctx, "app/0", "logger")
				must(t, "AddSubordinate", err)
			}
			must(t, "DestroyUnit", destroyApp0(ctx, st))
			leave := tt.leave(db.Id, host.Id)
			wantApp0Death(t, ctx, st, st.EnsureUnitDead(ctx, "app/0", leave...), tt.msg)
			for _, rel := range []int64{db.Id, host.Id} {
				members, err := st.ScopeMembers(ctx, rel)
				must(t, "ScopeMembers", err)
				if in, left := slices.Contains(members, "app/0"), slices.Contains(leave, rel); in == left {
					t.Errorf("app/0 in relation %d's scope: %v, having been asked to leave it: %v", rel, in, left)
				}
			}
		})
	}
}
