package unitagent_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestLeadershipHooksAndTools: the elected unit runs leader-elected, the
// other leader-settings-changed, each after install and before
// config-changed (Juju's order); is-leader tells them apart, the leader's
// leader-set reaches the other, whose own leader-set is refused with
// Juju's words; when the leader's machine agent goes and the other is
// elected, it runs leader-elected and the old leader
// leader-settings-changed.
func TestLeadershipHooksAndTools(t *testing.T) {
	w := newWorld(t)
	dir := writeCharm(t, kvMeta)
	for _, h := range []string{"leader-elected", "leader-settings-changed"} {
		if err := os.WriteFile(filepath.Join(dir, "hooks", h), []byte(recorder), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 2}); err != nil {
		t.Fatal(err)
	}
	st := w.env.State
	gone := presentAndElect(t, w, "kv/0", "kv/1")
	w.file("kv/0", "probe-leader-elected", "is-leader\nleader-set from=kv0 gone=\n")
	w.file("kv/1", "probe-leader-settings-changed", "is-leader\nleader-get from\nleader-set from=kv1\n")
	w.start("kv/0")
	w.start("kv/1")
	w.waitHook("kv/0", "start")
	w.waitHook("kv/1", "start")
	want := func(unit string, order ...string) {
		t.Helper()
		hooks := w.hooks(unit)
		last := -1
		for _, h := range order {
			i := index(hooks, h)
			if i <= last {
				t.Fatalf("%s's hooks = %v, want %v in that order", unit, hooks, order)
			}
			last = i
		}
	}
	want("kv/0", "install", "leader-elected", "config-changed", "start")
	want("kv/1", "install", "leader-settings-changed", "config-changed", "start")
	if i := index(w.hooks("kv/0"), "leader-settings-changed"); i >= 0 {
		t.Errorf("the leader ran leader-settings-changed: %v", w.hooks("kv/0"))
	}
	if got := w.lines("kv/0", "probe.log"); !slices.Equal(got, []string{"True"}) {
		t.Errorf("kv/0's leader-elected printed %q, want True", got)
	}
	// kv/1 hears of kv/0's leader-set: a leader-settings-changed that
	// reads it (the first may have run before it).
	w.waitFor("kv/1 to read kv/0's leader settings", func() bool {
		return slices.Contains(w.lines("kv/1", "probe.log"), "kv0")
	})
	probe := w.lines("kv/1", "probe.log")
	if probe[0] != "False" {
		t.Errorf("kv/1's is-leader printed %q, want False", probe[0])
	}
	if !slices.Contains(probe, "leader-set: cannot write leadership settings: cannot write settings: not the leader") {
		t.Errorf("kv/1's leader-set printed %q, want Juju's refusal", probe)
	}
	v, err := st.Leadership(w.env.Ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(v.Settings, map[string]string{"from": "kv0"}) {
		t.Errorf("leader settings = %v, want only from=kv0", v.Settings)
	}

	// kv/0's machine agent goes; kv/1 is elected.
	gone["kv/0"]()
	if err := st.ElectLeader(w.env.Ctx, "kv/1"); err != nil {
		t.Fatal(err)
	}
	w.waitHook("kv/1", "leader-elected")
	w.waitHook("kv/0", "leader-settings-changed")
}

// TestUpdateStatusRuns: a started unit runs update-status again and
// again at its interval.
func TestUpdateStatusRuns(t *testing.T) {
	w := newWorld(t)
	w.updateStatus = 300 * time.Millisecond
	dir := writeCharm(t, kvMeta)
	if err := os.WriteFile(filepath.Join(dir, "hooks", "update-status"), []byte(recorder), 0o755); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	w.start("kv/0")
	w.waitFor("kv/0 to run update-status twice", func() bool {
		n := 0
		for _, h := range w.hooks("kv/0") {
			if strings.HasPrefix(h, "update-status") {
				n++
			}
		}
		return n >= 2
	})
	if i, s := index(w.hooks("kv/0"), "update-status"), index(w.hooks("kv/0"), "start"); i < s {
		t.Errorf("update-status ran before start: %v", w.hooks("kv/0"))
	}
}

// TestKilledDuringLeaderElected: an agent killed while leader-elected
// runs runs it again when restarted (a failed attempt), then the rest in
// order; restarted once it ran, it does not run it again.
func TestKilledDuringLeaderElected(t *testing.T) {
	w := newWorld(t)
	dir := writeCharm(t, kvMeta)
	if err := os.WriteFile(filepath.Join(dir, "hooks", "leader-elected"), []byte(recorder), 0o755); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	unit, err := w.env.State.Unit(w.env.Ctx, "kv/0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.env.State.Present(w.env.Ctx, names.MachineTag(unit.MachineId), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := w.env.State.ElectLeader(w.env.Ctx, "kv/0"); err != nil {
		t.Fatal(err)
	}
	w.file("kv/0", "sleep-leader-elected", "3")
	agent := w.spawn("kv/0")
	w.waitFor("leader-elected to start", func() bool { return index(w.lines("kv/0", "attempts.log"), "leader-elected") >= 0 })
	agent.kill()
	if err := os.Remove(filepath.Join(w.dir("kv/0"), "sleep-leader-elected")); err != nil {
		t.Fatal(err)
	}
	agent = w.spawn("kv/0")
	w.waitState("kv/0", "running")
	count := func(lines []string, hook string) int {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, hook) {
				n++
			}
		}
		return n
	}
	if n := count(w.lines("kv/0", "attempts.log"), "leader-elected"); n != 2 {
		t.Errorf("leader-elected attempted %d times, want 2: the killed run and its retry", n)
	}
	hooks := w.hooks("kv/0")
	if i, j := index(hooks, "leader-elected"), index(hooks, "config-changed"); i < 0 || j < i || index(hooks, "install") > i {
		t.Errorf("hooks = %v, want install, leader-elected, config-changed in that order", hooks)
	}
	agent.kill()
	w.spawn("kv/0")
	w.waitState("kv/0", "running")
	w.settled("kv/0")
	if n := count(w.hooks("kv/0"), "leader-elected"); n != 1 {
		t.Errorf("leader-elected ran %d times after a restart once it had run, want 1: %v", n, w.hooks("kv/0"))
	}
}

