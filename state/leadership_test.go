package state_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/state"
)

// present makes machine id's agent present until the test ends or the
// returned func is called.
func present(t *testing.T, ctx context.Context, st *state.State, id string) func() {
	t.Helper()
	p, err := st.Present(ctx, names.MachineTag(id), 10*time.Second)
	must(t, "Present(machine-"+id+")", err)
	t.Cleanup(p.Close)
	return p.Close
}

func leadership(t *testing.T, ctx context.Context, st *state.State, svc string) *state.LeadershipView {
	t.Helper()
	v, err := st.Leadership(ctx, svc)
	must(t, "Leadership("+svc+")", err)
	return v
}

// TestElectLeader: only an alive, assigned unit whose machine's agent is
// present is elected; a leader that holds is not replaced; one whose agent
// went, or whose unit is no longer alive, is, in one transaction.
func TestElectLeader(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 3, state.Placement{})
	addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true})

	wantErr(t, "ElectLeader(kv/0), agent absent", st.ElectLeader(ctx, "kv/0"), state.ErrRefused, "L2", "not present")
	wantErr(t, "ElectLeader(kv/3), unassigned", st.ElectLeader(ctx, "kv/3"), state.ErrRefused, "L2", "not assigned")
	wantErr(t, "ElectLeader(kv/9)", st.ElectLeader(ctx, "kv/9"), state.ErrNotFound, "", "kv/9")
	wantErr(t, "ElectLeader(kv)", st.ElectLeader(ctx, "kv"), state.ErrInvalid, "", "kv")
	if v := leadership(t, ctx, st, "kv"); v.Leader != "" || v.Holds || v.Version != 0 {
		t.Fatalf("Leadership(kv) = %+v, want no leader", v)
	}
	gone0 := present(t, ctx, st, "0")
	present(t, ctx, st, "1")
	present(t, ctx, st, "2")
	must(t, "ElectLeader(kv/0)", st.ElectLeader(ctx, "kv/0"))
	must(t, "ElectLeader(kv/0) again", st.ElectLeader(ctx, "kv/0"))
	wantErr(t, "ElectLeader(kv/1)", st.ElectLeader(ctx, "kv/1"), state.ErrRefused, "L1", "has leader kv/0")
	if v := leadership(t, ctx, st, "kv"); v.Leader != "kv/0" || !v.Holds {
		t.Fatalf("Leadership(kv) = %+v, want kv/0 holding", v)
	}
	if vacated, err := st.VacateLeadership(ctx, "kv"); err != nil || vacated {
		t.Fatalf("VacateLeadership(kv) = %v, %v; want false, nil while kv/0 holds", vacated, err)
	}

	// Its machine's agent goes: kv/0 no longer holds, and is replaced.
	gone0()
	if v := leadership(t, ctx, st, "kv"); v.Leader != "kv/0" || v.Holds {
		t.Fatalf("Leadership(kv) = %+v, want kv/0 not holding", v)
	}
	must(t, "ElectLeader(kv/1)", st.ElectLeader(ctx, "kv/1"))
	if v := leadership(t, ctx, st, "kv"); v.Leader != "kv/1" || !v.Holds {
		t.Fatalf("Leadership(kv) = %+v, want kv/1 holding", v)
	}
	checkInvariants(t, st)

	// Set dying, kv/1 no longer holds: vacated, and it cannot lead again.
	must(t, "DestroyUnit(kv/1)", st.DestroyUnit(ctx, "kv/1", state.DestroyOptions{}))
	if v := leadership(t, ctx, st, "kv"); v.Leader != "kv/1" || v.Holds {
		t.Fatalf("Leadership(kv) = %+v, want kv/1 not holding", v)
	}
	if vacated, err := st.VacateLeadership(ctx, "kv"); err != nil || !vacated {
		t.Fatalf("VacateLeadership(kv) = %v, %v; want true, nil", vacated, err)
	}
	wantErr(t, "ElectLeader(kv/1), dying", st.ElectLeader(ctx, "kv/1"), state.ErrRefused, "L2", "dying")
	must(t, "ElectLeader(kv/2)", st.ElectLeader(ctx, "kv/2"))
	leaders, err := st.Leaders(ctx)
	must(t, "Leaders", err)
	if want := map[string]string{"kv": "kv/2"}; !maps.Equal(leaders, want) {
		t.Fatalf("Leaders() = %v, want %v", leaders, want)
	}
}

