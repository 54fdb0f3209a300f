package e2etest

import (
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/embedetcd"
	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/statetest"
)

// Roll moves the units of the sandbox's services to their rollouts'
// targets until the test ends (statetest.Roll), standing in for the
// leader's rollout worker: it reaches the model through the socket of the
// first controller's embedded etcd, in the namespace lifelined uses by
// default. Call it once the controller runs (after Bootstrap).
func (s *Sandbox) Roll(t testing.TB) { s.RollAt(t, s.DataDir) }

// RollAt is Roll for the controller whose data directory is dataDir:
// the etcd whose socket is dataDir/etcd/etcd.sock.
func (s *Sandbox) RollAt(t testing.TB, dataDir string) {
	t.Helper()
	sock := filepath.Join(dataDir, "etcd", "etcd.sock")
	c, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{"unix://" + sock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := state.New(c, state.Config{Namespace: "/lifeline/"})
	if err != nil {
		t.Fatal(err)
	}
	statetest.Roll(t, st)
}
