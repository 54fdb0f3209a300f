package state_test

import (
	"context"
	"errors"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestRuleR1_EnterScopeOnlyWhileAlive(t *testing.T) {
	tests := []struct {
		name string
		prep func(ctx context.Context, st *state.State, rel int64) error
		unit string
		want error
		msg  string
	}{
		{"a dying relation", func(ctx context.Context, st *state.State, rel int64) error {
			return st.DestroyRelation(ctx, rel)
		}, "app/0", state.ErrRefused, "relation 1 (app:db kv:server) is dying: units enter only an alive relation"},
		{"a dying unit", func(ctx context.Context, st *state.State, rel int64) error {
			return st.DestroyUnit(ctx, "app/0", state.DestroyOptions{})
		}, "app/0", state.ErrRefused, "unit app/0 is dying: only an alive unit enters a relation"},
		{"a removed relation", func(ctx context.Context, st *state.State, rel int64) error {
			if err := st.LeaveScope(ctx, rel, "kv/0"); err != nil {
				return err
			}
			return st.DestroyRelation(ctx, rel)
		}, "app/0", state.ErrNotFound, "relation 1 not found"},
		{"a unit of another service", func(context.Context, *state.State, int64) error { return nil },
			"other/0", state.ErrInvalid, "unit other/0 cannot enter relation 1 (app:db kv:server): its service is not in it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addService(t, ctx, st, "other", plainEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			addUnits(t, ctx, st, "kv", 1, state.Placement{})
			addUnits(t, ctx, st, "other", 1, state.Placement{})
			rel := relate(t, ctx, st, "app", "kv")
			must(t, "kv/0 enters", st.EnterScope(ctx, rel.Id, "kv/0", nil))
			must(t, "prepare", tt.prep(ctx, st, rel.Id))
			rule := "R1"
			if tt.want != state.ErrRefused {
				rule = ""
			}
			wantErr(t, "EnterScope", st.EnterScope(ctx, rel.Id, tt.unit, nil), tt.want, rule, tt.msg)
			if scopes, _ := st.UnitScopes(ctx, tt.unit); len(scopes) != 0 {
				t.Errorf("%s is in scope of %v after a refusal", tt.unit, scopes)
			}
		})
	}
	t.Run("alive unit, alive relation, settings kept", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "app", appEndpoints)
		addService(t, ctx, st, "kv", kvEndpoints)
		addUnits(t, ctx, st, "kv", 1, state.Placement{})
		rel := relate(t, ctx, st, "app", "kv")
		must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "kv/0", map[string]string{"host": "10.0.0.1"}))
		must(t, "EnterScope again", st.EnterScope(ctx, rel.Id, "kv/0", nil))
		got, v1, err := st.Settings(ctx, rel.Id, "kv/0")
		must(t, "Settings", err)
		if got["host"] != "10.0.0.1" {
			t.Errorf("Settings = %v, want host 10.0.0.1", got)
		}
		must(t, "UpdateSettings", st.UpdateSettings(ctx, "kv/0", []state.SettingsChange{{Relation: rel.Id, Set: map[string]string{"port": "80"}, Unset: []string{"host"}}}))
		got, v2, err := st.Settings(ctx, rel.Id, "kv/0")
		must(t, "Settings", err)
		if got["port"] != "80" || got["host"] != "" || v2 <= v1 {
			t.Errorf("Settings = %v version %d, want port 80, no host, version above %d", got, v2, v1)
		}
		// The same settings again (a hook setting what it set before)
		// make no new version: no remote unit is told of a change.
		must(t, "UpdateSettings", st.UpdateSettings(ctx, "kv/0", []state.SettingsChange{{Relation: rel.Id, Set: map[string]string{"port": "80"}, Unset: []string{"host"}}}))
		if _, v3, err := st.Settings(ctx, rel.Id, "kv/0"); err != nil || v3 != v2 {
			t.Errorf("after the same UpdateSettings again, version %d (%v), want %d", v3, err, v2)
		}
	})
}

