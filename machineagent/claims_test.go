package machineagent_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// claimerMeta is a charm that claims a daemon, which writes its pid to
// daemon.pid in its unit's directory, and a file at an absolute path.
const claimerMeta = `name: claimer
host:
  files:
    - {path: %q, content: "claimed\n"}
  daemons:
    - name: sleeper
      command: [sh, -c, 'echo $$ > daemon.pid.tmp && mv daemon.pid.tmp daemon.pid; exec sleep 3600']
`

// TestForcedUnitReleasesItsClaims: a unit forced out has the daemon its
// claims run stopped and the file they wrote removed, outside its
// directory too, before its directory goes.
func TestForcedUnitReleasesItsClaims(t *testing.T) {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	outside := filepath.Join(t.TempDir(), "claimed.conf")
	charmDir := filepath.Join(t.TempDir(), "claimer")
	if err := os.MkdirAll(charmDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(charmDir, "metadata.yaml"), []byte(fmt.Sprintf(claimerMeta, outside)), 0o644); err != nil {
		t.Fatal(err)
	}
	env.Upload(op, charmDir)
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "claimer", NumUnits: 1, To: m}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := newDaemons(t, dir)
	startAgent(t, env, m, dir)
	d.started("claimer/0")
	if b, err := os.ReadFile(outside); err != nil || string(b) != "claimed\n" {
		t.Fatalf("the claimed file holds %q (%v)", b, err)
	}
	forceOut(t, env, "claimer/0")
	d.ended("claimer/0")
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the claimed file is still there (%v)", err)
	}
}
