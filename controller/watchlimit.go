package controller

import (
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/watchhub"
)

// WatchLimits bound what the agents' watch streams may make the
// controller hold: an agent that does not read its stream has the watch
// hub queue the changes it watches for it, and one credential can open
// many streams of many subscriptions each.
type WatchLimits struct {
	// StreamBytes bounds the changes held for one watch stream (a Watch,
	// or a WatchMany with all its subscriptions), each counted for its
	// key, its value and an overhead: a stream past it is cut
	// (ResourceExhausted), and its agent resumes after the revisions it
	// last received, on a new stream. 64 MiB when zero; none when
	// negative.
	StreamBytes int64
	// CredentialBytes bounds those held for all the watch streams of one
	// credential; past it, the stream the change was for is cut. 128 MiB
	// when zero; none when negative.
	CredentialBytes int64
	// StreamsPerCredential bounds the watch streams one credential holds
	// open at once: an agent has one (a machine agent's carries its unit
	// agents' subscriptions), more for a moment when it reconnects
	// before the controller has seen its old connection go. 16 when zero;
	// none when negative.
	StreamsPerCredential int
}

// Default watch limits: far above what an agent that reads its stream
// holds at 10,000 units (docs/RELIABILITY.md).
const (
	defaultWatchStreamBytes     = 64 << 20
	defaultWatchCredentialBytes = 128 << 20
	defaultWatchStreams         = 16
)

func (l WatchLimits) withDefaults() WatchLimits {
	if l.StreamBytes == 0 {
		l.StreamBytes = defaultWatchStreamBytes
	}
	if l.CredentialBytes == 0 {
		l.CredentialBytes = defaultWatchCredentialBytes
	}
	if l.StreamsPerCredential == 0 {
		l.StreamsPerCredential = defaultWatchStreams
	}
	return l
}

// watchers are the agents' watch streams, by credential: each stream has
// a budget of its own within its credential's (watchhub.Budget).
type watchers struct {
	hub    *watchhub.Hub
	limits WatchLimits
	logger hclog.Logger
	// refused counts the streams refused for the credential's limit on
	// streams; cuts the streams cut, by the limit they were past.
	refused prometheus.Counter

	mu       sync.Mutex
	byCaller map[caller]*callerWatches
}

// callerWatches are one credential's watch streams.
type callerWatches struct {
	budget  *watchhub.Budget
	streams int
}

// The limits a cut stream was past, as lifeline_watch_streams_cut_total
// names them.
var cutLimits = map[string]string{
	watchhub.OverStream: "stream",
	watchhub.OverParent: "credential",
	watchhub.OverHub:    "total",
}

func newWatchers(hub *watchhub.Hub, limits WatchLimits, reg prometheus.Registerer, logger hclog.Logger) *watchers {
	w := &watchers{hub: hub, limits: limits, logger: logger, byCaller: map[caller]*callerWatches{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "watch_streams_refused_total",
			Help: "Agent watch streams refused because their credential had as many open as allowed (--watch-streams-per-credential).",
		}),
	}
	if reg == nil {
		return w
	}
	stat := func(f func(watchhub.Stats) int64) func() float64 {
		return func() float64 { return float64(f(hub.Stats())) }
	}
	cuts := map[string]func(watchhub.Stats) int64{
		"stream":     func(s watchhub.Stats) int64 { return s.CutsStream },
		"credential": func(s watchhub.Stats) int64 { return s.CutsParent },
		"total":      func(s watchhub.Stats) int64 { return s.CutsHub },
	}
	for limit, f := range cuts {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "watch_streams_cut_total",
			Help:        "Agent watch streams cut because the changes held for them passed a limit: stream (--watch-stream-bytes), credential (--watch-credential-bytes) or total (--watch-total-bytes). Their agents resume on new streams.",
			ConstLabels: prometheus.Labels{"limit": limit},
		}, stat(f)))
	}
	reg.MustRegister(w.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "watch_held_bytes",
			Help: "Bytes of changes the watch hub holds for agents' streams now (queued, read ahead from etcd, listed), as the watch limits count them.",
		}, stat(func(s watchhub.Stats) int64 { return s.Held })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "watch_held_bytes_stream_max",
			Help: "The most bytes of changes held for one agent watch stream at once since the controller started: how near the streams came to --watch-stream-bytes.",
		}, stat(func(s watchhub.Stats) int64 { return s.MostHeld })),
	)
	return w
}

// open admits a new watch stream of c and returns the budget its hub
// streams are made through, and the function that ends it (once its hub
// streams are closed). A credential with as many streams as allowed is
// refused (ResourceExhausted).
func (w *watchers) open(c caller) (*watchhub.Budget, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cw := w.byCaller[c]
	if cw == nil {
		cw = &callerWatches{budget: w.hub.NewBudget(w.limits.CredentialBytes, nil, nil)}
		w.byCaller[c] = cw
	}
	if n := w.limits.StreamsPerCredential; n > 0 && cw.streams >= n {
		w.refused.Inc()
		return nil, nil, status.Errorf(codes.ResourceExhausted, "%s has %d watch streams open, the most allowed: close one first", c, n)
	}
	cw.streams++
	b := w.hub.NewBudget(w.limits.StreamBytes, cw.budget, func(cut *watchhub.CutError) {
		// Called with the hub's lock held: a log line, nothing more.
		w.logger.Warn("watch stream cut: it fell too far behind; its agent resumes on a new stream",
			"agent", c.String(), "limit", cutLimits[cut.Over], "limit_mib", cut.Limit>>20)
	})
	end := func() {
		b.Close()
		w.mu.Lock()
		defer w.mu.Unlock()
		if cw.streams--; cw.streams == 0 {
			delete(w.byCaller, c)
		}
	}
	return b, end, nil
}