func TestRuleR2_DestroyRelation(t *testing.T) {
	tests := []struct {
		name    string
		inScope []string
		want    string // "removed" or "dying"
	}{
		{"empty scope: removed at once", nil, "removed"},
		{"a unit in scope: dying", []string{"kv/0"}, "dying"},
		{"units of both sides in scope: dying", []string{"kv/0", "app/0"}, "dying"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			addUnits(t, ctx, st, "kv", 1, state.Placement{})
			rel := relate(t, ctx, st, "app", "kv")
			for _, u := range tt.inScope {
				must(t, "EnterScope", st.EnterScope(ctx, rel.Id, u, nil))
			}
			must(t, "DestroyRelation", st.DestroyRelation(ctx, rel.Id))
			got, err := st.Relation(ctx, rel.Id)
			switch {
			case tt.want == "removed" && !errors.Is(err, state.ErrNotFound):
				t.Errorf("Relation = %v, %v; want removed", got, err)
			case tt.want == "dying" && (err != nil || got.Life != pb.Life_LIFE_DYING):
				t.Errorf("Relation = %v, %v; want dying", got, err)
			}
			if tt.want == "removed" {
				if _, err := st.RelationByKey(ctx, rel.Key); !errors.Is(err, state.ErrNotFound) {
					t.Errorf("RelationByKey(%q) = %v, want not found", rel.Key, err)
				}
				// The same endpoints can be related again, under a new id.
				again := relate(t, ctx, st, "app", "kv")
				if again.Id == rel.Id {
					t.Errorf("relation id %d reused", rel.Id)
				}
			}
		})
	}
	t.Run("peer relations go only with their service", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "kv", kvEndpoints)
		peer, err := st.RelationByKey(ctx, "kv:cluster")
		must(t, "RelationByKey", err)
		wantErr(t, "DestroyRelation(peer)", st.DestroyRelation(ctx, peer.Id), state.ErrInvalid, "", "is a peer relation")
	})
}

func TestRuleR3_LastToLeaveRemovesTheDyingRelation(t *testing.T) {
	t.Run("neighbours", func(t *testing.T) { testRuleR3(t, 2, []string{"app/0", "app/1", "kv/0"}) })
	// No member has a neighbour among the witness probes: app/13 and
	// app/19 find theirs by range under app/1, app/120 under the whole
	// scope (kv/0).
	t.Run("far apart by number", func(t *testing.T) { testRuleR3(t, 121, []string{"app/13", "app/19", "app/120", "kv/0"}) })
}

func testRuleR3(t *testing.T, appUnits int, members []string) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "app", appUnits, state.Placement{Unassigned: true})
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	rel := relate(t, ctx, st, "app", "kv")
	for _, u := range members {
		must(t, "EnterScope", st.EnterScope(ctx, rel.Id, u, map[string]string{"unit": u}))
	}
	must(t, "DestroyRelation", st.DestroyRelation(ctx, rel.Id))
	for i, u := range members {
		must(t, "LeaveScope "+u, st.LeaveScope(ctx, rel.Id, u))
		_, err := st.Relation(ctx, rel.Id)
		last := i == len(members)-1
		if last != errors.Is(err, state.ErrNotFound) {
			t.Fatalf("after %s left (last: %v), Relation = %v", u, last, err)
		}
		if _, _, err := st.Settings(ctx, rel.Id, u); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("Settings(%s) after leaving = %v, want not found", u, err)
		}
	}
	// Leaving again changes nothing.
	must(t, "LeaveScope again", st.LeaveScope(ctx, rel.Id, "kv/0"))
	for _, svc := range []string{"app", "kv"} {
		if got := life(t, ctx, st, "service", svc); got != "alive" {
			t.Errorf("%s is %s, want alive", svc, got)
		}
	}
}

