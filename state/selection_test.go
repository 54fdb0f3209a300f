package state_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// selectionModel is queriesModel with statuses, scopes and presences:
// kv/0 on machine 0; app/0 (with logger/0) on machine 1; app/1 (with
// logger/1) on machine 2; app related to kv (db) and to logger (info).
func selectionModel(t *testing.T) (*state.State, *state.Model) {
	st, ctx, db, info := queriesModel(t)
	for _, u := range []string{"kv/0", "app/0", "app/1", "logger/0", "logger/1"} {
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnit, u, &pb.Status{Status: "active", Message: u}))
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, u, &pb.Status{Status: "idle"}))
	}
	for _, m := range []string{"0", "1", "2"} {
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusMachine, m, &pb.Status{Status: "started"}))
	}
	// What the charms say of their services (status-set --application,
	// application-version-set): a selected status shows them as the
	// whole model's does.
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusService, "app", &pb.Status{Status: "blocked", Message: "set by the charm"}))
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusServiceVersion, "app", &pb.Status{Status: "1.2.3"}))
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusServiceVersion, "logger", &pb.Status{Status: "0.9"}))
	p, err := st.Present(ctx, "machine-1", time.Minute)
	must(t, "Present", err)
	t.Cleanup(func() { p.Close() })
	for _, u := range []string{"app/0", "app/1", "kv/0"} {
		must(t, "EnterScope", st.EnterScope(ctx, db.Id, u, nil))
	}
	for _, u := range []string{"app/0", "logger/0"} {
		must(t, "EnterScope", st.EnterScope(ctx, info.Id, u, nil))
	}
	full, err := st.Model(ctx)
	must(t, "Model", err)
	return st, full
}

