package state_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// queriesModel: kv/0 on machine 0; app/0 (with logger/0) on machine 1;
// app/1 (with logger/1) on machine 2; app related to kv and to logger.
func queriesModel(t *testing.T) (*state.State, context.Context, *pb.Relation, *pb.Relation) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	addUnits(t, ctx, st, "app", 2, state.Placement{})
	db := relate(t, ctx, st, "app:db", "kv:server")
	info := relate(t, ctx, st, "app:juju-info", "logger:host")
	for _, p := range []string{"app/0", "app/1"} {
		_, err := st.AddSubordinate(ctx, p, "logger")
		must(t, "AddSubordinate", err)
	}
	return st, ctx, db, info
}

func TestQueryPrefixes(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{state.MachineUnitsPrefix("3"), "refs/machine-units/3/"},
		{state.SubordinatesPrefix("app/1"), "refs/subordinates/app/1/"},
		{state.ServiceRelationsPrefix("app"), "refs/service-relations/app/"},
	} {
		if tt.got != tt.want {
			t.Errorf("prefix = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestUnitsAndServicesNamed(t *testing.T) {
	st, ctx, _, _ := queriesModel(t)
	us, err := st.UnitsNamed(ctx, "app/1", "kv/9", "logger/0")
	must(t, "UnitsNamed", err)
	if len(us) != 3 || us[0].GetName() != "app/1" || us[1] != nil || us[2].GetPrincipal() != "app/0" {
		t.Errorf("UnitsNamed(app/1, kv/9, logger/0) = %v, want app/1, nil, logger/0", us)
	}
	_, err = st.UnitsNamed(ctx, "app")
	wantErr(t, "UnitsNamed(app)", err, state.ErrInvalid, "", "invalid unit name")

	svcs, err := st.ServicesNamed(ctx, "nosuch", "logger")
	must(t, "ServicesNamed", err)
	if len(svcs) != 2 || svcs[0] != nil || !svcs[1].GetSubordinate() {
		t.Errorf("ServicesNamed(nosuch, logger) = %v, want nil, logger", svcs)
	}
	_, err = st.ServicesNamed(ctx, "Bad")
	wantErr(t, "ServicesNamed(Bad)", err, state.ErrInvalid, "", "invalid service name")
}

func TestMachineUnitNamesAndServices(t *testing.T) {
	st, ctx, _, _ := queriesModel(t)
	for _, tt := range []struct {
		machine string
		want    []string
	}{
		{"0", []string{"kv/0"}},
		{"1", []string{"app/0", "logger/0"}},
		{"2", []string{"app/1", "logger/1"}},
		{"7", nil},
	} {
		got, err := st.MachineUnitNames(ctx, tt.machine)
		must(t, "MachineUnitNames", err)
		if !slices.Equal(got, tt.want) {
			t.Errorf("MachineUnitNames(%s) = %v, want %v", tt.machine, got, tt.want)
		}
	}
	for _, tt := range []struct {
		machine, service string
		want             bool
	}{
		{"0", "kv", true},
		{"0", "app", false},
		{"0", "logger", false},
		{"1", "app", true},
		{"1", "logger", true},
		{"1", "kv", false},
		{"1", "log", false}, // a prefix of logger is not logger
	} {
		got, err := st.MachineRunsService(ctx, tt.machine, tt.service)
		must(t, "MachineRunsService", err)
		if got != tt.want {
			t.Errorf("MachineRunsService(%s, %s) = %v, want %v", tt.machine, tt.service, got, tt.want)
		}
	}
	_, err := st.MachineRunsService(ctx, "x", "kv")
	wantErr(t, "MachineRunsService(x, kv)", err, state.ErrInvalid, "", "invalid machine id")
}

func TestSubordinateOfService(t *testing.T) {
	st, ctx, _, _ := queriesModel(t)
	for _, tt := range []struct{ principal, service, want string }{
		{"app/0", "logger", "logger/0"},
		{"app/1", "logger", "logger/1"},
		{"app/0", "log", ""},
		{"kv/0", "logger", ""},
	} {
		got, err := st.SubordinateOfService(ctx, tt.principal, tt.service)
		must(t, "SubordinateOfService", err)
		if got != tt.want {
			t.Errorf("SubordinateOfService(%s, %s) = %q, want %q", tt.principal, tt.service, got, tt.want)
		}
	}
}

func TestRelationsBetween(t *testing.T) {
	st, ctx, db, info := queriesModel(t)
	ids := func(rels []*pb.Relation) []int64 {
		var out []int64
		for _, r := range rels {
			out = append(out, r.Id)
		}
		return out
	}
	for _, tt := range []struct {
		a, b string
		want []int64
	}{
		{"app", "kv", []int64{db.Id}},
		{"kv", "app", []int64{db.Id}},
		{"logger", "app", []int64{info.Id}},
		{"kv", "logger", nil},
		{"kv", "kv", nil}, // a peer relation is not between two services
	} {
		got, err := st.RelationsBetween(ctx, tt.a, tt.b)
		must(t, "RelationsBetween", err)
		if !slices.Equal(ids(got), tt.want) {
			t.Errorf("RelationsBetween(%s, %s) = %v, want %v", tt.a, tt.b, ids(got), tt.want)
		}
	}
	_, err := st.RelationsBetween(ctx, "kv", "nosuch")
	if !errors.Is(err, state.ErrNotFound) {
		t.Errorf("RelationsBetween(kv, nosuch) = %v, want not found", err)
	}
}

// TestUnitCount: every unit counts, subordinates and dying ones too, and
// nothing else under the model does.
func TestUnitCount(t *testing.T) {
	st, ctx, _, _ := queriesModel(t)
	n, err := st.UnitCount(ctx)
	must(t, "UnitCount", err)
	if n != 5 {
		t.Errorf("UnitCount = %d, want 5 (kv/0, app/0, app/1, logger/0, logger/1)", n)
	}
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
	if n, err = st.UnitCount(ctx); err != nil || n != 5 {
		t.Errorf("UnitCount with kv/0 dying = %d, %v; want 5", n, err)
	}
}

// TestCensus: the census counts what the whole model holds, by life.
func TestCensus(t *testing.T) {
	st, ctx, _, _ := queriesModel(t)
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
	must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "logger/1"))
	must(t, "DestroyRelation", st.DestroyRelation(ctx, 1))
	c, err := st.Census(ctx)
	must(t, "Census", err)
	m, err := st.Model(ctx)
	must(t, "Model", err)
	want := &state.Census{Machines: map[pb.Life]int{}, Services: map[pb.Life]int{}, Units: map[pb.Life]int{}, Relations: map[pb.Life]int{}}
	for _, x := range m.Machines {
		want.Machines[x.Life]++
	}
	for _, x := range m.Services {
		want.Services[x.Life]++
	}
	for _, x := range m.Units {
		want.Units[x.Life]++
	}
	for _, x := range m.Relations {
		want.Relations[x.Life]++
	}
	for _, k := range []struct {
		kind      string
		got, want map[pb.Life]int
	}{
		{"machines", c.Machines, want.Machines}, {"services", c.Services, want.Services},
		{"units", c.Units, want.Units}, {"relations", c.Relations, want.Relations},
	} {
		if !maps.Equal(k.got, k.want) {
			t.Errorf("census of %s = %v, the model's %v", k.kind, k.got, k.want)
		}
	}
	if c.Units[pb.Life_LIFE_DYING] != 1 || c.Units[pb.Life_LIFE_DEAD] != 1 || c.Units[pb.Life_LIFE_ALIVE] != 3 {
		t.Errorf("census of units = %v, want 3 alive, kv/0 dying and logger/1 dead", c.Units)
	}
}
