package state_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lifelinehq/lifeline/state"
)

func TestRuleS1_UnitsAndRelationsOnlyWhileAlive(t *testing.T) {
	tests := []struct {
		name string
		act  func(ctx context.Context, st *state.State) error
		rule string
		msg  string
	}{
		{"add units", func(ctx context.Context, st *state.State) error {
			_, err := st.AddUnits(ctx, "app", 1, state.Placement{})
			return err
		}, "U1", "service app is dying: units are added only to an alive service"},
		{"add a relation", func(ctx context.Context, st *state.State) error {
			_, err := st.AddRelation(ctx, state.EndpointSpec{Service: "app"}, state.EndpointSpec{Service: "kv"})
			return err
		}, "S1", "service app is dying: relations are added only to an alive service"},
		{"add a relation from the other side", func(ctx context.Context, st *state.State) error {
			_, err := st.AddRelation(ctx, state.EndpointSpec{Service: "kv"}, state.EndpointSpec{Service: "app", Endpoint: "db"})
			return err
		}, "S1", "service app is dying"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			must(t, "DestroyService", st.DestroyService(ctx, "app"))
			wantErr(t, tt.name, tt.act(ctx, st), state.ErrRefused, tt.rule, tt.msg)
			units, err := st.Units(ctx, "app")
			must(t, "Units", err)
			rels, err := st.ServiceRelations(ctx, "app")
			must(t, "ServiceRelations", err)
			if len(units) != 1 || len(rels) != 0 {
				t.Errorf("after a refusal app has %d units and %d relations, want 1 and 0", len(units), len(rels))
			}
		})
	}
}

func TestRuleS2_DestroyService(t *testing.T) {
	tests := []struct {
		name      string
		units     int
		relations bool
		life      string // after destroy
	}{
		{"no units, no relations: removed at once", 0, false, "removed"},
		{"a unit: dying", 1, false, "dying"},
		{"a relation only: dying", 0, true, "dying"},
		{"units and relations: dying", 3, true, "dying"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			if tt.units > 0 {
				addUnits(t, ctx, st, "app", tt.units, state.Placement{})
			}
			var relID int64 = -1
			if tt.relations {
				rel := relate(t, ctx, st, "app", "kv")
				relID = rel.Id
				addUnits(t, ctx, st, "kv", 1, state.Placement{})
				must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "kv/0", nil))
			}
			must(t, "DestroyService", st.DestroyService(ctx, "app"))
			if got := life(t, ctx, st, "service", "app"); got != tt.life {
				t.Fatalf("app is %s, want %s", got, tt.life)
			}
			// Nothing grew with the model: units and relations are left
			// to the cleaner (and the agents).
			for i := 0; i < tt.units; i++ {
				if got := life(t, ctx, st, "unit", "app/"+string(rune('0'+i))); got != "alive" {
					t.Errorf("app/%d is %s before the cleaner ran, want alive", i, got)
				}
			}
			if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < tt.units; i++ {
				if got := life(t, ctx, st, "unit", "app/"+string(rune('0'+i))); got != "dying" {
					t.Errorf("app/%d is %s after the cleaner ran, want dying", i, got)
				}
			}
			if relID >= 0 {
				rel, err := st.Relation(ctx, relID)
				must(t, "Relation", err)
				if got := state.LifeName(rel.Life); got != "dying" {
					t.Errorf("relation is %s after the cleaner ran, want dying", got)
				}
			}
			if tt.life == "dying" {
				must(t, "DestroyService again", st.DestroyService(ctx, "app"))
			}
		})
	}
}

