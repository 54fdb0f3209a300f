package unitagent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// unitRevision returns the unit's revisions as the controller has them.
func (w *world) unitRevision(unit string) *pb.UnitRevision {
	w.t.Helper()
	ur, err := w.env.State.UnitRevision(w.env.Ctx, unit)
	if err != nil {
		w.t.Fatal(err)
	}
	return ur
}

// target returns the service's rollout's target.
func (w *world) target(service string) int64 {
	w.t.Helper()
	ro, err := w.env.State.Rollout(w.env.Ctx, service)
	if err != nil {
		w.t.Fatal(err)
	}
	return ro.Target
}

// grant grants the units their permits to move to the service's target.
func (w *world) grant(service string, units ...string) {
	w.t.Helper()
	target := w.target(service)
	got, err := w.env.State.GrantPermits(w.env.Ctx, service, target, units)
	if err != nil || len(got) != len(units) {
		w.t.Fatalf("GrantPermits(%s, %d, %v) = %v, %v", service, target, units, got, err)
	}
}

// waitRevision waits until the controller has the unit on revision n.
func (w *world) waitRevision(unit string, n int64) {
	w.t.Helper()
	w.waitFor(unit+" to report revision "+string(rune('0'+n)), func() bool {
		ur := w.unitRevision(unit)
		return ur.Current == n && ur.Target == n
	})
}

// setColour changes kv's colour: a new revision, and its rollout.
func (w *world) setColour(colour string) int64 {
	w.t.Helper()
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"colour": colour}}); err != nil {
		w.t.Fatal(err)
	}
	return w.target("kv")
}

// TestConfigMovesWithThePermit: a configuration change reaches a unit
// only once it holds its permit; it then runs config-changed with the new
// configuration and reports the revision. A unit without one stays on
// the old revision, and its hooks still see the old configuration.
func TestConfigMovesWithThePermit(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 2, "server")
	for _, u := range []string{"kv/0", "kv/1"} {
		w.file(u, "probe-config-changed", "echo colour=$(config-get colour)")
		w.start(u)
	}
	for _, u := range []string{"kv/0", "kv/1"} {
		w.waitState(u, "running")
		w.waitRevision(u, 1)
	}
	target := w.setColour("blue")
	if target != 2 {
		t.Fatalf("target after the change = %d, want 2", target)
	}
	w.settled("kv/0", "kv/1")
	for _, u := range []string{"kv/0", "kv/1"} {
		if n := count(w.hooks(u), "config-changed"); n != 1 {
			t.Fatalf("%s ran config-changed %d times before any permit, want once (at install)", u, n)
		}
	}
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", 2)
	if got := w.lines("kv/0", "probe.log"); len(got) != 2 || got[1] != "colour=blue" {
		t.Errorf("kv/0's config-changed saw %v, want colour=red then colour=blue", got)
	}
	w.waitState("kv/0", "running")
	if ur := w.unitRevision("kv/1"); ur.Current != 1 || ur.Target != 1 {
		t.Errorf("kv/1 without a permit: %v, want on revision 1", ur)
	}
	if got := w.lines("kv/1", "probe.log"); len(got) != 1 || got[0] != "colour=red" {
		t.Errorf("kv/1's config-changed saw %v, want colour=red alone", got)
	}
	// Released, then a second unit moves.
	if err := w.env.State.ReleasePermits(w.env.Ctx, "kv", []string{"kv/0"}); err != nil {
		t.Fatal(err)
	}
	w.grant("kv", "kv/1")
	w.waitRevision("kv/1", 2)
	if err := w.env.State.ReleasePermits(w.env.Ctx, "kv", []string{"kv/1"}); err != nil {
		t.Fatal(err)
	}
	if err := w.env.State.CompleteRollout(w.env.Ctx, "kv", 2); err != nil {
		t.Fatal(err)
	}
}

