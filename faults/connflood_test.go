package faults

import (
	"context"
	"errors"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/pause"
)

// TestConnectionFlood floods the controller with idle TCP connections,
// without a credential, from two addresses other than the agents' and
// the operator's: each address holds as many connections as the flood
// says, dialing again those the controller closes, for the flood's
// length. The connections past the per-address limit are refused and
// counted, those admitted closed at the handshake deadline; meanwhile
// another agent's calls keep answering (their p99 recorded), the
// operator's ctl connects and destroys a machine, and afterwards the
// controller runs, its memory back within twice its baseline, and the
// invariants held. The short form lowers the limits by flag; the full
// form keeps the defaults, derived from the descriptor limit.
func TestConnectionFlood(t *testing.T) {
	skipWhenSoaking(t)
	runConnectionFlood(t, currentSizes())
}

// floodAddresses are where the flood comes from: loopback addresses no
// agent of the test uses.
var floodAddresses = []net.IP{net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3)}

func runConnectionFlood(t *testing.T, sz sizes) {
	r := newRun(t, "connection flood without a credential", sz)
	r.size("flood addresses", len(floodAddresses))
	r.size("connections held from each address", sz.floodConns)
	r.size("flood seconds", int(sz.floodFor.Seconds()))
	var flags []string
	if sz.form == "short" || sz.form == "soak, short" {
		flags = []string{"--api-max-connections", "300", "--api-max-connections-per-address", "100", "--api-handshake-timeout", "2s"}
		r.size("--api-max-connections", 300)
		r.size("--api-max-connections-per-address", 100)
	}
	f := newResourceFixture(t, sz, flags...)
	agentMachine, agentConn := f.addMachine(t)
	spare, _ := f.addMachine(t)
	// The baseline under the other agent's calls, which go on through
	// the flood.
	calls := f.startAgentCalls(agentMachine, agentConn)
	base := f.baseline(t, r)
	body, err := f.scrape()
	if err != nil {
		t.Fatal(err)
	}
	perAddress := int(metric(body, `lifeline_api_connections_limit{limit="per_address"}`))
	t.Logf("limits: %v connections, %d from one address", metric(body, `lifeline_api_connections_limit{limit="total"}`), perAddress)

	peak := f.watchPeak()
	// The flood lasts floodFor from when every address has dialed its
	// connections once: on a loaded machine dialing them takes a while.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dials, dialErrors atomic.Int64
	var wg, dialed sync.WaitGroup
	for _, ip := range floodAddresses {
		dialed.Add(1)
		wg.Go(func() { flood(ctx, f.c.Addr(), ip, sz.floodConns, &dials, &dialErrors, dialed.Done) })
	}
	r.inject("connection flood")
	// It ends floodFor after that, once the controller has refused as
	// many as the addresses dial past their limit (within a bound): on a
	// loaded machine, dials still in the controller's accept queue when
	// the flood ends are never counted.
	wantRefused := len(floodAddresses) * (sz.floodConns - perAddress)
	var ended sync.WaitGroup
	ended.Go(func() {
		defer cancel()
		dialed.Wait()
		if !pause.For(ctx, sz.floodFor) {
			return
		}
		bound := time.Now().Add(time.Minute)
		for time.Now().Before(bound) {
			if body, err := f.scrape(); err == nil && int(metric(body, `lifeline_api_connections_refused_total{limit="per_address"}`)) >= wantRefused {
				return
			}
			if !pause.For(ctx, 100*time.Millisecond) {
				return
			}
		}
	})

	// While it lasts: the flood is refused past the per-address limit,
	// and the operator connects and destroys.
	poll.Within(t, "connections refused past the per-address limit", 30*time.Second, func() (bool, string) {
		body, err := f.scrape()
		if err != nil {
			return false, err.Error()
		}
		n := metric(body, `lifeline_api_connections_refused_total{limit="per_address"}`)
		return n > 0, strconv.FormatFloat(n, 'f', 0, 64) + " refused"
	})
	f.operatorDestroys(t, r, spare, "connection flood")
	<-ctx.Done()
	wg.Wait()
	ended.Wait()
	checkAgentCalls(t, r, calls, "connection flood")
	r.count("flood: connections dialed", int(dials.Load()))
	r.count("flood: dials that failed (refused before they completed)", int(dialErrors.Load()))

	body, err = f.scrape()
	if err != nil {
		t.Fatal(err)
	}
	refused := int(metric(body, `lifeline_api_connections_refused_total{limit="per_address"}`))
	r.count("flood: refused past the per-address limit", refused)
	r.count("flood: refused past the total limit", int(metric(body, `lifeline_api_connections_refused_total{limit="total"}`)))
	if refused < wantRefused {
		t.Errorf("%d connections refused past the per-address limit, want at least %d", refused, wantRefused)
	} else {
		r.checked("the flood past the per-address limit refused and counted")
	}
	f.checkMemoryReturns(t, r, base, peak.stop(), "connection flood")
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// floodDials bounds a flood's dials from one address, as a multiple of
// the connections it holds.
const floodDials = 20

// flood holds n idle connections from ip to addr, dialing again each one
// the controller closes, until ctx ends or it has dialed floodDials times
// n; it counts its dials and those that failed, and calls dialedAll once
// it has dialed n times (or ends before).
func flood(ctx context.Context, addr string, ip net.IP, n int, dials, failed *atomic.Int64, dialedAll func()) {
	var once sync.Once
	defer once.Do(dialedAll)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	left := floodDials * n
	closed := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	hold := func(c net.Conn) {
		defer wg.Done()
		go func() { <-ctx.Done(); c.Close() }()
		c.Read(make([]byte, 1)) // until the controller closes it, or ctx ends
		c.Close()
		closed <- struct{}{}
	}
	open := 0
	for ctx.Err() == nil {
		for ; open < n && ctx.Err() == nil; open++ {
			if left--; left < 0 {
				<-ctx.Done() // hold what is open until the flood ends
				break
			}
			if dials.Add(1); floodDials*n-left >= n {
				once.Do(dialedAll)
			}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					failed.Add(1)
				}
				open--
				if !pause.For(ctx, 10*time.Millisecond) {
					break
				}
				continue
			}
			wg.Add(1)
			go hold(c)
		}
		select {
		case <-closed:
			open--
		case <-ctx.Done():
		}
	}
}
