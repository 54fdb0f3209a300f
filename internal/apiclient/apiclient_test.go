package apiclient_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
)

// TestDialFailsOverAndSendsTheCredential dials two addresses, the first of
// which nobody listens on: calls reach the second, over TLS verified
// against the CA under the controllers' shared name, with the credential.
func TestDialFailsOverAndSendsTheCredential(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	tags := make(chan string, 1)
	addr, _ := healthServer(t, ca, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(pki.MetadataTag); len(v) == 1 {
			select {
			case tags <- v[0]:
			default:
			}
		}
		return h(ctx, req)
	}))

	cred, _, err := pki.NewCredential("machine-7")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{deadAddr, addr}, CACert: ca.CertPEM(), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Check through the second address = %v", err)
	}
	if got := <-tags; got != "machine-7" {
		t.Errorf("the server saw tag %q, want machine-7", got)
	}

	other, err := pki.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := apiclient.Dial(apiclient.Config{Addresses: []string{addr}, CACert: other.CertPEM(), Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	if _, err := healthpb.NewHealthClient(bad).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Errorf("Check with another CA pinned succeeded, want a TLS failure")
	}
}

// TestAsSharesAConnection makes calls with two credentials over one
// connection that has none of its own.
func TestAsSharesAConnection(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tags := make(chan []string, 2)
	addr, _ := healthServer(t, ca, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		tags <- md.Get(pki.MetadataTag)
		return h(ctx, req)
	}))
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{addr}, CACert: ca.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tag := range []string{"machine-1", "unit-kv/0"} {
		cred, _, err := pki.NewCredential(tag)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := healthpb.NewHealthClient(apiclient.As(conn, cred)).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
		if got := <-tags; len(got) != 1 || got[0] != tag {
			t.Errorf("the server saw tags %v, want exactly [%s]", got, tag)
		}
	}
}

// TestAsRenewableReportsRefusals: calls made with a renewable credential
// carry the one current as each starts; a unary call or a stream the
// controller refuses as Unauthenticated is reported with the credential it
// carried, and once the holder replaced it the calls go through.
func TestAsRenewableReportsRefusals(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stale, _, err := pki.NewCredential("unit-kv/0")
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := pki.NewCredential("unit-kv/0")
	if err != nil {
		t.Fatal(err)
	}
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get(pki.MetadataSecret); len(got) != 1 || got[0] != fresh.Secret {
			return status.Error(codes.Unauthenticated, "credential of unit-kv/0 is not valid")
		}
		return nil
	}
	addr, _ := healthServer(t, ca,
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{addr}, CACert: ca.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cred := &heldCredential{cur: stale}
	client := healthpb.NewHealthClient(apiclient.AsRenewable(conn, cred))
	watch := func() error {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		stream, err := client.Watch(wctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil {
			_, err = stream.Recv()
		}
		return err
	}
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"Check", func() error {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			return err
		}},
		{"Watch", watch},
	} {
		cred.set(stale)
		if err := call.do(); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s with the stale credential = %v, want Unauthenticated", call.name, err)
		}
		if got := cred.takeRefused(); len(got) != 1 || got[0] != stale {
			t.Errorf("%s refused: reported %v, want the stale credential once", call.name, got)
		}
		cred.set(fresh)
		if err := call.do(); err != nil {
			t.Errorf("%s with the fresh credential = %v, want nil", call.name, err)
		}
		if got := cred.takeRefused(); len(got) != 0 {
			t.Errorf("%s accepted: reported %v refused, want none", call.name, got)
		}
	}
}

// heldCredential is a Renewable whose credential the test sets, recording
// the refusals reported.
type heldCredential struct {
	mu      sync.Mutex
	cur     pki.Credential
	refused []pki.Credential
}

func (h *heldCredential) Current() pki.Credential {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

func (h *heldCredential) Refused(c pki.Credential) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused = append(h.refused, c)
}

func (h *heldCredential) set(c pki.Credential) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur = c
}

func (h *heldCredential) takeRefused() []pki.Credential {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.refused
	h.refused = nil
	return r
}

// healthServer serves the health service over TLS with a certificate of ca
// (and opts), on a new loopback port; stop ends it.
func healthServer(t *testing.T, ca *pki.CA, opts ...grpc.ServerOption) (addr string, stop func()) {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueServerCert([]string{apiclient.ServerName}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(pki.ServerTLSConfig(cert)))}, opts...)...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String(), g.Stop
}

// A connection told of new controllers (Follow) moves to them when the one
// it used goes, and saves what it learned.
func TestFollowMovesToNewControllers(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first, stopFirst := healthServer(t, ca)
	second, _ := healthServer(t, ca)
	conn, err := apiclient.DialConn(apiclient.Config{Addresses: []string{first}, CACert: ca.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(what string) {
		t.Helper()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("Check %s: %v", what, err)
		}
	}
	check("through the first controller")

	saved := make(chan []string, 1)
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	go conn.Follow(fctx, 50*time.Millisecond, func(context.Context) ([]string, error) {
		return []string{second, first}, nil
	}, func(addrs []string) error { saved <- addrs; return nil })
	select {
	case got := <-saved:
		if len(got) != 2 || got[0] != second {
			t.Errorf("saved %v, want [%s %s]", got, second, first)
		}
	case <-ctx.Done():
		t.Fatal("Follow saved nothing")
	}
	stopFirst()
	// A call racing the first controller's going may fail, as any call in
	// flight then would; the next ones reach the second.
	var lastErr error
	for range 50 {
		if _, lastErr = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); lastErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("Check after the first controller went: %v", lastErr)
	}
	if conn.SetAddresses([]string{first, second}) {
		t.Error("SetAddresses of the same set in another order reported a change")
	}
	if conn.SetAddresses(nil) {
		t.Error("SetAddresses(nil) reported a change")
	}
}
