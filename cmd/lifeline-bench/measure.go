package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

// dbInUse is the bytes etcd's backend uses now.
func dbInUse(ctx context.Context, c *clientv3.Client, endpoint string) (int64, error) {
	s, err := c.Status(ctx, endpoint)
	if err != nil {
		return 0, err
	}
	return s.DbSizeInUse, nil
}

// timeStatus times ctl status --format json, of the whole model or of
// what selectors select.
func timeStatus(ctx context.Context, ctlPath, config string, selectors ...string) (float64, error) {
	cmd := exec.CommandContext(ctx, ctlPath, append([]string{"status", "--format", "json"}, selectors...)...)
	cmd.Env = append(os.Environ(), "LIFELINE_CONFIG="+config)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("ctl status: %w: %s", err, out.String())
	}
	return time.Since(start).Seconds(), nil
}
