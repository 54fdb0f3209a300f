package state_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestCheckRevisionsFindsBrokenRecords feeds the invariant checker
// snapshots of a service mid-rollout, each broken one way, and wants
// each found.
func TestCheckRevisionsFindsBrokenRecords(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 3, state.Placement{Unassigned: true})
	must(t, "SetRolloutPolicy", st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "2", DeadlineMs: 1000}))
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	_, err = st.GrantPermits(ctx, "kv", 2, []string{us[0].Name, us[1].Name})
	must(t, "GrantPermits", err)
	must(t, "RecordGateDecision", st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: us[2].Name, Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_DENY}))
	base, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if err := state.CheckInvariants(base); err != nil {
		t.Fatalf("the model is broken before the test breaks it: %v", err)
	}
	edit := func(key string, m proto.Message, f func()) func(map[string][]byte) {
		return func(v map[string][]byte) {
			must(t, "unmarshal", proto.Unmarshal(v[key], m))
			f()
			b, _ := proto.Marshal(m)
			v[key] = b
		}
	}
	ro, rev, ur, p := &pb.Rollout{}, &pb.Revision{}, &pb.UnitRevision{}, &pb.Permit{}
	for _, tc := range []struct {
		name   string
		break_ func(map[string][]byte)
		want   string
	}{
		{"revision id", edit(state.RevisionKey("kv", 2), rev, func() { rev.Spec.Config["port"] = intValue(2) }), "is not its spec's"},
		{"revision after head", func(v map[string][]byte) { v[state.RevisionKey("kv", 3)] = v[state.RevisionKey("kv", 2)] },
			"holds revision 2 of kv"},
		{"config mirror", func(v map[string][]byte) { v[state.ServiceConfigKey("kv")] = nil }, "config of service kv is not its head revision 2's"},
		{"no rollout", func(v map[string][]byte) { delete(v, state.RolloutKey("kv")) }, "service kv has no rollout"},
		{"rollout without service", func(v map[string][]byte) { v[state.RolloutKey("ghost")] = v[state.RolloutKey("kv")] },
			"rollout of service ghost, which does not exist"},
		{"no unit-revision", func(v map[string][]byte) { delete(v, state.UnitRevisionKey(us[2].Name)) }, "has no unit-revision"},
		{"unit-revision without unit", func(v map[string][]byte) { v[state.UnitRevisionKey("kv/9")] = v[state.UnitRevisionKey(us[2].Name)] },
			"unit-revision of unit kv/9, which does not exist"},
		{"unit on a pruned revision", func(v map[string][]byte) { delete(v, state.RevisionKey("kv", 1)) }, "revision 1 of kv does not exist"},
		{"permit target", edit(state.UnitRevisionKey(us[0].Name), ur, func() { ur.Target = 1 }), "the unit targets 1"},
		{"permit of no unit", func(v map[string][]byte) { v[state.PermitKey("kv/9")] = v[state.PermitKey(us[0].Name)] },
			"for unit kv/9, which does not exist"},
		{"permit count", edit(state.RolloutKey("kv"), ro, func() { ro.Permits = 1 }), "counts 1 permits; 2 are out"},
		{"permit limit", edit(state.RolloutKey("kv"), ro, func() { ro.PermitLimit = 1 }), "over its limit of 1"},
		{"permit after target", edit(state.PermitKey(us[0].Name), p, func() { p.Revision = 3 }), "is for revision 3; the unit targets 2"},
		{"gate decisions", func(v map[string][]byte) {
			d := v[state.GateDecisionsPrefix("kv")+"00000000000000000001"]
			for i := range state.MaxGateDecisions + 1 {
				v[state.GateDecisionsPrefix("kv")+strings.Repeat("0", 17)+string(rune('a'+i%26))+string(rune('a'+i/26))] = d
			}
		}, "keeps 102 gate decisions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &state.Snapshot{Revision: base.Revision, Values: map[string][]byte{}}
			for k, v := range base.Values {
				snap.Values[k] = v
			}
			tc.break_(snap.Values)
			err := state.CheckInvariants(snap)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckInvariants = %v, want it to say %q", err, tc.want)
			}
		})
	}
}