func TestRuleS3_DyingServiceRemovedByWhoeverRemovesItsLastHold(t *testing.T) {
	// kill takes a unit from dying through dead to removed, as its agents would.
	kill := func(t *testing.T, ctx context.Context, st *state.State, unit string) {
		t.Helper()
		must(t, "DestroyUnit "+unit, st.DestroyUnit(ctx, unit, state.DestroyOptions{}))
		scopes, err := st.UnitScopes(ctx, unit)
		must(t, "UnitScopes", err)
		for _, id := range scopes {
			must(t, "LeaveScope", st.LeaveScope(ctx, id, unit))
		}
		must(t, "EnsureUnitDead "+unit, st.EnsureUnitDead(ctx, unit))
		must(t, "RemoveUnit "+unit, st.RemoveUnit(ctx, unit))
	}
	t.Run("the last unit removed, no relations", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addUnits(t, ctx, st, "app", 2, state.Placement{})
		must(t, "DestroyService", st.DestroyService(ctx, "app"))
		kill(t, ctx, st, "app/0")
		if got := life(t, ctx, st, "service", "app"); got != "dying" {
			t.Fatalf("app is %s with a unit left, want dying", got)
		}
		kill(t, ctx, st, "app/1")
		if got := life(t, ctx, st, "service", "app"); got != "removed" {
			t.Fatalf("app is %s after its last unit went, want removed", got)
		}
	})
	t.Run("units far apart by number", func(t *testing.T) {
		// No unit has a neighbour among witnessProbes: each removal but
		// the last finds its witness by range, app/13's and app/19's
		// under app/1, app/120's under app/12 then app/1 then the whole
		// service. Unassigned, a unit destroyed is removed at once.
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addUnits(t, ctx, st, "app", 121, state.Placement{Unassigned: true})
		for i := range 121 {
			if i != 13 && i != 19 && i != 120 && i != 7 {
				must(t, "DestroyUnit", st.DestroyUnit(ctx, fmt.Sprintf("app/%d", i), state.DestroyOptions{}))
			}
		}
		must(t, "DestroyService", st.DestroyService(ctx, "app"))
		for i, u := range []string{"app/13", "app/19", "app/120", "app/7"} {
			must(t, "DestroyUnit "+u, st.DestroyUnit(ctx, u, state.DestroyOptions{}))
			want := "dying"
			if i == 3 {
				want = "removed"
			}
			if got := life(t, ctx, st, "service", "app"); got != want {
				t.Fatalf("app is %s after %s went, want %s", got, u, want)
			}
		}
	})
	t.Run("the last unit of the other side leaves the last relation", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addService(t, ctx, st, "kv", kvEndpoints)
		addUnits(t, ctx, st, "app", 1, state.Placement{})
		addUnits(t, ctx, st, "kv", 2, state.Placement{})
		rel := relate(t, ctx, st, "app", "kv")
		for _, u := range []string{"app/0", "kv/0", "kv/1"} {
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, u, nil))
		}
		must(t, "DestroyService", st.DestroyService(ctx, "app"))
		if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
			t.Fatal(err)
		}
		kill(t, ctx, st, "app/0")
		if got := life(t, ctx, st, "service", "app"); got != "dying" {
			t.Fatalf("app is %s while its relation lives, want dying", got)
		}
		must(t, "kv/0 leaves", st.LeaveScope(ctx, rel.Id, "kv/0"))
		if got := life(t, ctx, st, "service", "app"); got != "dying" {
			t.Fatalf("app is %s while kv/1 is in scope, want dying", got)
		}
		must(t, "kv/1 leaves", st.LeaveScope(ctx, rel.Id, "kv/1"))
		if got := life(t, ctx, st, "service", "app"); got != "removed" {
			t.Errorf("app is %s after the last unit left its last relation, want removed", got)
		}
		if _, err := st.Relation(ctx, rel.Id); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("Relation(%d) = %v, want it removed", rel.Id, err)
		}
		if got := life(t, ctx, st, "service", "kv"); got != "alive" {
			t.Errorf("kv is %s, want alive", got)
		}
	})
	t.Run("a relation with an empty scope destroyed", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addService(t, ctx, st, "kv", kvEndpoints)
		rel := relate(t, ctx, st, "app", "kv")
		addUnits(t, ctx, st, "kv", 1, state.Placement{})
		must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "kv/0", nil))
		must(t, "DestroyService", st.DestroyService(ctx, "app"))
		if got := life(t, ctx, st, "service", "app"); got != "dying" {
			t.Fatalf("app is %s, want dying", got)
		}
		must(t, "LeaveScope", st.LeaveScope(ctx, rel.Id, "kv/0")) // relation still alive: stays
		if got := life(t, ctx, st, "service", "app"); got != "dying" {
			t.Fatalf("app is %s, want dying", got)
		}
		must(t, "DestroyRelation", st.DestroyRelation(ctx, rel.Id))
		if got := life(t, ctx, st, "service", "app"); got != "removed" {
			t.Errorf("app is %s after its last relation went, want removed", got)
		}
	})
}
