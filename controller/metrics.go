package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifelinehq/lifeline/controller/modelcache"

	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// metrics are the API's Prometheus metrics: calls by method and code
// (go-grpc-middleware's standard gRPC server metrics), etcd transactions
// and their conflicts, and entities by kind and life.
type metrics struct {
	// grpc counts every call by service, method and code, times unary
	// and streaming calls alike (grpc_server_handling_seconds), and
	// counts stream messages: the first interceptor of the chain, it
	// times a call from its arrival, before authentication, to its
	// answer, with the code the client gets.
	grpc *grpcprom.ServerMetrics
	// watchRPCs counts the open Watch and WatchMany streams.
	watchRPCs atomic.Int64
}

// registerModelCacheMetrics exports the state and counts of the decoded
// model the controller keeps for the whole-model status.
func registerModelCacheMetrics(reg prometheus.Registerer, c *modelcache.Cache) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "lifeline", Name: "model_cache_ready",
		Help: "1 while the controller holds the decoded model the whole-model status is answered from, 0 while it starts or is not kept (no such call for a while).",
	}, func() float64 {
		if c.Stats().Ready {
			return 1
		}
		return 0
	}))
	for _, m := range []struct {
		name, help string
		count      func(modelcache.Stats) int64
	}{
		{"model_cache_served_total", "Whole-model statuses answered from the decoded model.",
			func(s modelcache.Stats) int64 { return s.Served }},
		{"model_cache_behind_total", "Whole-model statuses read from etcd because the decoded model did not reach the call's revision in time.",
			func(s modelcache.Stats) int64 { return s.Behind }},
		{"model_cache_starts_total", "Times the controller started keeping the decoded model (each a listing of the whole model).",
			func(s modelcache.Stats) int64 { return s.Starts }},
		{"model_cache_failures_total", "Times keeping the decoded model ended on an error (a watch budget cut, a failed read, a value that does not decode); the next call starts it again.",
			func(s modelcache.Stats) int64 { return s.Failures }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lifeline", Name: m.name, Help: m.help},
			func() float64 { return float64(m.count(c.Stats())) }))
	}
}

