package controller_test

import (
	"slices"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestRevisionHistoryConfigured: the controller's revision history
// (lifelined controller --revision-history) is what its config changes
// keep: with 2, the newest two and the rollout's previous, which no
// rollout has moved past here (no worker runs).
func TestRevisionHistoryConfigured(t *testing.T) {
	e := newEnvWith(t, controllertest.Options{Anonymous: true, RevisionHistory: 2})
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1, Config: map[string]string{"port": "9000"}})
	must(t, "Deploy", err)
	for _, port := range []string{"9001", "9002", "9003", "9004"} {
		_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"port": port}})
		must(t, "SetConfig", err)
	}
	nums, err := e.st.RevisionNumbers(ctx, "kv")
	must(t, "RevisionNumbers", err)
	if want := []int64{1, 4, 5}; !slices.Equal(nums, want) {
		t.Errorf("revisions kept %v, want %v", nums, want)
	}
}
