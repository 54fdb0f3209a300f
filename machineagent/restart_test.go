package machineagent_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/controllertest"
	"github.com/lifelinehq/lifeline/machineagent"
	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/unitagent"
)

// TestUnitLeavesScopeAfterRestart: a unit agent does not save its mark of
// entering a relation's scope on its own. Its machine agent restarts, as
// after a crash of it or of the machine, with the unit's local state lost
// (here, all of it), and meanwhile the relation is destroyed: the unit
// agent, starting over a directory it did not make, asks the controller
// which scopes its unit is in, and leaves this one, so that the relation
// goes.
func TestUnitLeavesScopeAfterRestart(t *testing.T) {
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
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "front", NumUnits: 1, To: m}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "store"}); err != nil {
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
			DialUnit: func(cred pki.Credential) (unitagent.API, io.Closer, error) {
				return pb.NewAgentServiceClient(env.Dial(cred)), io.NopCloser(nil), nil
			},
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
	waitFor(t, "front/0 to enter the relation's scope", inScope)
	stop()

	// The agent restarts, having lost what was not saved: here all of
	// front/0's state. The relation is destroyed meanwhile.
	unitDir := filepath.Join(dir, "units", "front-0")
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
	waitFor(t, "the relation to be removed", func() bool {
		_, err := env.State.Relation(env.Ctx, id)
		return errors.Is(err, state.ErrNotFound)
	})
	if inScope() {
		t.Error("front/0 is still in a scope")
	}
}
