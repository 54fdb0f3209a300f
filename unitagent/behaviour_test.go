package unitagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/unitagent"
)

func relate(t *testing.T, w *world, a, b string) *pb.Relation {
	t.Helper()
	resp, err := w.op.AddRelation(w.env.Ctx, &pb.AddRelationRequest{Endpoints: []string{a, b}})
	if err != nil {
		t.Fatalf("AddRelation(%s, %s): %v", a, b, err)
	}
	return resp.Relation
}

// TestSettingsExchange has kv publish host and port in its relation
// settings and app read them in relation-changed; a later change reaches
// app too, coalesced to the latest.
func TestSettingsExchange(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	relate(t, w, "app", "kv")
	w.file("kv/0", "set-settings", "7000")
	w.file("app/0", "get-settings", "")
	w.start("kv/0")
	w.start("app/0")
	w.waitFor("app/0 to read port 7000", func() bool {
		return index(w.lines("app/0", "settings.log"), "kv/0 host=10.0.0.kv-0 port=7000") >= 0
	})
	// A change of kv/0's settings: rewritten by its next relation hook.
	w.stop("app/0")
	w.file("kv/0", "set-settings", "7001")
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"colour": "blue"}}); err != nil {
		t.Fatal(err)
	}
	// kv/0 runs config-changed, which sets nothing; make it run a
	// relation hook: a second app unit joins.
	if _, err := w.op.AddUnits(w.env.Ctx, &pb.AddUnitsRequest{Service: "app", NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	w.start("app/1")
	w.waitFor("kv/0 to set port 7001", func() bool {
		vals, _, err := w.env.State.Settings(w.env.Ctx, 0, "kv/0")
		return err == nil && vals["port"] == "7001"
	})
	w.file("kv/0", "set-settings", "7002")
	if _, err := w.op.AddUnits(w.env.Ctx, &pb.AddUnitsRequest{Service: "app", NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	w.start("app/2")
	w.waitFor("kv/0 to set port 7002", func() bool {
		vals, _, err := w.env.State.Settings(w.env.Ctx, 0, "kv/0")
		return err == nil && vals["port"] == "7002"
	})
	// app/0 comes back after two changes: one relation-changed, with the
	// latest.
	before := len(w.lines("app/0", "settings.log"))
	w.start("app/0")
	w.waitFor("app/0 to read port 7002", func() bool {
		return index(w.lines("app/0", "settings.log"), "kv/0 host=10.0.0.kv-0 port=7002") >= 0
	})
	got := w.lines("app/0", "settings.log")[before:]
	if len(got) != 1 {
		t.Errorf("app/0 read %v after coming back, want one coalesced relation-changed with port 7002", got)
	}
}

// TestOneWatchStreamAnAgent: a unit agent follows its unit, service,
// revision, relations, relation and scope, resolved mark and subordinates
// on one WatchMany stream.
func TestOneWatchStreamAnAgent(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	relate(t, w, "app", "kv")
	w.file("kv/0", "set-settings", "7000")
	w.file("app/0", "get-settings", "")
	w.start("kv/0")
	w.start("app/0")
	w.waitFor("app/0 to read port 7000", func() bool {
		return index(w.lines("app/0", "settings.log"), "kv/0 host=10.0.0.kv-0 port=7000") >= 0
	})
	for _, u := range []string{"kv/0", "app/0"} {
		w.mu.Lock()
		api := w.apis[u]
		w.mu.Unlock()
		if got, want := fmt.Sprint(api.watchManys.Load(), " ", api.watches.Load()), "1 0"; got != want {
			t.Errorf("%s's agent opened %s WatchMany and Watch streams, want %s", u, got, want)
		}
	}
}

// TestFailingHooks: a hook that fails twice then succeeds reaches running;
// one that always fails shows the error state, until resolved.
func TestFailingHooks(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 3, "server")
	w.file("kv/0", "fail-install", "2") // attempts: 3
	w.file("kv/1", "fail-start", "always")
	w.file("kv/2", "fail-config-changed", "always")
	for _, u := range []string{"kv/0", "kv/1", "kv/2"} {
		w.start(u)
	}
	w.waitState("kv/0", "running")
	if n := strings.Count(strings.Join(w.lines("kv/0", "attempts.log"), "\n"), "install"); n != 3 {
		t.Errorf("kv/0 ran install %d times, want 3 (two failures, one success)", n)
	}

	w.waitFor("kv/1 in start-error", func() bool {
		s := w.agentStatus("kv/1")
		return s.Agent == "error" && s.State == "start-error" && s.Message == `hook failed: "start"`
	})
	// resolved runs it again (it fails again: still in error), then
	// --no-retry moves on.
	w.file("kv/1", "fail-start", "always")
	before := strings.Count(strings.Join(w.lines("kv/1", "attempts.log"), "\n"), "start")
	if _, err := w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/1"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("kv/1 to run start again and fail", func() bool {
		n := strings.Count(strings.Join(w.lines("kv/1", "attempts.log"), "\n"), "start")
		s := w.agentStatus("kv/1")
		return n >= before+3 && s.Agent == "error" && s.State == "start-error"
	})
	// The status seen may still be the error before the retry, its new
	// one not yet reported: the controller refuses resolved until the
	// unit is in error again, as an operator would see it.
	var resolveErr error
	w.waitFor("kv/1 resolved with no retry", func() bool {
		_, resolveErr = w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/1", NoRetry: true})
		return status.Code(resolveErr) != codes.FailedPrecondition
	})
	if resolveErr != nil {
		t.Fatal(resolveErr)
	}
	w.waitState("kv/1", "running")

	w.waitFor("kv/2 in hook-error", func() bool {
		s := w.agentStatus("kv/2")
		return s.Agent == "error" && s.State == "hook-error" && s.Message == `hook failed: "config-changed"`
	})
	w.file("kv/2", "fail-config-changed", "0")
	if _, err := w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/2"}); err != nil {
		t.Fatal(err)
	}
	w.waitState("kv/2", "running")
	if got := w.hooks("kv/2"); index(got, "config-changed") < 0 || index(got, "start") < index(got, "config-changed") {
		t.Errorf("kv/2 ran %v: want config-changed (retried) before start", got)
	}
}

