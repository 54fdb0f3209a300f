package controller_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func ptr[T any](v T) *T { return &v }

// TestRolloutPolicy: the policy starts as the defaults; a change sets
// only the fields it names, "none" clears the gate, and bad values, an
// empty change, an unknown service and a viewer are refused, changing
// nothing.
func TestRolloutPolicy(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 3})
	must(t, "Deploy", err)

	got, err := op.GetRolloutPolicy(ctx, &pb.GetRolloutPolicyRequest{Service: "kv"})
	must(t, "GetRolloutPolicy", err)
	if p := got.Policy; p.MaxParallel != "100%" || p.Canary != 0 || p.MinHealthyMs != 0 || p.DeadlineMs != 600_000 || !p.AutoRevert || p.Gate != "" {
		t.Errorf("the default policy = %v, want 100%%, canary 0, min-healthy 0, deadline 10m, auto-revert, no gate", p)
	}
	set, err := op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "kv", MaxParallel: ptr("50%"), Canary: ptr(int64(1))})
	must(t, "SetRolloutPolicy", err)
	if p := set.Policy; p.MaxParallel != "50%" || p.Canary != 1 || p.DeadlineMs != 600_000 || !p.AutoRevert {
		t.Errorf("SetRolloutPolicy = %v, want 50%%, canary 1, the rest the defaults", p)
	}
	set, err = op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "kv", Gate: ptr("orly"), AutoRevert: ptr(false),
		MinHealthyMs: ptr(int64(30_000)), DeadlineMs: ptr(int64(1_800_000))})
	must(t, "SetRolloutPolicy", err)
	if p := set.Policy; p.MaxParallel != "50%" || p.Canary != 1 || p.Gate != "orly" || p.AutoRevert || p.MinHealthyMs != 30_000 || p.DeadlineMs != 1_800_000 {
		t.Errorf("SetRolloutPolicy = %v, want 50%%, canary 1 kept; gate orly, no auto-revert, 30s, 30m", p)
	}
	set, err = op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "kv", Gate: ptr("none"), MaxParallel: ptr("2")})
	must(t, "SetRolloutPolicy --gate none", err)
	if p := set.Policy; p.Gate != "" || p.MaxParallel != "2" || p.Canary != 1 {
		t.Errorf("SetRolloutPolicy --gate none = %v, want no gate, 2, canary 1", p)
	}

	for _, c := range []struct {
		what string
		req  *pb.SetRolloutPolicyRequest
		code codes.Code
		msg  string
	}{
		{"no field", &pb.SetRolloutPolicyRequest{Service: "kv"}, codes.InvalidArgument, "no field of the rollout policy of kv given"},
		{"max-parallel 0", &pb.SetRolloutPolicyRequest{Service: "kv", MaxParallel: ptr("0")}, codes.InvalidArgument, `max-parallel "0": want a number of units of at least 1`},
		{"max-parallel 101%", &pb.SetRolloutPolicyRequest{Service: "kv", MaxParallel: ptr("101%")}, codes.InvalidArgument, "want a percentage from 1% to 100%"},
		{"canary -1", &pb.SetRolloutPolicyRequest{Service: "kv", Canary: ptr(int64(-1))}, codes.InvalidArgument, "canary -1: want 0 or more units"},
		{"min-healthy -1ms", &pb.SetRolloutPolicyRequest{Service: "kv", MinHealthyMs: ptr(int64(-1))}, codes.InvalidArgument, "min-healthy -1ms: want 0 or more"},
		{"deadline 0", &pb.SetRolloutPolicyRequest{Service: "kv", DeadlineMs: ptr(int64(0))}, codes.InvalidArgument, "deadline 0s: want more than 0"},
		{"deadline 1000h", &pb.SetRolloutPolicyRequest{Service: "kv", DeadlineMs: ptr(int64(3_600_000_000))}, codes.InvalidArgument, "deadline 1000h0m0s: at most 720h0m0s"},
		{"a bad gate", &pb.SetRolloutPolicyRequest{Service: "kv", Gate: ptr("Bad Gate")}, codes.InvalidArgument, `gate name "Bad Gate"`},
		{"no service", &pb.SetRolloutPolicyRequest{Service: "nope", Canary: ptr(int64(1))}, codes.NotFound, "service nope not found"},
		{"a bad name", &pb.SetRolloutPolicyRequest{Service: "Bad Name", Canary: ptr(int64(1))}, codes.InvalidArgument, ""},
	} {
		_, err := op.SetRolloutPolicy(ctx, c.req)
		wantCode(t, "SetRolloutPolicy with "+c.what, err, c.code, c.msg)
	}
	viewer := pb.NewOperatorServiceClient(e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	_, err = viewer.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "kv", Canary: ptr(int64(0))})
	wantCode(t, "SetRolloutPolicy as a viewer", err, codes.PermissionDenied, "")
	got, err = viewer.GetRolloutPolicy(ctx, &pb.GetRolloutPolicyRequest{Service: "kv"})
	must(t, "GetRolloutPolicy as a viewer", err)
	if p := got.Policy; p.Gate != "" || p.MaxParallel != "2" || p.Canary != 1 || p.MinHealthyMs != 30_000 || p.DeadlineMs != 1_800_000 || p.AutoRevert {
		t.Errorf("after the refusals the policy = %v, want it as last set", p)
	}
	_, err = op.GetRolloutPolicy(ctx, &pb.GetRolloutPolicyRequest{Service: "nope"})
	wantCode(t, "GetRolloutPolicy of no service", err, codes.NotFound, "service nope not found")

	log, _, _, err := e.st.ScanAudit(ctx, state.AuditQuery{}, 1000, 1000)
	must(t, "ScanAudit", err)
	found := false
	for _, en := range log {
		if en.Rpc == "SetRolloutPolicy" && en.Code == 0 && en.User == "admin" && slices.Contains(en.Targets, "service:kv") &&
			en.Summary == "set the rollout policy of kv: max-parallel 50%, canary 1" {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry of admin's SetRolloutPolicy of kv naming its fields")
	}
}