// TestPeerServiceSettingsReachFollowers: in a peer relation, the leader's
// relation-set --app runs relation-changed (no remote unit,
// JUJU_REMOTE_APP its own service) on the other units, not on the leader,
// as in Juju: the leader wrote them. Once it no longer leads, it runs it.
func TestPeerServiceSettingsReachFollowers(t *testing.T) {
	w := newWorld(t)
	c := w.env.Upload(w.op, writeCharm(t, "name: kv\npeers:\n  ring: ring\n", "ring"))
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 2}); err != nil {
		t.Fatal(err)
	}
	st := w.env.State
	gone := presentAndElect(t, w, "kv/0", "kv/1")
	w.file("kv/0", "probe-ring-relation-joined", "relation-set --app mode=ring\n")
	w.file("kv/1", "probe-ring-relation-changed", `[ -n "$JUJU_REMOTE_UNIT" ] || echo "$JUJU_REMOTE_APP $(relation-get --app mode)"`+"\n")
	w.start("kv/0")
	w.start("kv/1")
	w.waitFor("kv/1 to run relation-changed for kv's settings", func() bool {
		return slices.Contains(w.lines("kv/1", "probe.log"), "kv ring")
	})
	// kv/0 has joined kv/1 (which wrote the settings) and seen its
	// settings; it would have run the service's relation-changed by now.
	w.waitHook("kv/0", "ring-relation-changed ring:")
	w.waitFor("kv/0 idle", func() bool { s := w.agentStatus("kv/0"); return s != nil && s.Agent == "idle" })
	for _, h := range w.hooks("kv/0") {
		if strings.HasPrefix(h, "ring-relation-changed ") && strings.HasSuffix(h, " -") {
			t.Errorf("the leader kv/0 ran %q for its own service's settings: %v", h, w.hooks("kv/0"))
		}
	}

	// kv/0 no longer leads: it runs relation-changed for the settings
	// it had not been told of as a follower.
	gone["kv/0"]()
	if err := st.ElectLeader(w.env.Ctx, "kv/1"); err != nil {
		t.Fatal(err)
	}
	w.waitHook("kv/0", "ring-relation-changed ring:0 -")
}

// presentAndElect keeps the machines of units present, as their machine
// agents would (the world runs none), and makes the first unit its
// service's leader. It returns, by unit, what ends its machine's presence.
func presentAndElect(t *testing.T, w *world, units ...string) map[string]func() {
	t.Helper()
	st := w.env.State
	gone := map[string]func(){}
	for _, u := range units {
		unit, err := st.Unit(w.env.Ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		p, err := st.Present(w.env.Ctx, names.MachineTag(unit.MachineId), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		gone[u] = p.Close
	}
	if err := st.ElectLeader(w.env.Ctx, units[0]); err != nil {
		t.Fatal(err)
	}
	return gone
}