// TestSubordinatesFollowTheirPrincipal relates a subordinate to a
// principal: the principal's agent creates the subordinate unit and has it
// deployed beside itself; destroying the principal takes it along.
func TestSubordinatesFollowTheirPrincipal(t *testing.T) {
	w := newWorld(t)
	w.deploy(appMeta, 1, "db", "juju-info")
	w.deploy(loggerMeta, 0, "host")
	rel := relate(t, w, "app", "logger")
	w.start("app/0")
	w.waitFor("logger/0 running beside app/0", func() bool {
		s := w.agentStatus("logger/0")
		return s != nil && s.State == "running" && s.Machine == w.agentStatus("app/0").Machine
	})
	host := fmt.Sprintf("host:%d", rel.Id)
	w.waitFor("logger/0 to join app/0", func() bool { return index(w.hooks("logger/0"), "host-relation-changed "+host+" app/0") >= 0 })
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "app/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("logger/0 removed and app/0 dead", func() bool {
		_, err := w.env.State.Unit(w.env.Ctx, "logger/0")
		u, err2 := w.env.State.Unit(w.env.Ctx, "app/0")
		return err != nil && err2 == nil && u.Life == pb.Life_LIFE_DEAD
	})
	lg := w.hooks("logger/0")
	if i, j := index(lg, "host-relation-broken"), index(lg, "remove"); i < 0 || j < i {
		t.Errorf("logger/0 ran %v: want broken, then stop and remove", lg)
	}
	app := w.hooks("app/0")
	if i, j := index(app, "stop"), index(app, "juju-info-relation-broken"); j < 0 || i < j {
		t.Errorf("app/0 ran %v: want its relation with logger broken before stop", app)
	}
}

