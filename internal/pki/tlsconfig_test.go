package pki

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

func TestTLSHandshake(t *testing.T) {
	ca := newTestCA(t)
	otherCA := newTestCA(t)
	serverCert, err := LoadOrCreateServerCert(t.TempDir(), ca, []string{"ctl.example.com", "10.0.0.5"})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name       string
		network    string
		addr       string
		clientCA   *CA
		serverName string
		wantErr    string // empty for success
	}{
		{name: "IP from the dialed address", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca},
		{name: "IPv6 from the dialed address", network: "tcp6", addr: "[::1]:0", clientCA: ca},
		{name: "localhost", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca, serverName: "localhost"},
		{name: "requested name", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca, serverName: "ctl.example.com"},
		{name: "requested IP", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca, serverName: "10.0.0.5"},
		{
			name: "other CA", network: "tcp4", addr: "127.0.0.1:0", clientCA: otherCA,
			wantErr: "certificate signed by unknown authority",
		},
		{
			name: "wrong host", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca, serverName: "evil.example.com",
			wantErr: "certificate is valid for",
		},
		{
			name: "wrong IP", network: "tcp4", addr: "127.0.0.1:0", clientCA: ca, serverName: "10.0.0.6",
			wantErr: "certificate is valid for",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.addr)
			if err != nil {
				t.Skipf("listen on %s: %v", tc.addr, err) // no IPv6 here
			}
			defer ln.Close()
			serverErr := make(chan error, 1)
			go func() {
				serverErr <- serveOneHandshake(ln, ServerTLSConfig(serverCert))
			}()

			clientCfg, err := ClientTLSConfig(tc.clientCA.CertPEM(), tc.serverName)
			if err != nil {
				t.Fatalf("ClientTLSConfig() error = %v", err)
			}
			dialer := &net.Dialer{Timeout: 10 * time.Second}
			conn, err := tls.DialWithDialer(dialer, tc.network, ln.Addr().String(), clientCfg)
			if tc.wantErr != "" {
				if err == nil {
					conn.Close()
					t.Fatalf("handshake with %s = success, want an error containing %q", ln.Addr(), tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("handshake with %s error = %v, want one containing %q", ln.Addr(), err, tc.wantErr)
				}
				<-serverErr
				return
			}
			if err != nil {
				t.Fatalf("handshake with %s error = %v, want success", ln.Addr(), err)
			}
			defer conn.Close()
			state := conn.ConnectionState()
			if got, want := state.Version, uint16(tls.VersionTLS13); got != want {
				t.Errorf("negotiated TLS version = %#x, want %#x", got, want)
			}
			if got, want := state.NegotiatedProtocol, "h2"; got != want {
				t.Errorf("negotiated protocol = %q, want %q", got, want)
			}
			if err := <-serverErr; err != nil {
				t.Errorf("server handshake error = %v, want nil", err)
			}
		})
	}
}

// serveOneHandshake accepts one connection on ln and completes a TLS
// handshake on it.
func serveOneHandshake(ln net.Listener, cfg *tls.Config) error {
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	return tls.Server(conn, cfg).Handshake()
}

func TestTLSClientRefusesOldVersion(t *testing.T) {
	ca := newTestCA(t)
	serverCert, err := LoadOrCreateServerCert(t.TempDir(), ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() { serverErr <- serveOneHandshake(ln, ServerTLSConfig(serverCert)) }()

	clientCfg, err := ClientTLSConfig(ca.CertPEM(), "")
	if err != nil {
		t.Fatal(err)
	}
	clientCfg.MinVersion, clientCfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp4", ln.Addr().String(), clientCfg)
	if err == nil {
		conn.Close()
		t.Errorf("TLS 1.2 handshake with ServerTLSConfig = success, want an error")
	}
	<-serverErr
}

func TestClientTLSConfigErrors(t *testing.T) {
	ca := newTestCA(t)
	leafPEM, keyPEM, err := ca.IssueServerCert(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		caPEM []byte
		want  string
	}{
		{"empty", nil, "no PEM-encoded certificate"},
		{"garbage", []byte("hello"), "no PEM-encoded certificate"},
		{"key", keyPEM, `unexpected PEM block "PRIVATE KEY"`},
		{"leaf certificate", leafPEM, "is not a CA certificate"},
		{"CA then key", append(append([]byte{}, ca.CertPEM()...), keyPEM...), `unexpected PEM block "PRIVATE KEY"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ClientTLSConfig(tc.caPEM, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ClientTLSConfig(%s) error = %v, want one containing %q", tc.name, err, tc.want)
			}
		})
	}
}
