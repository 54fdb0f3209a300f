package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func sampleRollout() *pb.RolloutStatusResponse {
	return &pb.RolloutStatusResponse{
		Service: "kv", PermitLimit: 2, Revision: 99,
		Rollout: &pb.Rollout{Service: "kv", Head: 4, Target: 4, Previous: 3, State: pb.RolloutState_ROLLOUT_STATE_ROLLING, Permits: 2,
			DeadlineUnixNano: time.Unix(1000, 0).UnixNano()},
		Policy: &pb.RolloutPolicy{MaxParallel: "20%", DeadlineMs: 600_000, AutoRevert: true, Gate: "orly"},
		Counts: &pb.RolloutCounts{Units: 10, Updated: 3, Updating: 2, Waiting: 5},
		Units: []*pb.RolloutUnit{
			{Name: "kv/0", Machine: "0", Current: 4, Target: 4, Agent: "idle", Workload: "active"},
			{Name: "kv/1", Machine: "1", Current: 3, Target: 4, Permit: true, Agent: "executing", Workload: "maintenance", Message: "upgrading"},
			{Name: "kv/2", Machine: "2", Current: 3, Target: 3, Agent: "idle", Workload: "active", Note: `gate "orly" denied: maintenance window`},
		},
		UnitsLeftOut: 7,
		Decisions: []*pb.GateDecision{
			{Unit: "kv/2", Gate: "orly", From: 3, To: 4, Decision: pb.GateVerdict_GATE_VERDICT_DENY, Reason: "maintenance window", RetryAfterMs: 30_000},
			{Unit: "kv/1", Gate: "orly", From: 3, To: 4, Decision: pb.GateVerdict_GATE_VERDICT_ALLOW},
		},
	}
}

func TestRenderRollout(t *testing.T) {
	resp := sampleRollout()
	var b bytes.Buffer
	if err := renderRollout(&b, resp, formatTabular, time.Unix(940, 0)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if want := "kv: rev 3→4 rolling, 3/10 updated, 2 updating, 5 waiting, 0 denied, 0 failed, permits 2/2"; lines[0] != want {
		t.Errorf("header = %q, want %q", lines[0], want)
	}
	for _, want := range []string{
		"(in 1m0s)\n",
		"Policy: max-parallel 20%, canary 0, min-healthy 0s, deadline 10m, auto-revert true, gate orly\n",
		"Unit  Machine  Rev  Permit  Agent      Workload     Note\n",
		"kv/0  0        4    -       idle       active\n",
		"kv/1  1        3→4  yes     executing  maintenance  upgrading\n",
		"kv/2  2        3    -       idle       active       gate \"orly\" denied: maintenance window\n",
		"... and 7 more units (counted above)\n",
		"Gate decisions, newest first:\n",
		"kv/2  orly  deny      3→4  maintenance window\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl rollout status:\n%s\nwant it to say %q", out, want)
		}
	}
	resp.Rollout.State, resp.Rollout.Reason = pb.RolloutState_ROLLOUT_STATE_FAILED, "unit kv/1 in error"
	b.Reset()
	if err := renderRollout(&b, resp, formatTabular, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "kv: rev 3→4 failed, ") || !strings.Contains(b.String(), "\nReason: unit kv/1 in error\n") {
		t.Errorf("a failed rollout's status:\n%s\nwant failed and its reason", b.String())
	}
	resp.Rollout.State = pb.RolloutState_ROLLOUT_STATE_DONE
	b.Reset()
	if err := renderRollout(&b, resp, formatTabular, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "kv: rev 4 done, ") || strings.Contains(b.String(), "Deadline") {
		t.Errorf("a done rollout's status:\n%s\nwant rev 4 done, no deadline", b.String())
	}

	b.Reset()
	if err := renderRollout(&b, sampleRollout(), formatJSON, time.Time{}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Service, State string
		Revision       int64
		Previous       int64
		PermitLimit    int64 `json:"permit_limit"`
		Counts         map[string]int
		Policy         map[string]any
		Units          []map[string]any
		UnitsLeftOut   int `json:"units_left_out"`
		Decisions      []map[string]any
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v in %s", err, b.String())
	}
	if doc.Service != "kv" || doc.State != "rolling" || doc.Revision != 4 || doc.Previous != 3 || doc.PermitLimit != 2 ||
		doc.Counts["updated"] != 3 || doc.Counts["units"] != 10 || doc.Policy["deadline"] != "10m" || doc.Policy["gate"] != "orly" ||
		len(doc.Units) != 3 || doc.Units[1]["permit"] != true || doc.UnitsLeftOut != 7 ||
		len(doc.Decisions) != 2 || doc.Decisions[0]["decision"] != "deny" || doc.Decisions[0]["retry_after"] != "30s" {
		t.Errorf("json = %s", b.String())
	}
}