// TestSubordinateServiceGoesWithoutItsPrincipal: destroying a
// subordinate service while its principal lives on takes its units to
// dead, and the principal's agent removes them (U5): the service and its
// relation go, and the principal keeps running.
func TestSubordinateServiceGoesWithoutItsPrincipal(t *testing.T) {
	w := newWorld(t)
	w.deploy(appMeta, 1, "db", "juju-info")
	w.deploy(loggerMeta, 0, "host")
	relate(t, w, "app", "logger")
	w.start("app/0")
	w.waitState("logger/0", "running")
	if _, err := w.op.DestroyService(w.env.Ctx, &pb.DestroyServiceRequest{Service: "logger"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("logger and logger/0 removed", func() bool {
		_, uerr := w.env.State.Unit(w.env.Ctx, "logger/0")
		_, serr := w.env.State.Service(w.env.Ctx, "logger")
		return uerr != nil && serr != nil
	})
	if s := w.agentStatus("app/0"); s == nil || s.State != "running" {
		t.Errorf("app/0 is %+v after its subordinate went, want running", s)
	}
}

// TestHookTimeout kills a hook that runs past the timeout: a failed
// attempt, like any other.
func TestHookTimeout(t *testing.T) {
	w := newWorld(t)
	w.hookTimeout = 300 * time.Millisecond
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "sleep-install", "30")
	w.start("kv/0")
	w.waitFor("kv/0 in install-error", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.Agent == "error" && s.State == "install-error"
	})
	if got := len(w.lines("kv/0", "attempts.log")); got != w.retry.Attempts {
		t.Errorf("install was attempted %d times, want %d", got, w.retry.Attempts)
	}
}

// TestTwoSavesAHook counts the local state's saves (the journal's records)
// on the way to running: two a hook (marked running before it runs, done
// after) for install, config-changed and start; the charm unpacked is
// written with install's first.
func TestTwoSavesAHook(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	if err := w.stop("kv/0"); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := len(w.lines("kv/0", "state.log")); got != 2*3 {
		t.Errorf("the journal holds %d records, want 6:\n%s", got, strings.Join(w.lines("kv/0", "state.log"), "\n"))
	}
}

// hooklessKV deploys one unit of kv, of a charm without hooks, and one of
// app, and relates them.
func (w *world) hooklessKV() *pb.Relation {
	w.t.Helper()
	dir := writeCharm(w.t, kvMeta, "server")
	if err := os.RemoveAll(filepath.Join(dir, "hooks")); err != nil {
		w.t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		w.t.Fatal(err)
	}
	w.deploy(appMeta, 1, "db")
	return relate(w.t, w, "app", "kv")
}

// TestNoSavesForHooksTheCharmLacks: a unit of a charm with no hooks, in a
// relation, reaches running and enters the relation's scope without
// writing a file, nor asking which scopes it is in: it is new
// (Config.New). Started again, not new, with no mark of
// the scope, it asks the controller, and so leaves the scope when the
// relation is destroyed, and the relation goes.
func TestNoSavesForHooksTheCharmLacks(t *testing.T) {
	w := newWorld(t)
	rel := w.hooklessKV()
	inScope := func() bool {
		scopes, err := w.env.State.UnitScopes(w.env.Ctx, "kv/0")
		return err == nil && len(scopes) == 1
	}
	w.start("kv/0")
	w.waitState("kv/0", "running")
	w.waitFor("kv/0 to enter the relation's scope", inScope)
	if err := w.stop("kv/0"); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if got := w.lines("kv/0", "state.log"); len(got) != 0 {
		t.Errorf("the journal holds %d records, want none:\n%s", len(got), strings.Join(got, "\n"))
	}
	// Its directory holds at most its tools' socket (a unit agent run
	// alone serves its own; a machine's share the machine agent's, and
	// then it has none: machineagent's TestUnitLeavesScopeAfterRestart).
	if des, err := os.ReadDir(w.dir("kv/0")); err == nil {
		for _, de := range des {
			if de.Name() != "agent.sock" {
				t.Errorf("the unit's directory holds %s", de.Name())
			}
		}
	}
	if n := w.apis["kv/0"].scopeChecks.Load(); n != 0 {
		t.Errorf("the agent of a new unit asked for its scopes %d times, want none", n)
	}

	if _, err := w.op.DestroyRelation(w.env.Ctx, &pb.DestroyRelationRequest{Endpoints: []string{"app", "kv"}}); err != nil {
		t.Fatal(err)
	}
	w.start("kv/0")
	w.waitFor("the relation to be removed", func() bool {
		_, err := w.env.State.Relation(w.env.Ctx, rel.Id)
		return errors.Is(err, state.ErrNotFound)
	})
	if n := w.apis["kv/0"].scopeChecks.Load(); n != 1 {
		t.Errorf("the agent started again asked for its scopes %d times, want once", n)
	}
}

