package unitagent_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/unitagent"
)

// TestForcedOutOrDead: Run ends with ErrDead when its agent took the unit
// to dead, and with ErrForcedOut, which matches ErrDead, when the unit
// went dead without its stop and remove hooks: set dead by the model while
// its agent was stopped, as the cleaner's forced removal does.
func TestForcedOutOrDead(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 2, "server")
	for _, u := range []string{"kv/0", "kv/1"} {
		w.start(u)
		w.waitState(u, "running")
	}
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	if err := w.exited("kv/0"); !errors.Is(err, unitagent.ErrDead) || errors.Is(err, unitagent.ErrForcedOut) {
		t.Errorf("the agent of kv/0, destroyed, returned %v, want ErrDead, not ErrForcedOut", err)
	}

	w.stop("kv/1")
	if err := w.env.State.DestroyUnit(w.env.Ctx, "kv/1", state.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.env.State.EnsureUnitDead(w.env.Ctx, "kv/1"); err != nil {
		t.Fatal(err)
	}
	w.start("kv/1")
	if err := w.exited("kv/1"); !errors.Is(err, unitagent.ErrForcedOut) || !errors.Is(err, unitagent.ErrDead) {
		t.Errorf("the agent of kv/1, forced out, returned %v, want ErrForcedOut (and ErrDead)", err)
	}
	if hooks := w.hooks("kv/1"); slices.Contains(hooks, "stop - -") || slices.Contains(hooks, "remove - -") {
		t.Errorf("kv/1 ran %v, want neither stop nor remove", hooks)
	}
}

// TestPrincipalTellsItsSubordinates: a principal's agent tells its
// deployer which subordinates it has, once it knows and whenever that
// changes: none, then its subordinate, then none once, the principal
// destroyed, it has removed the subordinate.
func TestPrincipalTellsItsSubordinates(t *testing.T) {
	w := newWorld(t)
	w.deploy(appMeta, 1, "db", "juju-info")
	w.deploy(loggerMeta, 0, "host")
	w.start("app/0")
	told := func() [][]string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.Clone(w.told)
	}
	w.waitFor("app/0 to tell it has no subordinate", func() bool { return len(told()) > 0 })
	relate(t, w, "app", "logger")
	w.waitFor("logger/0 running", func() bool {
		s := w.agentStatus("logger/0")
		return s != nil && s.State == "running"
	})
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "app/0"}); err != nil {
		t.Fatal(err)
	}
	if err := w.exited("app/0"); !errors.Is(err, unitagent.ErrDead) {
		t.Fatalf("the agent of app/0 returned %v, want ErrDead", err)
	}
	if got, want := fmt.Sprint(told()), "[[] [logger/0] []]"; got != want {
		t.Errorf("app/0 told its deployer %s, want %s", got, want)
	}
}