func TestShortDuration(t *testing.T) {
	for ms, want := range map[int64]string{0: "0s", 1500: "1.5s", 30_000: "30s", 600_000: "10m", 5_400_000: "1h30m",
		3_600_000: "1h", 3_601_000: "1h0m1s", 90_000: "1m30s"} {
		if got := shortDuration(ms); got != want {
			t.Errorf("shortDuration(%d) = %q, want %q", ms, got, want)
		}
	}
}

func TestRenderStatusRevisions(t *testing.T) {
	st := sampleStatus()
	for _, s := range st.Services {
		s.SpecRevision = 1
		for _, u := range s.Units {
			u.Revision = 1
		}
		if s.Name == "kv" {
			s.SpecRevision = 4
			s.Rollout = &pb.ServiceRollout{State: "rolling", Target: 4, Previous: 3, Updated: 1, Units: 2}
			s.Units[0].Revision, s.Units[0].TargetRevision = 3, 4
			s.Units[1].Revision = 4
		}
	}
	var b bytes.Buffer
	if err := renderStatus(&b, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Service  Charm   Rev  Spec         Life", "kv       kv      3    rev 4 (1/2)  alive",
		"app      app     1    rev 1        alive", "Workload  Spec     Address", "kv/0        alive  0        idle       running  active    rev 4",
		"kv/1        dying  2        executing  running  active    rev 3→4"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ctl status:\n%s\nwant it to say %q", b.String(), want)
		}
	}
	b.Reset()
	if err := renderStatus(&b, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	checkShape(t, doc)
	kv := doc["services"].(map[string]any)["kv"].(map[string]any)
	ro, _ := kv["rollout"].(map[string]any)
	if kv["spec_revision"] != float64(4) || kv["revision"] != float64(3) || ro["state"] != "rolling" || ro["updated"] != float64(1) || ro["units"] != float64(2) {
		t.Errorf("service kv = %v, want spec_revision 4, the charm's revision 3, rollout rolling 1/2", kv)
	}
	kv1 := kv["units"].(map[string]any)["kv/1"].(map[string]any)
	if kv1["revision"] != float64(3) || kv1["target_revision"] != float64(4) {
		t.Errorf("kv/1 = %v, want revision 3, target_revision 4", kv1)
	}
	app := doc["services"].(map[string]any)["app"].(map[string]any)
	if _, ok := app["rollout"]; ok {
		t.Errorf("service app = %v, want no rollout (done)", app)
	}
}