func newMetrics(reg prometheus.Registerer, st *state.State, hub *watchhub.Hub) *metrics {
	m := &metrics{
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(0.001, 4, 9)), // 1 ms to 65 s
		)),
	}
	if reg == nil {
		return m
	}
	stat := func(f func(state.Stats) int64) func() float64 {
		return func() float64 { return float64(f(st.Stats())) }
	}
	reg.MustRegister(
		m.grpc,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "agent_watch_rpcs",
			Help: "Open agent watch RPC streams (Watch and WatchMany); each WatchMany stream carries many subscriptions, which lifeline_watch_streams counts.",
		}, func() float64 { return float64(m.watchRPCs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "etcd_txns_total",
			Help: "Write transactions committed to etcd.",
		}, stat(func(s state.Stats) int64 { return s.Txns })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "etcd_txn_retries_total",
			Help: "Write transactions whose comparisons failed and were retried after a fresh read.",
		}, stat(func(s state.Stats) int64 { return s.Conflicts })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "etcd_txn_aborts_total",
			Help: "Operations that ran out of retries.",
		}, stat(func(s state.Stats) int64 { return s.Aborted })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "etcd_busy_retries_total",
			Help: "Writes etcd refused as too many (it was behind applying what it had committed), each sent again after a pause.",
		}, stat(func(s state.Stats) int64 { return s.Busy })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "etcd_reads_again_total",
			Help: "Reads made again because they were at a revision before what the watch hub had handed out (etcd hands a change to its watchers a moment before reads see it).",
		}, stat(func(s state.Stats) int64 { return s.ReadsAgain })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "etcd_write_slots_held",
			Help: "Operations holding one of the slots that bound the controller's writes in etcd at once.",
		}, stat(func(s state.Stats) int64 { return s.Holding })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "etcd_write_slots_waiting",
			Help: "Operations waiting for a write slot.",
		}, stat(func(s state.Stats) int64 { return s.Waiting })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "etcd_txn_max_ops",
			Help: "The most operations in one write transaction so far.",
		}, stat(func(s state.Stats) int64 { return s.MaxOps })),
		&entityCollector{st: st, desc: prometheus.NewDesc("lifeline_entities",
			"Entities in the model by kind and life.", []string{"kind", "life"}, nil)},
		newStatusCollector(st),
		&conflictCollector{st: st, desc: prometheus.NewDesc("lifeline_etcd_txn_retries_by_operation_total",
			"Write transactions whose comparisons failed, by the state operation that retried them.", []string{"operation"}, nil)},
	)
	hubStat := func(f func(watchhub.Stats) int64) func() float64 {
		return func() float64 { return float64(f(hub.Stats())) }
	}
	for _, c := range []struct {
		name, help string
		counter    bool
		f          func(watchhub.Stats) int64
	}{
		{"watch_streams", "Agent watch streams following the watch hub.", false, func(s watchhub.Stats) int64 { return int64(s.Streams) }},
		{"watch_ring_events", "Recent changes the watch hub keeps for streams to resume from.", false, func(s watchhub.Stats) int64 { return int64(s.RingEvents) }},
		{"watch_changes_total", "Changes of the model the watch hub received.", true, func(s watchhub.Stats) int64 { return s.Events }},
		{"watch_deliveries_total", "Changes the watch hub queued for streams.", true, func(s watchhub.Stats) int64 { return s.Delivered }},
		{"watch_listings_total", "Listings watch streams read, at their start or when reset.", true, func(s watchhub.Stats) int64 { return s.Listings }},
		{"watch_listings_together_total", "Of the listings, those read several at once, in one read of etcd.", true, func(s watchhub.Stats) int64 { return s.ListedTogether }},
		{"watch_overflows_total", "Watch streams reset because they fell too far behind.", true, func(s watchhub.Stats) int64 { return s.Overflows }},
		{"watch_resumed_total", "Watch streams resumed from the watch hub's recent changes.", true, func(s watchhub.Stats) int64 { return s.Resumed }},
		{"watch_fallbacks_total", "Watch streams that caught up from etcd, resuming from a revision older than the hub's recent changes.", true, func(s watchhub.Stats) int64 { return s.Fallbacks }},
	} {
		if c.counter {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "lifeline", Name: c.name, Help: c.help}, hubStat(c.f)))
		} else {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lifeline", Name: c.name, Help: c.help}, hubStat(c.f)))
		}
	}
	return m
}

// conflictCollector reports the state's conflicts by operation.
type conflictCollector struct {
	st   *state.State
	desc *prometheus.Desc
}

func (c *conflictCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *conflictCollector) Collect(ch chan<- prometheus.Metric) {
	for op, n := range c.st.ConflictsByOp() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), op)
	}
}

// entityCollector counts the model's entities when scraped, from a census
// (State.Census) taken at most every few seconds.
type entityCollector struct {
	st   *state.State
	desc *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts map[[2]string]int
}

func (e *entityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

func (e *entityCollector) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.at) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := e.st.Census(ctx); err == nil {
			e.counts = map[[2]string]int{}
			for kind, lives := range map[string]map[pb.Life]int{"machine": c.Machines, "service": c.Services, "unit": c.Units, "relation": c.Relations} {
				for l, n := range lives {
					e.counts[[2]string{kind, state.LifeName(l)}] += n
				}
			}
			e.at = time.Now()
		}
	}
	for _, kind := range []string{"machine", "service", "unit", "relation"} {
		for _, life := range []string{"alive", "dying", "dead"} {
			if kind != "machine" && kind != "unit" && life == "dead" {
				continue
			}
			ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, float64(e.counts[[2]string{kind, life}]), kind, life)
		}
	}
}
