package main_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"net"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// metricValue reads one sample of /metrics at addr, -1 when it is not
// there.
func metricValue(t *testing.T, addr, sample string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	m := re.FindStringSubmatch(getMetrics(t, addr))
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", sample, err)
	}
	return v
}

// TestConnectionFloodIsRefused floods a controller with embedded etcd,
// whose process may hold 1,024 descriptors, with 1,000 idle connections
// from one address that present nothing, not even a TLS handshake. The
// connections past the per-address limit (a quarter of half the
// descriptors, by default) are refused as soon as they are accepted, and
// counted; the rest are closed when the handshake deadline passes.
// Meanwhile the operator connects and calls, an agent's connection keeps
// answering, and the controller runs on. Without the limits the flood
// took every descriptor: nothing new could connect, and etcd's next file
// to open stopped the controller.
func TestConnectionFloodIsRefused(t *testing.T) {
	const (
		nofile = 1024
		flood  = 1000
	)
	dir := t.TempDir()
	metricsAddr, cfg := startControllerLimited(t, dir, nofile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	op := operator(t, cfg)
	added, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true}, waitForReady()...)
	if err != nil {
		t.Fatalf("AddMachines: %v", err)
	}
	agentCfg, err := e2etest.JoinMachine(ctx, added.JoinTokens[0])
	if err != nil {
		t.Fatal(err)
	}
	agentConn, err := apiclient.Dial(apiclient.FromClientConfig(agentCfg))
	if err != nil {
		t.Fatal(err)
	}
	defer agentConn.Close()
	agent := pb.NewAgentServiceClient(agentConn)
	if _, err := agent.GetAgentSettings(ctx, &pb.GetAgentSettingsRequest{}); err != nil {
		t.Fatalf("the agent's GetAgentSettings before the flood: %v", err)
	}
	if got := metricValue(t, metricsAddr, `lifeline_api_connections_limit{limit="per_address"}`); got != nofile/2/4 {
		t.Errorf("the per-address limit is %v, want %d (a quarter of half the descriptor limit)", got, nofile/2/4)
	}

	// The flood: from 127.0.0.2, the agents' and the operator's being
	// 127.0.0.1.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := d.DialContext(ctx, "tcp", cfg.Controllers[0])
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused before the dial returned
		}
		if err != nil {
			t.Fatalf("dial %d of the flood: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	poll.Within(t, "the flood past the per-address limit refused", 30*time.Second, func() (bool, string) {
		n := metricValue(t, metricsAddr, `lifeline_api_connections_refused_total{limit="per_address"}`)
		return n >= flood-nofile/2/4, strconv.FormatFloat(n, 'f', 0, 64) + " refused"
	})
	if open := metricValue(t, metricsAddr, "lifeline_api_connections"); open > nofile/2/4+2 {
		t.Errorf("%v connections open during the flood, want at most the flood's %d and the test's own 2", open, nofile/2/4)
	}

	// During the flood: the agent's calls answer, and the operator
	// connects anew and calls.
	if _, err := agent.GetAgentSettings(ctx, &pb.GetAgentSettingsRequest{}); err != nil {
		t.Errorf("the agent's GetAgentSettings during the flood: %v", err)
	}
	fresh, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if _, err := pb.NewOperatorServiceClient(fresh).Status(sctx, &pb.StatusRequest{}, waitForReady()...); err != nil {
		t.Errorf("the operator's Status on a new connection during the flood: %v", err)
	}

	// A connection that completes TLS and starts nothing more is closed
	// at the handshake deadline, as the flood's admitted ones are.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.CACert))
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", cfg.Controllers[0],
		&tls.Config{RootCAs: pool, ServerName: apiclient.ServerName, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS handshake during the flood: %v", err)
	}
	defer tc.Close()
	tc.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := tc.Read(make([]byte, 1024)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		// The server's settings frame may come first; then the close.
		if err == nil {
			_, err = tc.Read(make([]byte, 1024))
		}
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a connection that never started HTTP/2 read %v, want it closed within the handshake deadline", err)
		}
	}
	// The test's own three remain.
	poll.Within(t, "the idle flood closed at the handshake deadline", time.Minute, func() (bool, string) {
		open := metricValue(t, metricsAddr, "lifeline_api_connections")
		return open <= 3, strconv.FormatFloat(open, 'f', 0, 64) + " open"
	})
	if _, err := agent.GetAgentSettings(ctx, &pb.GetAgentSettingsRequest{}); err != nil {
		t.Errorf("the agent's GetAgentSettings after the flood: %v", err)
	}
	if _, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1}); err != nil {
		t.Errorf("the operator's AddMachines after the flood: %v", err)
	}
}