// TestCharmChangeRunsUpgradeCharm: a revision with another charm has the
// unit unpack it, run upgrade-charm from it, then config-changed, and
// report; a revision back to the first charm does the same again.
func TestCharmChangeRunsUpgradeCharm(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "probe-upgrade-charm", `cat "$LIFELINE_CHARM_DIR/marker" 2>/dev/null || echo no marker`)
	w.start("kv/0")
	w.waitState("kv/0", "running")
	statetest.Roll(t, w.env.State)

	dir := writeCharm(t, kvMeta, "server")
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("second charm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := w.env.Upload(w.op, dir)
	ref := &pb.CharmRef{Name: second.Name, Revision: second.Revision, Sha256: second.Sha256}
	rev, err := w.env.State.ChangeSpec(w.env.Ctx, "kv", state.SpecChange{Reason: "refresh",
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return &pb.ServiceSpec{Charm: ref, Config: head.Spec.Config}, nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.waitRevision("kv/0", rev.Number)
	hooks := w.hooks("kv/0")
	up, cc := index(hooks, "upgrade-charm"), len(hooks)-1-index(reversed(hooks), "config-changed")
	if up < 0 || cc < up || index(hooks, "start") > up {
		t.Fatalf("kv/0 ran %v: want upgrade-charm after start, then config-changed", hooks)
	}
	if got := w.lines("kv/0", "probe.log"); len(got) != 1 || got[0] != "second charm" {
		t.Errorf("upgrade-charm saw %v, want the second charm's directory in place", got)
	}

	// Back to revision 1's spec (its charm and configuration together).
	back, err := w.env.State.RevertRollout(w.env.Ctx, "kv", "", "abort")
	if err != nil {
		// The rollout completed already: roll back as an operator would.
		first, ferr := w.env.State.ServiceRevision(w.env.Ctx, "kv", 1)
		if ferr != nil {
			t.Fatal(ferr)
		}
		back, err = w.env.State.ChangeSpec(w.env.Ctx, "kv", state.SpecChange{Reason: "rollback to 1",
			Next: func(*pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) { return first.Spec, first.Endpoints, nil }})
		if err != nil {
			t.Fatal(err)
		}
	}
	w.waitRevision("kv/0", back.Number)
	if got := w.lines("kv/0", "probe.log"); len(got) != 2 || got[1] != "no marker" {
		t.Errorf("upgrade-charm back saw %v, want the first charm's directory", got)
	}
	if n := count(w.hooks("kv/0"), "upgrade-charm"); n != 2 {
		t.Errorf("kv/0 ran upgrade-charm %d times, want 2", n)
	}
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// TestFailedMoveRevertedOut: a config-changed that fails on the new
// configuration puts the unit in error; the revert's newer target takes
// it out of the error, back to the old configuration, without resolved.
func TestFailedMoveRevertedOut(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "fail-colour", "blue")
	w.file("kv/0", "probe-config-changed", "echo colour=$(config-get colour)")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	w.setColour("blue")
	w.grant("kv", "kv/0")
	w.waitFor("kv/0 in error", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.State == "hook-error" && s.Agent == "error"
	})
	if ur := w.unitRevision("kv/0"); ur.Current != 1 || ur.Target != 2 {
		t.Fatalf("kv/0 in error: %v, want on 1, moving to 2", ur)
	}
	back, err := w.env.State.FailRollout(w.env.Ctx, "kv", 2, "kv/0 in error")
	if err != nil || back == nil {
		t.Fatalf("FailRollout = %v, %v; want an auto-revert", back, err)
	}
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", back.Number)
	w.waitState("kv/0", "running")
	if got := w.lines("kv/0", "probe.log"); len(got) != 2 || got[1] != "colour=red" {
		t.Errorf("kv/0's config-changed saw %v, want colour=red at install and after the revert", got)
	}
}

// TestKilledDuringAMoveResumes kills the agent while upgrade-charm runs:
// started again, it runs upgrade-charm again from the new charm, then
// config-changed, and reports.
func TestKilledDuringAMoveResumes(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	p := w.spawn("kv/0")
	w.waitState("kv/0", "running")
	w.file("kv/0", "sleep-upgrade-charm", "3")
	statetest.Roll(t, w.env.State)
	dir := writeCharm(t, kvMeta, "server")
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte("second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := w.env.Upload(w.op, dir)
	ref := &pb.CharmRef{Name: second.Name, Revision: second.Revision, Sha256: second.Sha256}
	rev, err := w.env.State.ChangeSpec(w.env.Ctx, "kv", state.SpecChange{Reason: "refresh",
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return &pb.ServiceSpec{Charm: ref, Config: head.Spec.Config}, nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.waitFor("upgrade-charm to start", func() bool { return count(w.lines("kv/0", "attempts.log"), "upgrade-charm") > 0 })
	p.kill()
	if err := os.Remove(filepath.Join(w.dir("kv/0"), "sleep-upgrade-charm")); err != nil {
		t.Fatal(err)
	}
	if ur := w.unitRevision("kv/0"); ur.Current != 1 {
		t.Fatalf("kv/0 killed during upgrade-charm: %v, want still on 1", ur)
	}
	w.spawn("kv/0")
	w.waitRevision("kv/0", rev.Number)
	hooks := w.hooks("kv/0")
	up := index(hooks, "upgrade-charm")
	if up < 0 || index(hooks[up:], "config-changed") < 0 {
		t.Fatalf("kv/0 ran %v: want upgrade-charm, then config-changed", hooks)
	}
	if n := count(w.lines("kv/0", "attempts.log"), "upgrade-charm"); n != 2 {
		t.Errorf("upgrade-charm ran %d times, want 2 (the killed run, then again)", n)
	}
	if data, err := os.ReadFile(filepath.Join(w.dir("kv/0"), "charm", "marker")); err != nil || string(data) != "second\n" {
		t.Errorf("the charm directory's marker = %q, %v; want the second charm", data, err)
	}
}

// TestAgentOfBeforeRevisions: an agent whose local state holds no
// revision (written by a version before revisions) takes its unit's
// current revision as the one it runs, runs config-changed once more with
// its configuration, and goes on; it installs nothing again.
func TestAgentOfBeforeRevisions(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "probe-config-changed", "echo colour=$(config-get colour)")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	w.stop("kv/0")
	dir := w.dir("kv/0")
	legacy := `{"format":3,"seq":1,"state":{"state":"running","charm":"kv/1","config_version":5,"started":true}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "state.log")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	w.start("kv/0")
	w.waitFor("config-changed to run again", func() bool { return count(w.hooks("kv/0"), "config-changed") == 2 })
	w.waitState("kv/0", "running")
	if got := w.lines("kv/0", "probe.log"); len(got) != 2 || got[1] != "colour=red" {
		t.Errorf("config-changed saw %v, want colour=red twice", got)
	}
	if n := count(w.hooks("kv/0"), "install"); n != 1 {
		t.Errorf("kv/0 ran install %d times, want once", n)
	}
	if ur := w.unitRevision("kv/0"); ur.Current != 1 || ur.Target != 1 {
		t.Errorf("kv/0's revisions = %v, want on 1", ur)
	}
}
