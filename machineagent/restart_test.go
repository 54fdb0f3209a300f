package machineagent_test

import (
	"context"
	"errors"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestUnitLeavesScopeAfterRestart: a unit agent does not save its mark of
// entering a relation's scope on its own. Its machine agent restarts, as
// after a crash of it or of the machine, with the unit's local state lost
// (here, all of it), and meanwhile the relation is destroyed: the unit
// agent, not known to be new to the machine, asks the controller which
// scopes its unit is in, and leaves this one, so that the relation goes.
// So it does when the unit was assigned while the machine agent watched,
// and its agent started as new: its charm has no hooks, and it made no
// directory at all, which an agent that ran before always has.
func TestUnitLeavesScopeAfterRestart(t *testing.T) {
	for _, assignedWatched := range []bool{false, true} {
		name := "assigned before the agent started"
		if assignedWatched {
			name = "assigned while the agent watched"
		}
		t.Run(name, func(t *testing.T) { testUnitLeavesScopeAfterRestart(t, assignedWatched) })
	}
}

func testUnitLeavesScopeAfterRestart(t *testing.T, assignedWatched bool) {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	charms := t.TempDir()
	for name, meta := range map[string]string{"front": "name: front\nrequires:\n  db: kv\n", "store": "name: store\nprovides:\n  db: kv\n"} {
		if err := os.MkdirAll(filepath.Join(charms, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(charms, name, "metadata.yaml"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		env.Upload(op, filepath.Join(charms, name))
	}
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	frontUnits := int32(1)
	if assignedWatched {
		frontUnits = 0
	}
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "front", NumUnits: frontUnits, To: m}); err != nil {
		t.Fatal(err)
	}
	storeTo := &pb.DeployRequest{Charm: "store"}
	if assignedWatched {
		// A unit the machine agent's first listing holds: once it is in
		// the scope, the agent watches.
		storeTo.NumUnits, storeTo.To = 1, m
	}
	if _, err := op.Deploy(env.Ctx, storeTo); err != nil {
		t.Fatal(err)
	}
	rel, err := op.AddRelation(env.Ctx, &pb.AddRelationRequest{Endpoints: []string{"front", "store"}})
	if err != nil {
		t.Fatal(err)
	}
	id := rel.GetRelation().GetId()

	dir := t.TempDir()
	run := func() (stop func()) {
		a, err := machineagent.New(machineagent.Config{
			MachineID: m, DataDir: dir, Address: "127.0.0.1", API: env.Agent("machine-" + m),
			DialUnit:  dialUnits(env),
			Lifelined: lifelined, Logger: hclog.NewNullLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("machine agent: %v", err)
			}
		}
	}
	inScope := func() bool {
		scopes, err := env.State.UnitScopes(env.Ctx, "front/0")
		return err == nil && len(scopes) == 1
	}
	stop := run()
	unitDir := filepath.Join(dir, "units", "front-0")
	if assignedWatched {
		poll.Until(t, "store/0 to enter the relation's scope", func() bool {
			scopes, err := env.State.UnitScopes(env.Ctx, "store/0")
			return err == nil && len(scopes) == 1
		})
		if _, err := op.AddUnits(env.Ctx, &pb.AddUnitsRequest{Service: "front", NumUnits: 1, To: m}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "front/0 to enter the relation's scope", inScope)
	if _, err := os.Lstat(unitDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("front/0, of a charm without hooks, has a directory (%v)", err)
	}
	stop()

	// The agent restarts, having lost what was not saved: here all of
	// front/0's state. The relation is destroyed meanwhile.
	for _, f := range []string{"state.json", "state.log"} {
		if err := os.Remove(filepath.Join(unitDir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	if _, err := op.DestroyRelation(env.Ctx, &pb.DestroyRelationRequest{Endpoints: []string{"front", "store"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := env.State.Relation(env.Ctx, id); err != nil || r.Life != pb.Life_LIFE_DYING {
		t.Fatalf("relation %d: %v, %v; want dying, front/0 in its scope", id, r, err)
	}

	stop = run()
	defer stop()
	poll.Until(t, "the relation to be removed", func() bool {
		_, err := env.State.Relation(env.Ctx, id)
		return errors.Is(err, state.ErrNotFound)
	})
	if inScope() {
		t.Error("front/0 is still in a scope")
	}
}
