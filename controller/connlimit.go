package controller

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// ConnLimits bound the connections the API holds open at once. Anyone who
// can reach the API's port can open connections, before presenting any
// credential: each costs the controller a descriptor and some memory
// until its handshake fails or times out. Past a limit a connection is
// accepted and closed at once (refused), never left to exhaust the
// process's descriptors, which the embedded etcd needs as much as the API.
type ConnLimits struct {
	// Max bounds all the connections open at once; none when zero.
	Max int
	// PerAddress bounds those from one remote address (IPv6 addresses
	// count by their /64, what one host is commonly given); none when
	// zero. Agents behind one address (NAT, or every agent of a local
	// controller on loopback) share it.
	PerAddress int
}

// Connection refusals, by the limit that refused them.
const (
	refusedTotal      = "total"
	refusedPerAddress = "per_address"
)

// refusalLogEvery bounds how often refused connections are logged: one
// line, with the counts since the last, at most this often.
const refusalLogEvery = time.Minute

// Listener returns lis limited by the configuration's ConnLimits: a
// connection past a limit is closed as soon as it is accepted, and
// counted (lifeline_api_connections_refused_total). The caller serves the
// API on the listener returned (GRPCServer's Serve) and closes lis.
func (s *Server) Listener(lis net.Listener) net.Listener {
	return &limitListener{Listener: lis, limits: s.cfg.Connections, m: s.conns, logger: s.logger,
		byAddr: map[netip.Addr]int{}}
}

// connMetrics count the API's connections.
type connMetrics struct {
	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

func newConnMetrics(reg prometheus.Registerer, limits ConnLimits) *connMetrics {
	m := &connMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "api_connections",
			Help: "Connections to the API open now, handshaking or served.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "api_connections_refused_total",
			Help: "Connections to the API closed as soon as accepted, by the limit they were past: total (--api-max-connections) or per_address (--api-max-connections-per-address).",
		}, []string{"limit"}),
	}
	m.refused.WithLabelValues(refusedTotal)
	m.refused.WithLabelValues(refusedPerAddress)
	if reg != nil {
		limit := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "lifeline", Name: "api_connections_limit",
			Help: "The API's limits on connections open at once: total, and per_address (0: none).",
		}, []string{"limit"})
		limit.WithLabelValues(refusedTotal).Set(float64(limits.Max))
		limit.WithLabelValues(refusedPerAddress).Set(float64(limits.PerAddress))
		reg.MustRegister(m.open, m.refused, limit)
	}
	return m
}

// limitListener admits connections within its limits.
type limitListener struct {
	net.Listener
	limits ConnLimits
	m      *connMetrics
	logger hclog.Logger

	mu     sync.Mutex
	open   int
	byAddr map[netip.Addr]int
	// refused counts the refusals by limit since the last log line,
	// logged then.
	refused map[string]int
	logged  time.Time
}

// Accept returns the next connection within the limits; those past them
// are closed, and Accept waits for the next.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := addressOf(c.RemoteAddr())
		if why := l.admit(addr); why != "" {
			if tc, ok := c.(*net.TCPConn); ok {
				// A reset rather than a close: the socket goes at once,
				// without lingering in TIME_WAIT.
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
	}
}

// admit counts a connection from addr in, or says which limit refuses it.
func (l *limitListener) admit(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	why := ""
	switch {
	case l.limits.Max > 0 && l.open >= l.limits.Max:
		why = refusedTotal
	case l.limits.PerAddress > 0 && l.byAddr[addr] >= l.limits.PerAddress:
		why = refusedPerAddress
	}
	if why != "" {
		l.m.refused.WithLabelValues(why).Inc()
		if l.refused == nil {
			l.refused = map[string]int{}
		}
		l.refused[why]++
		if now := time.Now(); now.Sub(l.logged) >= refusalLogEvery {
			l.logger.Warn("API connections refused: past the limit on connections open at once",
				"total_refused", l.refused[refusedTotal], "per_address_refused", l.refused[refusedPerAddress],
				"open", l.open, "max", l.limits.Max, "from", addr.String(), "from_open", l.byAddr[addr],
				"max_per_address", l.limits.PerAddress)
			l.refused, l.logged = nil, now
		}
		return why
	}
	l.open++
	l.byAddr[addr]++
	l.m.open.Inc()
	return ""
}

func (l *limitListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	l.m.open.Dec()
}

// addressOf is what a remote address counts as for the per-address
// limit: its IP, an IPv6 one by its /64.
func addressOf(a net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// limitedConn gives its place back when closed.
type limitedConn struct {
	net.Conn
	l    *limitListener
	addr netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