// TestRolloutSteering: a rollout's status counts and lists its units and
// the gate's decisions; pause, resume, promote and abort move it, each
// refused in a state that does not allow it, and a viewer may look but
// not steer. The rollout worker's steps (grants, decisions) are made on
// state directly.
func TestRolloutSteering(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 3})
	must(t, "Deploy", err)
	_, err = op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "kv", MaxParallel: ptr("50%"), Canary: ptr(int64(1))})
	must(t, "SetRolloutPolicy", err)

	st, err := op.RolloutStatus(ctx, &pb.RolloutStatusRequest{Service: "kv"})
	must(t, "RolloutStatus", err)
	if st.Rollout.State != pb.RolloutState_ROLLOUT_STATE_DONE || st.Counts.Updated != 3 || st.Counts.Units != 3 || st.PermitLimit != 2 || len(st.Units) != 3 {
		t.Errorf("RolloutStatus after deploy = %v, want done, 3/3 updated, permit limit 2, 3 units", st)
	}
	for _, verb := range []struct {
		name string
		call func() error
	}{
		{"PauseRollout", func() error { _, err := op.PauseRollout(ctx, &pb.PauseRolloutRequest{Service: "kv"}); return err }},
		{"ResumeRollout", func() error { _, err := op.ResumeRollout(ctx, &pb.ResumeRolloutRequest{Service: "kv"}); return err }},
		{"PromoteRollout", func() error { _, err := op.PromoteRollout(ctx, &pb.PromoteRolloutRequest{Service: "kv"}); return err }},
		{"AbortRollout", func() error { _, err := op.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: "kv"}); return err }},
	} {
		wantCode(t, verb.name+" of a done rollout", verb.call(), codes.FailedPrecondition, "rollout of kv is done: nothing to")
	}

	// Revision 2, its canary of one unit.
	_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"port": "9001"}})
	must(t, "SetConfig", err)
	granted, err := e.st.GrantPermits(ctx, "kv", 2, []string{"kv/0", "kv/1"})
	must(t, "GrantPermits", err)
	if len(granted) != 1 || granted[0] != "kv/0" {
		t.Fatalf("GrantPermits in a canary of 1 = %v, want kv/0 alone", granted)
	}
	must(t, "RecordGateDecision", e.st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: "kv/1", Machine: "1", Gate: "orly", From: 1, To: 2,
		Decision: pb.GateVerdict_GATE_VERDICT_DENY, Reason: "maintenance window"}))
	must(t, "RecordGateDecision", e.st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: "kv/0", Gate: "orly", From: 1, To: 2,
		Decision: pb.GateVerdict_GATE_VERDICT_ALLOW}))
	must(t, "SetStatus", e.st.SetStatus(ctx, state.StatusUnit, "kv/2", &pb.Status{Status: "active", Message: "serving"}))

	viewer := pb.NewOperatorServiceClient(e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	st, err = viewer.RolloutStatus(ctx, &pb.RolloutStatusRequest{Service: "kv"})
	must(t, "RolloutStatus as a viewer", err)
	ro, c := st.Rollout, st.Counts
	if ro.State != pb.RolloutState_ROLLOUT_STATE_CANARY || ro.Target != 2 || ro.Previous != 1 || ro.Permits != 1 || ro.CanaryGranted != 1 {
		t.Errorf("the rollout = %v, want a canary from 1 to 2 with its permit out", ro)
	}
	if c.Updated != 0 || c.Updating != 1 || c.Waiting != 1 || c.Denied != 1 || c.Failed != 0 || c.Units != 3 {
		t.Errorf("counts = %v, want 0 updated, 1 updating, 1 waiting, 1 denied", c)
	}
	if len(st.Units) != 3 {
		t.Fatalf("units = %v, want 3", st.Units)
	}
	u0, u1, u2 := st.Units[0], st.Units[1], st.Units[2]
	if u0.Name != "kv/0" || !u0.Permit || u0.Current != 1 || u0.Target != 2 {
		t.Errorf("kv/0 = %v, want moving from 1 to 2 with a permit", u0)
	}
	if u1.Permit || u1.Note != `gate "orly" denied: maintenance window` {
		t.Errorf("kv/1 = %v, want no permit and the gate's denial", u1)
	}
	if u2.Workload != "active" || u2.Message != "serving" || u2.Agent != "allocating" {
		t.Errorf("kv/2 = %v, want allocating, active: serving", u2)
	}
	if len(st.Decisions) != 2 || st.Decisions[0].Unit != "kv/0" || st.Decisions[1].Reason != "maintenance window" {
		t.Errorf("decisions = %v, want kv/0's allow first, then kv/1's denial", st.Decisions)
	}

	// ctl status: the service's spec revision and how far its rollout is,
	// each unit's revision and target.
	status, err := viewer.Status(ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	kv := status.Status.Services[0]
	if kv.SpecRevision != 2 || kv.Rollout.GetState() != "canary" || kv.Rollout.GetUpdated() != 0 || kv.Rollout.GetUnits() != 3 {
		t.Errorf("Status of kv = spec revision %d, rollout %v; want 2, canary 0/3", kv.SpecRevision, kv.Rollout)
	}
	for _, u := range kv.Units {
		want := int64(0)
		if u.Name == "kv/0" {
			want = 2
		}
		if u.Revision != 1 || u.TargetRevision != want {
			t.Errorf("Status of %s = revision %d target %d, want 1 and %d", u.Name, u.Revision, u.TargetRevision, want)
		}
	}

	_, err = viewer.PauseRollout(ctx, &pb.PauseRolloutRequest{Service: "kv"})
	wantCode(t, "PauseRollout as a viewer", err, codes.PermissionDenied, "")
	_, err = viewer.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: "kv"})
	wantCode(t, "AbortRollout as a viewer", err, codes.PermissionDenied, "")

	// Pause, resume (to the canary still), promote.
	p, err := op.PauseRollout(ctx, &pb.PauseRolloutRequest{Service: "kv"})
	must(t, "PauseRollout", err)
	if p.Rollout.State != pb.RolloutState_ROLLOUT_STATE_PAUSED || p.Rollout.Reason != "paused by an operator" {
		t.Errorf("PauseRollout = %v, want paused by an operator", p.Rollout)
	}
	_, err = op.PauseRollout(ctx, &pb.PauseRolloutRequest{Service: "kv"})
	wantCode(t, "PauseRollout twice", err, codes.FailedPrecondition, "rollout of kv is already paused")
	_, err = op.PromoteRollout(ctx, &pb.PromoteRolloutRequest{Service: "kv"})
	wantCode(t, "PromoteRollout of a paused one", err, codes.FailedPrecondition, "rollout of kv to revision 2 is paused: cannot promote it")
	r, err := op.ResumeRollout(ctx, &pb.ResumeRolloutRequest{Service: "kv"})
	must(t, "ResumeRollout", err)
	if r.Rollout.State != pb.RolloutState_ROLLOUT_STATE_CANARY {
		t.Errorf("ResumeRollout = %v, want back in its canary", r.Rollout)
	}
	_, err = op.ResumeRollout(ctx, &pb.ResumeRolloutRequest{Service: "kv"})
	wantCode(t, "ResumeRollout of a canary", err, codes.FailedPrecondition, "rollout of kv is canary, not paused: nothing to resume")
	pr, err := op.PromoteRollout(ctx, &pb.PromoteRolloutRequest{Service: "kv"})
	must(t, "PromoteRollout", err)
	if pr.Rollout.State != pb.RolloutState_ROLLOUT_STATE_ROLLING || pr.Rollout.Canary != 0 {
		t.Errorf("PromoteRollout = %v, want rolling, no canary", pr.Rollout)
	}
	_, err = op.PromoteRollout(ctx, &pb.PromoteRolloutRequest{Service: "kv"})
	wantCode(t, "PromoteRollout twice", err, codes.FailedPrecondition, "rollout of kv to revision 2 has no canary waiting: it is rolling")

	// Abort: revision 3 has revision 1's spec, rolled out without a canary.
	ab, err := op.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: "kv"})
	must(t, "AbortRollout", err)
	if ab.Aborted != 2 || ab.ReturnedTo != 1 || ab.Revision.Number != 3 || ab.Revision.Reason != "abort" || ab.Revision.By != "admin" {
		t.Errorf("AbortRollout = %v, want revision 3 by admin returning from 2 to 1", ab)
	}
	if ab.Rollout.Target != 3 || ab.Rollout.State != pb.RolloutState_ROLLOUT_STATE_ROLLING || ab.Rollout.Canary != 0 || ab.Rollout.Reverting != 2 {
		t.Errorf("the rollout after the abort = %v, want rolling to 3 without a canary, reverting 2", ab.Rollout)
	}
	cfg, err := op.GetConfig(ctx, &pb.GetConfigRequest{Service: "kv"})
	must(t, "GetConfig", err)
	if port := charm.FormatValue(cfg.Values["port"]); port == "9001" {
		t.Errorf("after the abort port=%s, want revision 1's", port)
	}
	_, err = op.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: "kv"})
	wantCode(t, "AbortRollout of an abort", err, codes.FailedPrecondition, "service kv is already at that spec (revision 3)")
	_, err = op.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: "nope"})
	wantCode(t, "AbortRollout of no service", err, codes.NotFound, "service nope not found")
	_, err = op.RolloutStatus(ctx, &pb.RolloutStatusRequest{Service: "Bad Name"})
	wantCode(t, "RolloutStatus of a bad name", err, codes.InvalidArgument, "")

	log, _, _, err := e.st.ScanAudit(ctx, state.AuditQuery{}, 1000, 1000)
	must(t, "ScanAudit", err)
	var summaries []string
	for _, en := range log {
		if en.Code == 0 && en.Changed {
			summaries = append(summaries, en.Summary)
		}
	}
	for _, want := range []string{"pause the rollout of kv", "resume the rollout of kv", "promote the rollout of kv", "abort the rollout of kv"} {
		if !slices.Contains(summaries, want) {
			t.Errorf("the audit log's changes %s lack %q", strings.Join(summaries, "; "), want)
		}
	}
}