func TestSelectModel(t *testing.T) {
	st, full := selectionModel(t)
	ctx := t.Context()
	for _, tt := range []struct {
		name      string
		sel       state.Selection
		units     string // held, in order
		machines  string
		services  string
		partial   string
		relations string // keys
		scopes    string // relation key: units, per relation
	}{
		{"service", state.Selection{Services: []string{"app"}},
			"app/0 app/1 logger/0 logger/1", "1 2", "app logger", "logger", "app:db kv:server;app:juju-info logger:host",
			"app/0 app/1;app/0 logger/0"},
		{"service with a peer relation", state.Selection{Services: []string{"kv"}},
			"kv/0", "0", "kv", "", "kv:cluster;app:db kv:server", ";kv/0"},
		{"unit", state.Selection{Units: []string{"app/1"}},
			"app/1 logger/1", "2", "app logger", "app logger", "app:db kv:server;app:juju-info logger:host", "app/1;"},
		{"subordinate unit", state.Selection{Units: []string{"logger/0"}},
			"logger/0", "1", "logger", "logger", "app:juju-info logger:host", "logger/0"},
		{"machine", state.Selection{Machines: []string{"1"}},
			"app/0 logger/0", "1", "app logger", "app logger", "app:db kv:server;app:juju-info logger:host",
			"app/0;app/0 logger/0"},
		{"union", state.Selection{Services: []string{"kv"}, Units: []string{"app/1"}, Machines: []string{"1"}},
			"app/0 app/1 kv/0 logger/0 logger/1", "0 1 2", "app kv logger", "app logger",
			"kv:cluster;app:db kv:server;app:juju-info logger:host", ";app/0 app/1 kv/0;app/0 logger/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := st.SelectModel(ctx, tt.sel)
			must(t, "SelectModel", err)
			var units, machines, services, partial, rels, scopes []string
			for _, u := range m.Units {
				units = append(units, u.Name)
			}
			for _, mach := range m.Machines {
				machines = append(machines, mach.Id)
			}
			for _, s := range m.Services {
				services = append(services, s.Name)
				if m.Partial[s.Name] {
					partial = append(partial, s.Name)
				}
			}
			for _, r := range m.Relations {
				rels = append(rels, r.Key)
				scopes = append(scopes, strings.Join(m.Scopes[r.Id], " "))
			}
			for _, c := range []struct{ what, got, want string }{
				{"units", strings.Join(units, " "), tt.units},
				{"machines", strings.Join(machines, " "), tt.machines},
				{"services", strings.Join(services, " "), tt.services},
				{"partial", strings.Join(partial, " "), tt.partial},
				{"relations", strings.Join(rels, ";"), tt.relations},
				{"scopes", strings.Join(scopes, ";"), tt.scopes},
			} {
				if c.got != c.want {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
			sameRecords(t, full, m)
		})
	}
}

// sameRecords checks that every record a selected model holds is the
// full model's, and that it holds every status (its services' own
// included), presence and revision of its entities that the full model
// does.
func sameRecords(t *testing.T, full, m *state.Model) {
	t.Helper()
	byKey := func(list []proto.Message, key func(proto.Message) string) map[string]proto.Message {
		out := map[string]proto.Message{}
		for _, v := range list {
			out[key(v)] = v
		}
		return out
	}
	name := func(v proto.Message) string {
		switch e := v.(type) {
		case *pb.Unit:
			return "unit " + e.Name
		case *pb.Machine:
			return "machine " + e.Id
		case *pb.Service:
			return "service " + e.Name
		case *pb.Relation:
			return "relation " + e.Key
		}
		return ""
	}
	all := func(m *state.Model) []proto.Message {
		var out []proto.Message
		for _, u := range m.Units {
			out = append(out, u)
		}
		for _, x := range m.Machines {
			out = append(out, x)
		}
		for _, s := range m.Services {
			out = append(out, s)
		}
		for _, r := range m.Relations {
			out = append(out, r)
		}
		return out
	}
	want := byKey(all(full), name)
	for k, v := range byKey(all(m), name) {
		if !proto.Equal(v, want[k]) {
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}
	var keys []string
	for _, u := range m.Units {
		keys = append(keys, state.StatusKey(state.StatusUnit, u.Name), state.StatusKey(state.StatusUnitAgent, u.Name))
	}
	for _, svc := range m.Services {
		for _, kind := range []state.StatusKind{state.StatusService, state.StatusServiceVersion} {
			if k := state.StatusKey(kind, svc.Name); full.Statuses[k] != nil {
				keys = append(keys, k)
			}
		}
	}
	for _, x := range m.Machines {
		keys = append(keys, state.StatusKey(state.StatusMachine, x.Id))
		if m.Present["machine-"+x.Id] != full.Present["machine-"+x.Id] {
			t.Errorf("machine %s present = %v, want %v", x.Id, m.Present["machine-"+x.Id], full.Present["machine-"+x.Id])
		}
	}
	for _, k := range keys {
		if !proto.Equal(m.Statuses[k], full.Statuses[k]) {
			t.Errorf("status %s = %v, want %v", k, m.Statuses[k], full.Statuses[k])
		}
	}
	got := slices.Collect(func(yield func(string) bool) {
		for k := range m.Statuses {
			if !yield(k) {
				return
			}
		}
	})
	sort.Strings(got)
	sort.Strings(keys)
	if !slices.Equal(got, keys) {
		t.Errorf("statuses held = %v, want %v", got, keys)
	}
}

func TestSelectModelErrors(t *testing.T) {
	st, _ := selectionModel(t)
	ctx := t.Context()
	for _, tt := range []struct {
		sel  state.Selection
		want error
		msg  string
	}{
		{state.Selection{Services: []string{"nosuch"}}, state.ErrNotFound, "service nosuch not found"},
		{state.Selection{Units: []string{"kv/0", "kv/9"}}, state.ErrNotFound, "unit kv/9 not found"},
		{state.Selection{Machines: []string{"30"}}, state.ErrNotFound, "machine 30 not found"},
		{state.Selection{Services: []string{"Bad"}}, state.ErrInvalid, "invalid service name"},
		{state.Selection{Units: []string{"kv"}}, state.ErrInvalid, "invalid unit name"},
		{state.Selection{Machines: []string{"x"}}, state.ErrInvalid, "invalid machine"},
		{state.Selection{Services: slices.Repeat([]string{"kv"}, state.MaxSelectors+1)}, state.ErrInvalid, "at most 100"},
	} {
		_, err := st.SelectModel(ctx, tt.sel)
		wantErr(t, "SelectModel", err, tt.want, "", tt.msg)
	}
}
