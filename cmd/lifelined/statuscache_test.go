package main_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// --status-cache-idle is how long the controller keeps the decoded model
// after the last whole-model status: it holds it while statuses come,
// and drops it once none came for that long.
func TestStatusCacheIdle(t *testing.T) {
	metricsAddr, cfg := startController(t, t.TempDir(), "--status-cache-idle", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := operator(t, cfg)
	ready := func() float64 { return metricValue(t, metricsAddr, "lifeline_model_cache_ready") }
	poll.UntilSays(t, "the decoded model kept while statuses come", func() (bool, string) {
		if _, err := op.Status(ctx, &pb.StatusRequest{}, waitForReady()...); err != nil {
			t.Fatalf("Status: %v", err)
		}
		v := ready()
		return v == 1, fmt.Sprint("lifeline_model_cache_ready ", v)
	})
	poll.UntilSays(t, "the decoded model dropped once idle", func() (bool, string) {
		v := ready()
		return v == 0, fmt.Sprint("lifeline_model_cache_ready ", v)
	})
}
