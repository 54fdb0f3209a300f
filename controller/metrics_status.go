package controller

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifelinehq/lifeline/state"
)

// statusCollector reports what alerts look at: units by their agent's
// status and by their workload's, and the machines whose agent is lost,
// from a census (State.StatusCensus) taken at most every few seconds.
// The statuses an alert names are reported even at zero, so that a rule
// such as lifeline_units_by_agent_status{status="error"} > 0 sees a
// series from the start.
type statusCollector struct {
	st                      *state.State
	agents, workloads, lost *prometheus.Desc

	mu sync.Mutex
	at time.Time
	c  *state.StatusCensus
}

func newStatusCollector(st *state.State) *statusCollector {
	return &statusCollector{
		st: st,
		agents: prometheus.NewDesc("lifeline_units_by_agent_status",
			"Units by their agent's status (idle, executing, error, ...).", []string{"status"}, nil),
		workloads: prometheus.NewDesc("lifeline_units_by_workload_status",
			"Units by their workload's status, as their charm set it (active, blocked, waiting, maintenance, ...).", []string{"status"}, nil),
		lost: prometheus.NewDesc("lifeline_machines_lost",
			"Alive or dying machines whose agent reported once, is not connected and did not say it stopped.", nil, nil),
	}
}

func (s *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.agents
	ch <- s.workloads
	ch <- s.lost
}

func (s *statusCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil || time.Since(s.at) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := s.st.StatusCensus(ctx); err == nil {
			s.c, s.at = c, time.Now()
		}
	}
	c := s.c
	if c == nil {
		c = &state.StatusCensus{}
	}
	emit := func(desc *prometheus.Desc, counts map[string]int, always ...string) {
		for _, st := range always {
			if _, ok := counts[st]; !ok {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, 0, st)
			}
		}
		for st, n := range counts {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), st)
		}
	}
	emit(s.agents, c.UnitAgents, "error", "idle", "executing")
	emit(s.workloads, c.Workloads, "active", "blocked", "error", "maintenance", "waiting")
	ch <- prometheus.MustNewConstMetric(s.lost, prometheus.GaugeValue, float64(c.MachinesLost))
}
