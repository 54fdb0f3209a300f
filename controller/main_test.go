package controller_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/apiclient"
	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/etcdtest"
	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// env is a controller served over TLS on loopback, with its own namespace.
type env struct {
	t    *testing.T
	ctx  context.Context
	st   *state.State
	addr string
	ca   *pki.CA
}

func newEnv(t *testing.T) *env { return startEnv(t, false) }

// newEnvWithAddresses is newEnv with a controller that knows its address
// and CA, as a real one does, so that it can make join tokens.
func newEnvWithAddresses(t *testing.T) *env { return startEnv(t, true) }

func startEnv(t *testing.T, withAddresses bool) *env {
	t.Helper()
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("lifeline test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServerCert([]string{apiclient.ServerName}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tlsKeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.Config{State: st, TLS: pki.ServerTLSConfig(cert)}
	if withAddresses {
		cfg.Addresses, cfg.CACert = []string{lis.Addr().String()}, ca.CertPEM()
	}
	srv, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := srv.GRPCServer()
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	e := &env{t: t, ctx: etcdtest.Context(t), st: st, addr: lis.Addr().String(), ca: ca}
	t.Cleanup(func() {
		snap, err := st.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := state.CheckInvariants(snap); err != nil {
			t.Errorf("invariants broken: %v", err)
		}
	})
	return e
}

// conn dials the controller as tag, storing a fresh credential for it
// (the entity must exist).
func (e *env) conn(tag string) *grpc.ClientConn {
	e.t.Helper()
	cred, hash, err := pki.NewCredential(tag)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.SetCredential(e.ctx, tag, hash); err != nil {
		e.t.Fatalf("SetCredential(%s): %v", tag, err)
	}
	return e.dial(cred)
}

func (e *env) dial(cred pki.Credential) *grpc.ClientConn {
	e.t.Helper()
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{e.addr}, CACert: e.ca.CertPEM(), Credential: cred})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

func (e *env) admin() pb.OperatorServiceClient { return pb.NewOperatorServiceClient(e.conn("admin")) }

func (e *env) agent(tag string) pb.AgentServiceClient { return pb.NewAgentServiceClient(e.conn(tag)) }

// wantCode checks err's status code and that its message says msg.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != code {
		t.Fatalf("%s = %v, want code %v", what, err, code)
	}
	if msg != "" && !contains(s.Message(), msg) {
		t.Errorf("%s = %q, want it to say %q", what, s.Message(), msg)
	}
}