// TestDeparturesGoWithTheDeath destroys a unit of a charm without hooks
// in a relation: its departure goes with the call that sets it dead, not
// in one of its own. The other side sees it depart all the same.
func TestDeparturesGoWithTheDeath(t *testing.T) {
	w := newWorld(t)
	rel := w.hooklessKV()
	w.start("kv/0")
	w.start("app/0")
	w.waitState("kv/0", "running")
	w.waitHook("app/0", fmt.Sprintf("db-relation-changed db:%d kv/0", rel.Id))
	api := w.destroyed("kv/0")
	if n, carried := api.leaves.Load(), api.carriedLeaves.Load(); n != 0 || carried != 1 {
		t.Errorf("kv/0 left its scope in %d calls of their own and %d carried by its death call, want 0 and 1", n, carried)
	}
	w.waitHook("app/0", fmt.Sprintf("db-relation-departed db:%d kv/0", rel.Id))
	members, err := w.env.State.ScopeMembers(w.env.Ctx, rel.Id)
	if err != nil || len(members) != 1 || members[0] != "app/0" {
		t.Errorf("relation %d's scope holds %v (%v), want app/0 alone", rel.Id, members, err)
	}
}

// TestDeparturesGoBeforeAHook destroys a unit whose charm has hooks: its
// departure goes at once, before relation-broken runs, as the hook may
// tell others; the death call carries none.
func TestDeparturesGoBeforeAHook(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	rel := relate(t, w, "app", "kv")
	w.start("kv/0")
	w.waitHook("kv/0", fmt.Sprintf("server-relation-created server:%d", rel.Id))
	w.waitState("kv/0", "running")
	api := w.destroyed("kv/0")
	if n, carried := api.leaves.Load(), api.carriedLeaves.Load(); n != 1 || carried != 0 {
		t.Errorf("kv/0 left its scope in %d calls of their own and %d carried by its death call, want 1 and 0", n, carried)
	}
	if got := w.hooks("kv/0"); !slices.Contains(got, fmt.Sprintf("server-relation-broken server:%d -", rel.Id)) {
		t.Errorf("kv/0 ran %v, want server-relation-broken among them", got)
	}
}

// TestDeadIsTheEnd destroys a unit: its agent sets it dead once and stops
// at once, without waiting for its watches to show it dead, and reports
// no status for it (its statuses go with it).
func TestDeadIsTheEnd(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	api := w.destroyed("kv/0")
	if n := api.ensureDeads.Load(); n != 1 {
		t.Errorf("kv/0's agent set its unit dead %d times, want 1", n)
	}
	if st, err := w.env.State.Status(w.env.Ctx, state.StatusUnitAgent, "kv/0"); err != nil || st.GetMessage() == "dead" {
		t.Errorf("kv/0's agent status = %v, %v; want the last before dead", st, err)
	}
}

// TestNoIdleBeforeItActs starts a new unit whose watches answer late: it
// reports nothing while it waits for them, not an idle in state new.
func TestNoIdleBeforeItActs(t *testing.T) {
	w := newWorld(t)
	w.watchDelay = time.Second
	w.deploy(kvMeta, 1, "server")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	h, err := w.env.State.StatusHistory(w.env.Ctx, "kv/0", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h {
		if e.Kind == state.StatusUnitAgent && e.Status.GetData()["state"] == unitagent.StateNew && e.Status.GetStatus() == "idle" {
			t.Errorf("kv/0 reported %v before it acted", e.Status)
		}
	}
}
