package unitagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifelinehq/lifeline/hooks"
)

// HookMetrics counts the hook runs of a machine's unit agents by hook
// name, with their durations: lifeline_hook_duration_seconds{hook,
// result}, a histogram whose _count by result="failed" is the failures.
// A hook's name is a standard hook's or "<endpoint>-relation-<kind>", so
// the names are as many as the machine's charms' endpoints allow. A nil
// *HookMetrics counts nothing.
type HookMetrics struct {
	duration *prometheus.HistogramVec
}

// NewHookMetrics makes the hook metrics and registers them with reg.
func NewHookMetrics(reg prometheus.Registerer) (*HookMetrics, error) {
	m := &HookMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "lifeline", Name: "hook_duration_seconds",
		Help: "Hook runs by hook name and result (ok, failed), and how long each ran.",
		// 10 ms to about 3 min, four times wider each.
		Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
	}, []string{"hook", "result"})}
	if err := reg.Register(m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// observe counts one run of hook that ran (not one skipped for want of
// its file).
func (m *HookMetrics) observe(hook string, res hooks.Result, err error) {
	if m == nil || res.Skipped {
		return
	}
	result := "ok"
	if err != nil || !res.Succeeded() {
		result = "failed"
	}
	m.duration.WithLabelValues(hook, result).Observe(res.Duration.Seconds())
}
