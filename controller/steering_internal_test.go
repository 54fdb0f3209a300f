package controller

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A rollout's status stays bounded whatever the service: at most
// maxStatusUnits units (the rest counted, every unit in the counts),
// their notes and messages cut, at most MaxGateDecisions decisions
// newest first, and the answer under gRPC's 4 MiB.
func TestRolloutStatusBounded(t *testing.T) {
	const units = 10_000
	long := strings.Repeat("é", 2000) // 4,000 bytes
	v := &state.RolloutView{
		Rollout: &pb.Rollout{Service: "kv", Head: 2, Target: 2, Previous: 1, State: pb.RolloutState_ROLLOUT_STATE_ROLLING, Permits: 1},
		Policy:  state.DefaultRolloutPolicy(), UnitRevisions: map[string]*pb.UnitRevision{}, Permits: map[string]*pb.Permit{},
		Agents: map[string]*pb.Status{}, Workloads: map[string]*pb.Status{},
	}
	for i := range units {
		name := fmt.Sprintf("kv/%d", i)
		v.Units = append(v.Units, &pb.Unit{Name: name, Service: "kv", MachineId: fmt.Sprint(i / 10)})
		v.UnitRevisions[name] = &pb.UnitRevision{Current: 1, Target: 1, Note: long}
		v.Workloads[name] = &pb.Status{Status: "active", Message: long}
	}
	v.UnitRevisions["kv/0"] = &pb.UnitRevision{Current: 1, Target: 2}
	v.Permits["kv/0"] = &pb.Permit{Revision: 2}
	v.UnitRevisions["kv/1"] = &pb.UnitRevision{Current: 2, Target: 2}
	v.UnitRevisions["kv/2"] = &pb.UnitRevision{Current: 1, Target: 1, Note: `gate "orly" denied: no`}
	v.UnitRevisions["kv/3"] = &pb.UnitRevision{Current: 1, Target: 2}
	v.Agents["kv/3"] = &pb.Status{Status: "error", Message: "hook failed"}
	for i := range 150 {
		v.Decisions = append(v.Decisions, &pb.GateDecision{Unit: "kv/2", Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_DENY,
			Reason: strings.Repeat("x", state.MaxGateReasonBytes), AtUnixNano: int64(i)})
	}
	resp := rolloutStatus("kv", v)
	c := resp.Counts
	if c.Units != units || c.Updated != 1 || c.Updating != 1 || c.Denied != 1 || c.Failed != 1 || c.Waiting != units-4 {
		t.Errorf("counts = %v, want 1 each updated, updating, denied, failed, the rest waiting", c)
	}
	if len(resp.Units) > maxStatusUnits || int(resp.UnitsLeftOut)+len(resp.Units) != units || resp.UnitsLeftOut == 0 {
		t.Errorf("%d units listed, %d left out; want at most %d listed, all counted", len(resp.Units), resp.UnitsLeftOut, maxStatusUnits)
	}
	if size := proto.Size(resp); size > 4<<20-64<<10 {
		t.Errorf("the answer is %d bytes, want well under 4 MiB", size)
	}
	for _, u := range resp.Units {
		if len(u.Note) > maxStatusText || len(u.Message) > maxStatusText {
			t.Fatalf("unit %s: note of %d bytes, message of %d, want at most %d", u.Name, len(u.Note), len(u.Message), maxStatusText)
		}
	}
	if len(resp.Decisions) != state.MaxGateDecisions || resp.Decisions[0].AtUnixNano != 149 {
		t.Errorf("%d decisions, the first at %d; want %d, newest first", len(resp.Decisions), resp.Decisions[0].AtUnixNano, state.MaxGateDecisions)
	}
	t.Logf("10,000 units: %d listed, %d left out, %d bytes", len(resp.Units), resp.UnitsLeftOut, proto.Size(resp))
}