func TestAddRelationEndpoints(t *testing.T) {
	tests := []struct {
		a, b string
		want error
		msg  string
		key  string
	}{
		{"app", "kv", nil, "", "app:db kv:server"},
		{"kv:server", "app:db", nil, "", "app:db kv:server"},
		{"app:website", "kv", state.ErrInvalid, "no endpoints of app:website and kv can be related", ""},
		{"app:website", "kv:server", state.ErrInvalid, "cannot relate app:website and kv:server: interfaces http and kv differ", ""},
		{"app:nope", "kv", state.ErrNotFound, `service app has no endpoint "nope"`, ""},
		{"app", "other", state.ErrInvalid, "no endpoints of app and other can be related", ""},
		{"kv", "kv", state.ErrInvalid, "no endpoints of kv and kv can be related", ""},
		{"app", "nope", state.ErrNotFound, "service nope not found", ""},
		{"app", "logger", nil, "", "app:juju-info logger:host"},
		{"kv", "logger", state.ErrInvalid, "no endpoints of kv and logger can be related: kv offers server (kv); logger requires host (juju-info, container)", ""},
		// The implicit endpoint is juju-info, with lifeline-info a second
		// name of it and of its interface: a service whose record holds
		// either relates to requirers of either, named by either name.
		{"ubuntu", "logger", nil, "", "logger:host ubuntu:lifeline-info"},
		{"ubuntu:juju-info", "logger", nil, "", "logger:host ubuntu:lifeline-info"},
		{"ubuntu", "oldlogger", nil, "", "oldlogger:host ubuntu:lifeline-info"},
		{"app:lifeline-info", "logger", nil, "", "app:juju-info logger:host"},
		{"app", "oldlogger", nil, "", "app:juju-info oldlogger:host"},
		{"ubuntu", "papertrail", nil, "", "papertrail:juju-info ubuntu:lifeline-info"},
		{"app", "papertrail:juju-info", nil, "", "app:juju-info papertrail:juju-info"},
		{"ubuntu", "app", state.ErrInvalid, "no endpoints of ubuntu and app can be related: ubuntu offers juju-info (juju-info, alias lifeline-info); app offers website (http), juju-info (juju-info, alias lifeline-info) and requires db (kv)", ""},
		{"kv", "papertrail", state.ErrInvalid, "no endpoints of kv and papertrail can be related: kv offers server (kv); papertrail requires juju-info (juju-info, container)", ""},
		{"logger", "papertrail", state.ErrInvalid, "no endpoints of logger and papertrail can be related: logger requires host (juju-info, container); papertrail requires juju-info (juju-info, container)", ""},
		{"kv:lifeline-info", "papertrail", state.ErrNotFound, `service kv has no endpoint "lifeline-info"`, ""},
		{"other", "kv", nil, "", "kv:server other:db"},
		{"app", "two", state.ErrInvalid, "ambiguous relation: app two could be app:db two:a or app:db two:b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.a+" "+tt.b, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addService(t, ctx, st, "other", plainEndpoints)
			addService(t, ctx, st, "logger", loggerEndpoints)
			addService(t, ctx, st, "ubuntu", []*pb.Endpoint{{Name: "lifeline-info", Interface: "lifeline-info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}})
			addService(t, ctx, st, "papertrail", []*pb.Endpoint{{Name: "juju-info", Interface: "juju-info", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_CONTAINER}})
			addService(t, ctx, st, "oldlogger", []*pb.Endpoint{{Name: "host", Interface: "lifeline-info", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_CONTAINER}})
			addService(t, ctx, st, "two", []*pb.Endpoint{
				{Name: "a", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
				{Name: "b", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
			})
			a, _ := state.ParseEndpointSpec(tt.a)
			b, _ := state.ParseEndpointSpec(tt.b)
			rel, err := st.AddRelation(ctx, a, b)
			if tt.want != nil {
				wantErr(t, "AddRelation", err, tt.want, "", tt.msg)
				return
			}
			must(t, "AddRelation", err)
			if rel.Key != tt.key {
				t.Errorf("AddRelation(%s, %s) key = %q, want %q", tt.a, tt.b, rel.Key, tt.key)
			}
			_, err = st.AddRelation(ctx, a, b)
			wantErr(t, "AddRelation again", err, state.ErrAlreadyExists, "", "relation "+tt.key+" already exists")
		})
	}
	t.Run("endpoint limit", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "kv", []*pb.Endpoint{{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL, Limit: 1}})
		addService(t, ctx, st, "app", appEndpoints)
		addService(t, ctx, st, "other", plainEndpoints)
		relate(t, ctx, st, "app", "kv")
		_, err := st.AddRelation(ctx, state.EndpointSpec{Service: "other"}, state.EndpointSpec{Service: "kv"})
		wantErr(t, "AddRelation over the limit", err, state.ErrRefused, "S1", "endpoint kv:server is already in 1 relations, its limit")
	})
}
