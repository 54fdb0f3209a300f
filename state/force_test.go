package state_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// clock is a settable clock for forced-removal deadlines.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClockedState(t *testing.T) (*state.State, context.Context, *clock) {
	t.Helper()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t), Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkInvariants(t, st) })
	return st, etcdtest.Context(t), clk
}

func pass(t *testing.T, ctx context.Context, st *state.State) time.Time {
	t.Helper()
	next, err := state.NewCleaner(st, 0).Pass(ctx)
	must(t, "cleaner pass", err)
	checkInvariants(t, st)
	return next
}

// forcedModel is app/0 (with subordinate logger/0) related to kv/0, all in
// scope: a unit whose agent never comes back has plenty to undo.
func forcedModel(t *testing.T, ctx context.Context, st *state.State) (db, host *pb.Relation) {
	t.Helper()
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{})
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	db = relate(t, ctx, st, "app", "kv")
	host = relate(t, ctx, st, "app", "logger")
	sub, err := st.AddSubordinate(ctx, "app/0", "logger")
	must(t, "AddSubordinate", err)
	must(t, "enter", st.EnterScope(ctx, db.Id, "app/0", nil))
	must(t, "enter", st.EnterScope(ctx, db.Id, "kv/0", nil))
	must(t, "enter", st.EnterScope(ctx, host.Id, "app/0", nil))
	must(t, "enter", st.EnterScope(ctx, host.Id, sub.Name, nil))
	return db, host
}

func TestForceDestroyUnit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		maxWait time.Duration
	}{
		{"max-wait 1m", time.Minute},
		{"no-wait", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx, clk := newClockedState(t)
			db, host := forcedModel(t, ctx, st)
			must(t, "DestroyUnit --force", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{Force: true, MaxWait: tt.maxWait}))
			if got := life(t, ctx, st, "unit", "app/0"); got != "dying" {
				t.Fatalf("app/0 is %s, want dying", got)
			}
			if tt.maxWait > 0 {
				next := pass(t, ctx, st)
				if want := clk.Now().Add(tt.maxWait); !next.Equal(want) {
					t.Errorf("Pass = next %v, want %v", next, want)
				}
				if got := life(t, ctx, st, "unit", "app/0"); got != "dying" {
					t.Fatalf("app/0 is %s before max-wait, want dying (its agent gets the chance)", got)
				}
				// The subordinate follows its principal meanwhile.
				if got := life(t, ctx, st, "unit", "logger/0"); got != "dying" {
					t.Errorf("logger/0 is %s, want dying", got)
				}
				clk.Advance(tt.maxWait)
			}
			if next := pass(t, ctx, st); !next.IsZero() {
				t.Errorf("Pass = next %v, want nothing left waiting", next)
			}
			for _, u := range []string{"app/0", "logger/0"} {
				if got := life(t, ctx, st, "unit", u); got != "removed" {
					t.Errorf("%s is %s, want removed", u, got)
				}
			}
			// kv/0 is still in db, which stays alive; host had only the
			// forced units in it, and stays too (it was alive).
			if members, _ := st.ScopeMembers(ctx, db.Id); len(members) != 1 || members[0] != "kv/0" {
				t.Errorf("ScopeMembers(db) = %v, want [kv/0]", members)
			}
			if members, _ := st.ScopeMembers(ctx, host.Id); len(members) != 0 {
				t.Errorf("ScopeMembers(host) = %v, want none", members)
			}
		})
	}
	t.Run("a second force shortens the wait", func(t *testing.T) {
		st, ctx, _ := newClockedState(t)
		forcedModel(t, ctx, st)
		must(t, "force 1h", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{Force: true, MaxWait: time.Hour}))
		must(t, "force 1m", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{Force: true, MaxWait: time.Minute}))
		must(t, "force 2h", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{Force: true, MaxWait: 2 * time.Hour}))
		next := pass(t, ctx, st)
		if want := time.Unix(1_800_000_000, 0).Add(time.Minute); !next.Equal(want) {
			t.Errorf("Pass = next %v, want %v", next, want)
		}
	})
	t.Run("the agent finishes first", func(t *testing.T) {
		st, ctx, clk := newClockedState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addUnits(t, ctx, st, "app", 1, state.Placement{})
		must(t, "force", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{Force: true, MaxWait: time.Minute}))
		must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "app/0"))
		must(t, "RemoveUnit", st.RemoveUnit(ctx, "app/0"))
		clk.Advance(time.Minute)
		if next := pass(t, ctx, st); !next.IsZero() {
			t.Errorf("Pass = next %v, want the item gone", next)
		}
	})
}

func TestForceDestroyMachine(t *testing.T) {
	st, ctx, clk := newClockedState(t)
	forcedModel(t, ctx, st)
	app, err := st.Unit(ctx, "app/0")
	must(t, "Unit", err)
	m := app.MachineId
	wantErr(t, "DestroyMachine", st.DestroyMachine(ctx, m, state.DestroyOptions{}), state.ErrRefused, "M2", "has unit app/0 assigned")
	must(t, "DestroyMachine --force", st.DestroyMachine(ctx, m, state.DestroyOptions{Force: true, MaxWait: time.Minute}))
	mach, err := st.Machine(ctx, m)
	must(t, "Machine", err)
	if mach.Life != pb.Life_LIFE_DYING || !mach.Forced {
		t.Fatalf("machine = %v, want dying and forced", mach)
	}
	pass(t, ctx, st)
	if got := life(t, ctx, st, "unit", "app/0"); got != "dying" {
		t.Errorf("app/0 is %s after the first pass, want dying", got)
	}
	if got := life(t, ctx, st, "machine", m); got != "dying" {
		t.Errorf("machine is %s before max-wait, want dying", got)
	}
	clk.Advance(time.Minute)
	pass(t, ctx, st)
	if got := life(t, ctx, st, "unit", "app/0"); got != "removed" {
		t.Errorf("app/0 is %s, want removed", got)
	}
	if got := life(t, ctx, st, "machine", m); got != "dead" {
		t.Errorf("machine is %s, want dead", got)
	}
	must(t, "RemoveMachine", st.RemoveMachine(ctx, m))
	if got := life(t, ctx, st, "unit", "kv/0"); got != "alive" {
		t.Errorf("kv/0 on another machine is %s, want alive", got)
	}
}

// TestForceDestroyServiceOfAbsentAgents destroys a related service whose
// agents never act, then forces its units: everything goes.
func TestForceDestroyServiceOfAbsentAgents(t *testing.T) {
	st, ctx, _ := newClockedState(t)
	forcedModel(t, ctx, st)
	for _, svc := range []string{"app", "kv", "logger"} {
		must(t, "DestroyService", st.DestroyService(ctx, svc))
	}
	pass(t, ctx, st)
	for _, u := range []string{"app/0", "kv/0"} {
		must(t, "force", st.DestroyUnit(ctx, u, state.DestroyOptions{Force: true}))
	}
	pass(t, ctx, st)
	// Their machines' agents are gone too: force the machines, and the
	// provisioner removes them once dead.
	ms, err := st.Machines(ctx)
	must(t, "Machines", err)
	for _, m := range ms {
		must(t, "DestroyMachine --force", st.DestroyMachine(ctx, m.Id, state.DestroyOptions{Force: true}))
	}
	pass(t, ctx, st)
	for _, m := range ms {
		must(t, "RemoveMachine", st.RemoveMachine(ctx, m.Id))
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if keys := snap.EntityKeys(); len(keys) != 0 {
		t.Errorf("entity keys left: %v", keys)
	}
	_, err = st.Service(ctx, "app")
	if !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Service(app) = %v, want not found", err)
	}
}
