package state_test

import (
	"sync"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// UpdateRolloutPolicy changes the fields its edit changes: two operators
// changing different fields at once both hold; a policy that does not
// validate, or no service, is refused and changes nothing.
func TestUpdateRolloutPolicy(t *testing.T) {
	st, ctx := newState(t)
	_, err := st.AddService(ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Endpoints: kvEndpoints})
	must(t, "AddService", err)
	for range 5 {
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				_, err := st.UpdateRolloutPolicy(ctx, "kv", func(p *pb.RolloutPolicy) error {
					if i == 0 {
						p.Canary++
					} else {
						p.MinHealthyMs += 1000
					}
					return nil
				})
				if err != nil {
					t.Errorf("UpdateRolloutPolicy: %v", err)
				}
			})
		}
		wg.Wait()
	}
	p, err := st.RolloutPolicy(ctx, "kv")
	must(t, "RolloutPolicy", err)
	if p.Canary != 5 || p.MinHealthyMs != 5000 || p.MaxParallel != "100%" || !p.AutoRevert {
		t.Errorf("after 5 changes of each field at once: %v, want canary 5, min-healthy 5s, the rest the defaults", p)
	}
	refusedUnchanged(t, ctx, st, "a max-parallel of 0", state.ErrInvalid, `max-parallel "0"`, func() error {
		_, err := st.UpdateRolloutPolicy(ctx, "kv", func(p *pb.RolloutPolicy) error { p.MaxParallel = "0"; return nil })
		return err
	})
	refusedUnchanged(t, ctx, st, "no service", state.ErrNotFound, "service nope not found", func() error {
		_, err := st.UpdateRolloutPolicy(ctx, "nope", func(p *pb.RolloutPolicy) error { return nil })
		return err
	})
}

// ReadRolloutView reads a service's rollout, units, their revisions,
// permits and statuses, and its gate's decisions, and none of another
// service's whose name starts the same.
func TestReadRolloutView(t *testing.T) {
	st, ctx := newState(t)
	for _, name := range []string{"kv", "kv-two"} {
		_, err := st.AddService(ctx, state.AddServiceArgs{Name: name, Charm: &pb.CharmRef{Name: "kv", Revision: 1}, Endpoints: kvEndpoints})
		must(t, "AddService", err)
		addUnits(t, ctx, st, name, 2, state.Placement{})
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, name+"/1", &pb.Status{Status: "idle"}))
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnit, name+"/1", &pb.Status{Status: "active", Message: name}))
		_, err = setConfig(ctx, st, name, "port", 81)
		must(t, "setConfig", err)
	}
	_, err := st.GrantPermits(ctx, "kv", 2, []string{"kv/0"})
	must(t, "GrantPermits", err)
	must(t, "RecordGateDecision", st.RecordGateDecision(ctx, "kv-two", &pb.GateDecision{Unit: "kv-two/0", Gate: "orly", From: 1, To: 2,
		Decision: pb.GateVerdict_GATE_VERDICT_DENY, Reason: "no"}))

	v, err := st.ReadRolloutView(ctx, "kv")
	must(t, "ReadRolloutView", err)
	if v.Rollout.Target != 2 || v.Rollout.Permits != 1 || v.Policy.MaxParallel != "100%" || len(v.Units) != 2 || v.Revision == 0 {
		t.Errorf("view = %+v, want the rollout to 2 with 1 permit, the default policy, 2 units", v)
	}
	if len(v.UnitRevisions) != 2 || v.UnitRevisions["kv/0"].GetTarget() != 2 || v.UnitRevisions["kv/1"].GetTarget() != 1 {
		t.Errorf("unit revisions = %v, want kv/0 moving to 2, kv/1 on 1", v.UnitRevisions)
	}
	if len(v.Permits) != 1 || v.Permits["kv/0"].GetRevision() != 2 {
		t.Errorf("permits = %v, want kv/0's for 2", v.Permits)
	}
	if len(v.Agents) != 1 || v.Agents["kv/1"].GetStatus() != "idle" || len(v.Workloads) != 1 || v.Workloads["kv/1"].GetMessage() != "kv" {
		t.Errorf("statuses = %v and %v, want kv/1's alone", v.Agents, v.Workloads)
	}
	if len(v.Decisions) != 0 {
		t.Errorf("decisions = %v, want none (kv-two's are its own)", v.Decisions)
	}
	v, err = st.ReadRolloutView(ctx, "kv-two")
	must(t, "ReadRolloutView", err)
	if len(v.Decisions) != 1 || v.Decisions[0].Reason != "no" || len(v.Permits) != 0 {
		t.Errorf("kv-two's view = %+v, want its decision and no permit", v)
	}
	_, err = st.ReadRolloutView(ctx, "nope")
	wantErr(t, "ReadRolloutView of no service", err, state.ErrNotFound, "", "service nope not found")

	// The model status reads holds every unit's revisions and every
	// service's rollout.
	m, err := st.Model(ctx)
	must(t, "Model", err)
	if len(m.UnitRevisions) != 4 || m.UnitRevisions["kv/0"].GetTarget() != 2 || len(m.Rollouts) != 2 || m.Rollouts["kv-two"].GetTarget() != 2 {
		t.Errorf("Model's revisions = %v and rollouts %v, want 4 units' and 2 services'", m.UnitRevisions, m.Rollouts)
	}
}
