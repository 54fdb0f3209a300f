package state_test

import (
	"maps"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestStatusCensus counts units by their agent's and workload's status,
// and as lost only the machine that reported, is not connected and did
// not say it stopped.
func TestStatusCensus(t *testing.T) {
	st, ctx := newState(t)
	ms, err := st.AddMachines(ctx, 4)
	must(t, "AddMachines", err)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 3, state.Placement{Unassigned: true})
	set := func(kind state.StatusKind, id, status string) {
		t.Helper()
		must(t, "SetStatus", st.SetStatus(ctx, kind, id, &pb.Status{Status: status}))
	}
	set(state.StatusUnitAgent, us[0].Name, "idle")
	set(state.StatusUnitAgent, us[1].Name, "error")
	set(state.StatusUnitAgent, us[2].Name, "idle")
	set(state.StatusUnit, us[0].Name, "active")
	set(state.StatusUnit, us[1].Name, "blocked")
	// Machine 0 is connected, 1 is lost, 2 said it stopped, 3 never
	// reported.
	set(state.StatusMachine, ms[0].Id, "started")
	set(state.StatusMachine, ms[1].Id, "started")
	set(state.StatusMachine, ms[2].Id, "down")
	_, err = st.Present(ctx, "machine-"+ms[0].Id, time.Minute)
	must(t, "Present", err)

	c, err := st.StatusCensus(ctx)
	must(t, "StatusCensus", err)
	if want := map[string]int{"idle": 2, "error": 1}; !maps.Equal(c.UnitAgents, want) {
		t.Errorf("UnitAgents = %v, want %v", c.UnitAgents, want)
	}
	if want := map[string]int{"active": 1, "blocked": 1}; !maps.Equal(c.Workloads, want) {
		t.Errorf("Workloads = %v, want %v", c.Workloads, want)
	}
	if c.MachinesLost != 1 {
		t.Errorf("MachinesLost = %d, want 1 (machine %s)", c.MachinesLost, ms[1].Id)
	}
}
