package controller

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Storage is what the controller knows of etcd's database space, for its
// writes and for the status.
type Storage struct {
	// Size is the database's size in bytes, InUse what its live pages
	// hold, and Quota the size past which etcd refuses writes; zero when
	// unknown.
	Size, InUse, Quota int64
	// NoSpace says etcd raised its NOSPACE alarm: it refuses every
	// write that puts a key until the alarm is disarmed.
	NoSpace bool
	// Tight says the database is near its quota: the controller takes
	// only the writes that shrink the model or keep it as it is (kinds
	// callKeep and callRead below).
	Tight bool
}

// Alarm is the storage's alarm for the status and the log, or "".
func (s Storage) Alarm() string {
	switch {
	case s.NoSpace:
		return fmt.Sprintf("etcd's database is full (its NOSPACE alarm; %s of %s): every write that adds to the model is refused until compaction and defragmentation free space; destroying what is not needed still works", sizeOf(s.Size), sizeOf(s.Quota))
	case s.Tight:
		return fmt.Sprintf("etcd's database is nearly full (%s of its %s quota, %s in use): writes that add to the model are refused until compaction frees space; destroying what is not needed still works", sizeOf(s.Size), sizeOf(s.Quota), sizeOf(s.InUse))
	}
	return ""
}

func sizeOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// admitStorage refuses a call that may add to the model while etcd's
// database is near its quota or full.
func (s *Server) admitStorage(c caller, kind callKind) error {
	if kind != callGrow || s.cfg.Storage == nil {
		return nil
	}
	st := s.cfg.Storage()
	if !st.Tight && !st.NoSpace {
		return nil
	}
	s.limits.refused("storage")
	return status.Error(codes.ResourceExhausted, st.Alarm())
}

// limitMetrics count the calls refused by a budget or for the storage,
// and report the storage as the controller knows it.
type limitMetrics struct {
	refusals *prometheus.CounterVec
}

func newLimitMetrics(reg prometheus.Registerer, storage func() Storage) *limitMetrics {
	m := &limitMetrics{refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "lifeline", Name: "api_refusals_total",
		Help: "Calls refused before they ran: by an agent credential's budget of writes a second (writes) or bytes a minute (bytes), or because etcd's database was near its quota or full (storage).",
	}, []string{"reason"})}
	for _, r := range []string{"writes", "bytes", "storage"} {
		m.refusals.WithLabelValues(r)
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.refusals)
	if storage == nil {
		return m
	}
	gauge := func(name, help string, f func(Storage) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lifeline", Name: name, Help: help}, func() float64 { return f(storage()) })
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge("etcd_db_size_bytes", "The size of etcd's database file, which its quota bounds.", func(s Storage) float64 { return float64(s.Size) }),
		gauge("etcd_db_in_use_bytes", "What etcd's database holds: its live pages, the keys and the versions kept until compaction.", func(s Storage) float64 { return float64(s.InUse) }),
		gauge("etcd_db_quota_bytes", "The size of etcd's database past which it refuses writes (0: unknown).", func(s Storage) float64 { return float64(s.Quota) }),
		gauge("etcd_nospace_alarm", "1 while etcd's NOSPACE alarm is raised: it refuses every write that adds a key.", func(s Storage) float64 { return flag(s.NoSpace) }),
		gauge("etcd_storage_tight", "1 while etcd's database is near its quota and the controller refuses the writes that would add to the model.", func(s Storage) float64 { return flag(s.Tight) }),
	)
	return m
}

func (m *limitMetrics) refused(reason string) { m.refusals.WithLabelValues(reason).Inc() }