// TestLeaderSettings: only the leader holding its leadership writes; an
// empty value deletes; the version is the settings key's revision and
// moves only when they change; the settings are bounded.
func TestLeaderSettings(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 2, state.Placement{})
	gone0 := present(t, ctx, st, "0")
	present(t, ctx, st, "1")
	must(t, "ElectLeader(kv/0)", st.ElectLeader(ctx, "kv/0"))

	_, err := st.SetLeaderSettings(ctx, "kv/1", map[string]string{"a": "1"}, nil)
	wantErr(t, "SetLeaderSettings(kv/1)", err, state.ErrRefused, "L3", "not the leader")
	v1, err := st.SetLeaderSettings(ctx, "kv/0", map[string]string{"a": "1", "b": "2"}, nil)
	must(t, "SetLeaderSettings(kv/0)", err)
	got := leadership(t, ctx, st, "kv")
	if got.Version != v1 || v1 == 0 || !maps.Equal(got.Settings, map[string]string{"a": "1", "b": "2"}) {
		t.Fatalf("Leadership(kv) = %+v, want a=1 b=2 at version %d", got, v1)
	}
	v2, err := st.SetLeaderSettings(ctx, "kv/0", map[string]string{"a": "1"}, nil)
	must(t, "SetLeaderSettings(kv/0) same", err)
	if v2 != v1 {
		t.Errorf("SetLeaderSettings of the same settings: version %d, want %d unchanged", v2, v1)
	}
	v3, err := st.SetLeaderSettings(ctx, "kv/0", map[string]string{"a": ""}, []string{"c"})
	must(t, "SetLeaderSettings(kv/0) delete", err)
	got = leadership(t, ctx, st, "kv")
	if v3 <= v1 || got.Version != v3 || !maps.Equal(got.Settings, map[string]string{"b": "2"}) {
		t.Fatalf("after a=\"\": Leadership(kv) = %+v, want b=2 at a version after %d", got, v1)
	}
	_, err = st.SetLeaderSettings(ctx, "kv/0", map[string]string{"big": strings.Repeat("x", state.MaxLeaderSettingsBytes)}, nil)
	wantErr(t, "SetLeaderSettings(too large)", err, state.ErrInvalid, "", "at most 64 KiB")
	_, err = st.SetLeaderSettings(ctx, "kv/0", map[string]string{"": "x"}, nil)
	wantErr(t, "SetLeaderSettings(empty key)", err, state.ErrInvalid, "", "key")

	// Its agent gone, the leader writes nothing, even before the elector
	// hands over.
	gone0()
	_, err = st.SetLeaderSettings(ctx, "kv/0", map[string]string{"a": "3"}, nil)
	wantErr(t, "SetLeaderSettings(kv/0), agent absent", err, state.ErrRefused, "L3", "no longer the leader")
	if got := leadership(t, ctx, st, "kv"); got.Version != v3 {
		t.Fatalf("a refused write moved the version: %+v, want %d", got, v3)
	}
}

// TestLeadershipGoesWithUnitAndService: removing the leader's unit deletes
// its leadership; removing the service deletes its leader settings.
func TestLeadershipGoesWithUnitAndService(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 2, state.Placement{})
	present(t, ctx, st, "0")
	present(t, ctx, st, "1")
	must(t, "ElectLeader(kv/0)", st.ElectLeader(ctx, "kv/0"))
	_, err := st.SetLeaderSettings(ctx, "kv/0", map[string]string{"a": "1"}, nil)
	must(t, "SetLeaderSettings", err)
	must(t, "DestroyUnit(kv/0)", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
	must(t, "EnsureUnitDead(kv/0)", st.EnsureUnitDead(ctx, "kv/0"))
	must(t, "RemoveUnit(kv/0)", st.RemoveUnit(ctx, "kv/0"))
	if v := leadership(t, ctx, st, "kv"); v.Leader != "" || v.Settings["a"] != "1" {
		t.Fatalf("Leadership(kv) = %+v, want no leader and the settings kept", v)
	}
	checkInvariants(t, st)
	must(t, "ElectLeader(kv/1)", st.ElectLeader(ctx, "kv/1"))
	must(t, "DestroyService(kv)", st.DestroyService(ctx, "kv"))
	if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	must(t, "unit agent kv/1", playUnitAgent(ctx, st, "kv/1"))
	if _, err := st.Leadership(ctx, "kv"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Leadership(kv) after the service went = %v, want ErrNotFound", err)
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	for k := range snap.Values {
		if strings.HasPrefix(k, state.LeadershipPrefix) || strings.HasPrefix(k, state.LeaderSettingsPrefix) {
			t.Errorf("%s outlives service kv", k)
		}
	}
}

// TestModelLeaders: the model, whole or selected, names each service's
// leader.
func TestModelLeaders(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "app", appEndpoints)
	addUnits(t, ctx, st, "kv", 2, state.Placement{})
	addUnits(t, ctx, st, "app", 1, state.Placement{})
	present(t, ctx, st, "1")
	must(t, "ElectLeader(kv/1)", st.ElectLeader(ctx, "kv/1"))
	m, err := st.Model(ctx)
	must(t, "Model", err)
	if want := map[string]string{"kv": "kv/1"}; !maps.Equal(m.Leaders, want) {
		t.Errorf("Model().Leaders = %v, want %v", m.Leaders, want)
	}
	for _, sel := range []state.Selection{{Services: []string{"kv"}}, {Units: []string{"kv/0"}}, {Services: []string{"app"}}} {
		m, err := st.SelectModel(ctx, sel)
		must(t, "SelectModel", err)
		want := map[string]string{"kv": "kv/1"}
		if sel.Services != nil && sel.Services[0] == "app" {
			want = map[string]string{}
		}
		if !maps.Equal(m.Leaders, want) {
			t.Errorf("SelectModel(%+v).Leaders = %v, want %v", sel, m.Leaders, want)
		}
	}
}
