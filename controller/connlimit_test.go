package controller_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestConnectionLimitsRefuseTheExcess: connections without a credential,
// from loopback addresses other than the agent's, past the per-address
// limit and then past the total one, are refused (closed as soon as
// accepted: their TLS handshake fails), while those admitted complete
// theirs and an agent's connection made before keeps answering. A
// connection closed gives its place back. Without the limits every
// connection was admitted, until the process ran out of descriptors.
func TestConnectionLimitsRefuseTheExcess(t *testing.T) {
	const (
		total      = 6
		perAddress = 3
	)
	e := controllertest.New(t, controllertest.Options{
		Connections: controller.ConnLimits{Max: total, PerAddress: perAddress},
		// Long enough that the connections admitted stay open through
		// the test: they never start HTTP/2.
		HandshakeTimeout: 5 * time.Minute,
	})
	if _, err := e.State.AddMachines(e.Ctx, 1); err != nil {
		t.Fatal(err)
	}
	agent := e.Agent("machine-0") // one connection, from 127.0.0.1
	if _, err := agent.GetMachine(e.Ctx, &pb.GetMachineRequest{Machine: "0"}); err != nil {
		t.Fatalf("the agent's GetMachine before the flood: %v", err)
	}
	tlsCfg, err := pki.ClientTLSConfig(e.CA.CertPEM(), apiclient.ServerName)
	if err != nil {
		t.Fatal(err)
	}
	// connect dials from ip and completes a TLS handshake: nil when the
	// connection was admitted, which it then holds open.
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	connect := func(ip net.IP) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 10 * time.Second}
		raw, err := d.DialContext(e.Ctx, "tcp", e.Addr)
		if err != nil {
			return nil, err
		}
		c := tls.Client(raw, tlsCfg)
		c.SetDeadline(time.Now().Add(time.Minute)) // a hung handshake fails the test, not hangs it
		if err := c.HandshakeContext(e.Ctx); err != nil {
			raw.Close()
			return nil, err
		}
		c.SetDeadline(time.Time{})
		held = append(held, c)
		return c, nil
	}
	a, b, local := net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3), net.IPv4(127, 0, 0, 1)

	for _, step := range []struct {
		what  string
		from  net.IP
		admit bool
	}{
		{"127.0.0.2's first", a, true},
		{"127.0.0.2's second", a, true},
		{"127.0.0.2's third", a, true},
		{"127.0.0.2's fourth, past the per-address limit", a, false},
		{"127.0.0.3's first", b, true},
		{"127.0.0.3's second, the total's sixth with the agent's", b, true},
		{"127.0.0.3's third, past the total limit", b, false},
		{"a new one from the agent's address, past the total limit", local, false},
	} {
		_, err := connect(step.from)
		if got := err == nil; got != step.admit {
			t.Errorf("%s: handshake error %v, want admitted %v", step.what, err, step.admit)
		}
	}
	if _, err := agent.GetMachine(e.Ctx, &pb.GetMachineRequest{Machine: "0"}); err != nil {
		t.Errorf("the agent's GetMachine with the limits reached: %v", err)
	}

	// One of 127.0.0.2's closed, its place is another's once the
	// controller has seen it go.
	held[0].Close()
	poll.UntilSays(t, "a new connection admitted once one was closed", func() (bool, string) {
		_, err := connect(local)
		return err == nil, fmt.Sprint(err)
	})
	if _, err := connect(a); err == nil {
		t.Errorf("127.0.0.2's connection with the total reached again: admitted, want refused")
	}
}