// TestRolloutCommands runs set-rollout and rollout against a controller
// with no agents: the rollout stays where the operator puts it.
func TestRolloutCommands(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
	defer s.ok(t, "kill-controller")
	s.ok(t, "deploy", "testdata/kv", "-n", "2")

	if out := s.ok(t, "set-rollout", "kv"); out != "rollout policy of kv: max-parallel 100%, canary 0, min-healthy 0s, deadline 10m, auto-revert true, gate none\n" {
		t.Errorf("ctl set-rollout kv = %q, want the defaults", out)
	}
	out := s.ok(t, "set-rollout", "kv", "--max-parallel", "50%", "--canary", "1", "--deadline", "30m", "--gate", "orly", "--auto-revert=false")
	if out != "rollout policy of kv: max-parallel 50%, canary 1, min-healthy 0s, deadline 30m, auto-revert false, gate orly\n" {
		t.Errorf("ctl set-rollout = %q", out)
	}
	if out := s.ok(t, "set-rollout", "kv", "--gate", "none", "--min-healthy", "5s"); !strings.HasSuffix(out, "min-healthy 5s, deadline 30m, auto-revert false, gate none\n") {
		t.Errorf("ctl set-rollout --gate none = %q, want the rest kept", out)
	}
	s.fails(t, 1, []string{`ctl: max-parallel "0": want a number of units of at least 1, or a percentage`}, "set-rollout", "kv", "--max-parallel", "0")
	s.fails(t, 1, []string{"ctl: service nope not found"}, "set-rollout", "nope", "--canary", "1")
	s.fails(t, 1, []string{"ctl: rollout of kv is done: nothing to pause"}, "rollout", "pause", "kv")

	// Revision 2 waits in its canary: no agent moves a unit.
	s.ok(t, "config", "kv", "port=9001")
	out = s.ok(t, "rollout", "status", "kv")
	if want := "kv: rev 1→2 canary, 0/2 updated, 0 updating, 2 waiting, 0 denied, 0 failed, permits 0/1\n"; !strings.HasPrefix(out, want) {
		t.Errorf("ctl rollout status:\n%s\nwant it to start %q", out, want)
	}
	if !strings.Contains(out, "Canary: 0 of 1 units given a permit; ctl rollout promote kv moves the rest") {
		t.Errorf("ctl rollout status:\n%s\nwant the canary explained", out)
	}
	doc := s.statusJSON(t)
	kv := object(t, doc, "services", "kv")
	if kv["spec_revision"] != float64(2) || object(t, doc, "services", "kv", "rollout")["state"] != "canary" ||
		object(t, doc, "services", "kv", "units", "kv/0")["revision"] != float64(1) {
		t.Errorf("ctl status --format json's kv = %v, want spec revision 2, its canary, kv/0 on 1", kv)
	}
	if out := s.ok(t, "status"); !strings.Contains(out, "rev 2 (0/2 canary)") || !strings.Contains(out, "rev 1") {
		t.Errorf("ctl status:\n%s\nwant kv at rev 2 (0/2 canary), its units at rev 1", out)
	}

	if out := s.ok(t, "rollout", "pause", "kv"); !strings.Contains(out, "kv: rollout to revision 2 paused") {
		t.Errorf("ctl rollout pause = %q", out)
	}
	s.fails(t, 1, []string{"ctl: rollout of kv is already paused"}, "rollout", "pause", "kv")
	if out := s.ok(t, "rollout", "resume", "kv"); !strings.Contains(out, "kv: rollout to revision 2 resumed: canary") {
		t.Errorf("ctl rollout resume = %q", out)
	}
	if out := s.ok(t, "rollout", "promote", "kv"); !strings.Contains(out, "kv: rollout to revision 2 promoted") {
		t.Errorf("ctl rollout promote = %q", out)
	}
	s.fails(t, 1, []string{"ctl: rollout of kv to revision 2 has no canary waiting: it is rolling"}, "rollout", "promote", "kv")
	out = s.ok(t, "rollout", "abort", "kv")
	if want := "kv: rollout to revision 2 aborted: revision 3 returns to revision 1's spec, rolling out without a canary\n"; out != want {
		t.Errorf("ctl rollout abort = %q, want %q", out, want)
	}
	if out := s.ok(t, "config", "kv", "port"); out == "9001\n" {
		t.Errorf("after the abort port = %q, want revision 1's", out)
	}
	var rdoc struct {
		Revision  int64 `json:"revision"`
		Reverting int64 `json:"reverting"`
		State     string
	}
	if err := json.Unmarshal([]byte(s.ok(t, "rollout", "status", "kv", "--format", "json")), &rdoc); err != nil {
		t.Fatal(err)
	}
	if rdoc.Revision != 3 || rdoc.Reverting != 2 || rdoc.State != "rolling" {
		t.Errorf("ctl rollout status --format json = %+v, want rolling to 3, reverting 2", rdoc)
	}

	// --watch draws once, then again only on a change; an interrupt ends
	// it with status 0.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := s.command(ctx, "rollout", "status", "kv", "--watch")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	s.ok(t, "rollout", "pause", "kv")
	time.Sleep(2500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("ctl rollout status --watch, interrupted: %v, want status 0\n%s", err, stdout.String())
	}
	if n := strings.Count(stdout.String(), "kv: rev 1→3 "); n != 2 || !strings.Contains(stdout.String(), "kv: rev 1→3 paused") {
		t.Errorf("ctl rollout status --watch drew %d statuses:\n%s\nwant 2, the second paused", n, stdout.String())
	}
}
