package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/leader"
	"github.com/lifelinehq/lifeline/internal/sdnotify"
	"github.com/lifelinehq/lifeline/internal/version"
)

// How often the controller checks that it is ready, and how long etcd
// has to answer each check's read.
const (
	readyEvery   = 2 * time.Second
	readyTimeout = 2 * time.Second
)

// readiness checks, every readyEvery, that the controller can serve: etcd
// answers a read within readyTimeout, a leader controller is elected, and
// etcd's NOSPACE alarm is not raised. /readyz and the gRPC health
// service answer the last check's outcome.
type readiness struct {
	client *clientv3.Client
	// election is the leader election's key prefix (leader.Leader).
	election string
	// storage is the embedded etcd's space; nil with an external
	// cluster, whose alarms are asked for.
	storage func() controller.Storage
	health  *health.Server
	logger  hclog.Logger

	mu sync.Mutex
	// failed is the last check's failure, "" when it passed; at is when
	// it was made (zero before the first).
	failed string
	at     time.Time
}

// check makes one check and says what failed, or "".
func (r *readiness) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), readyTimeout)
	defer cancel()
	id, err := leader.Leader(ctx, r.client, r.election)
	if err != nil {
		return fmt.Sprintf("etcd did not answer a read within %s: %v", readyTimeout, err)
	}
	if id == "" {
		return "no controller is elected leader"
	}
	if r.storage != nil {
		if r.storage().NoSpace {
			return "etcd's NOSPACE alarm is raised: its database is full"
		}
		return ""
	}
	alarms, err := r.client.AlarmList(ctx)
	if err != nil {
		return fmt.Sprintf("etcd did not list its alarms within %s: %v", readyTimeout, err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			return "etcd's NOSPACE alarm is raised: its database is full"
		}
	}
	return ""
}

// run checks every readyEvery until ctx ends, setting the health
// service's status from each check and logging each change; it then
// marks the health service NOT_SERVING for good.
func (r *readiness) run(ctx context.Context) error {
	defer r.health.Shutdown()
	// It ends as the controller stops (its API drains after).
	defer sdnotify.Notify(sdnotify.Stopping)
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	first, notified := true, false
	for {
		failed := r.check(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.mu.Lock()
		changed := first || failed != r.failed
		r.failed, r.at = failed, time.Now()
		r.mu.Unlock()
		first = false
		if failed == "" {
			r.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			if !notified {
				// A systemd unit of Type=notify (docs/systemd) has
				// started once the controller is first ready.
				notified = true
				if _, err := sdnotify.Notify(sdnotify.Ready); err != nil {
					r.logger.Warn("telling systemd the controller is ready", "error", err)
				}
			}
		} else {
			r.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		}
		if changed {
			if failed == "" {
				r.logger.Info("ready")
			} else {
				r.logger.Warn("not ready", "reason", failed)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ready says what the last check found failed, or "": a check older
// than a few rounds counts as failed (the checks are stuck).
func (r *readiness) ready(now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.at.IsZero():
		return "not checked yet"
	case now.Sub(r.at) > 3*readyEvery+readyTimeout:
		return fmt.Sprintf("not checked since %s", r.at.UTC().Format(time.RFC3339))
	}
	return r.failed
}

// serveHealth adds /healthz (200 "ok" while the process serves) and
// /readyz (200 "ok" when the last readiness check passed, else 503 and
// what failed, one line) to mux.
func serveHealth(mux *http.ServeMux, r *readiness) {
	text := func(w http.ResponseWriter, code int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		fmt.Fprintln(w, msg)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if failed := r.ready(time.Now()); failed != "" {
			text(w, http.StatusServiceUnavailable, "not ready: "+failed)
			return
		}
		text(w, http.StatusOK, "ok")
	})
}

// buildInfo is the gauge lifeline_build_info{version,commit,go_version},
// always 1: what the controller's binary is, to join with other series.
func buildInfo(v version.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "lifeline", Name: "build_info",
		Help: "What the lifelined binary serving these metrics is: its version, commit and Go toolchain; always 1.",
	}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	return g
}
