package controllertest

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Env is a controller served over TLS on loopback, in a namespace of its
// own on the test package's etcd (etcdtest.Main must run it).
type Env struct {
	T     testing.TB
	Ctx   context.Context
	State *state.State
	Addr  string
	CA    *pki.CA

	cfg        controller.Config
	anonymous  bool
	watchQueue int
	watchBytes int64
	// hub is the watch hub of the controller served now; the State's
	// reads ask it for its revision from any goroutine.
	hub     atomic.Pointer[watchhub.Hub]
	server  *controller.Server
	lis     net.Listener
	srv     *grpc.Server
	cleaner context.CancelFunc
	// stopHub stops the watch hub of the controller served now.
	stopHub func()
}

// Options change an Env.
type Options struct {
	// Cleaner runs the cleaner, as a real controller does.
	Cleaner bool
	// Anonymous leaves the controller without its own addresses and CA
	// (a real one has them), so that it cannot make join tokens.
	Anonymous bool
	// WatchQueue bounds each watch stream's queue in the watch hub
	// (watchhub.Config.QueueEvents); the hub's default when zero.
	WatchQueue int
	// Busy stands for the State's own report of its writes queueing
	// (controller.Config.Busy).
	Busy func() bool
	// PresenceTimeout is controller.Config.PresenceTimeout (its default
	// when zero).
	PresenceTimeout time.Duration
	// KEK is the key-encryption key the controller hands a controller
	// that joins (controller.Config.KEK): none when zero.
	KEK pki.KEK
	// Watch is controller.Config.Watch (its defaults when zero), and
	// WatchBytes the hub's bound on what all the streams hold
	// (watchhub.Config.QueueBytes; none when zero).
	Watch      controller.WatchLimits
	WatchBytes int64
	// Connections and HandshakeTimeout are controller.Config's (none,
	// and its default, when zero): the API is served on the Listener
	// they limit.
	Connections      controller.ConnLimits
	HandshakeTimeout time.Duration
	// Budgets and Storage are controller.Config's: the agents' budgets
	// (their defaults when zero) and etcd's database space as the
	// controller is told it (never tight when nil).
	Budgets controller.Budgets
	Storage func() controller.Storage
	// RevisionHistory is controller.Config.RevisionHistory (state's
	// default when zero).
	RevisionHistory int
	// Health is controller.Config.Health: the gRPC health service the
	// API serves without a credential (none when nil).
	Health *health.Server
	// DashboardURL is controller.Config.DashboardURL: the dashboard the
	// login links point to (none when empty).
	DashboardURL string
}

// New starts a controller for the test; it stops with the test, and the
// model's invariants are checked then.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	// The State's reads are at or past what the watch hub handed out, as
	// lifelined's are: a client acting on a change the hub handed it
	// finds the change when it calls.
	e := &Env{T: t}
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t), AtLeast: func() int64 {
		if h := e.hub.Load(); h != nil {
			return h.Revision()
		}
		return 0
	}})
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
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	// The model's first user, admin, as a controller's first start makes.
	if err := st.BootstrapAdmin(ctx, ""); err != nil {
		t.Fatal(err)
	}
	e.Ctx, e.State, e.CA, e.anonymous, e.watchQueue, e.watchBytes = ctx, st, ca, opts.Anonymous, opts.WatchQueue, opts.WatchBytes
	e.cfg = controller.Config{State: st, TLS: pki.ServerTLSConfig(cert), Busy: opts.Busy, PresenceTimeout: opts.PresenceTimeout,
		ID: "c-test", KEK: opts.KEK, Watch: opts.Watch, Connections: opts.Connections, HandshakeTimeout: opts.HandshakeTimeout,
		Budgets: opts.Budgets, Storage: opts.Storage, Health: opts.Health, RevisionHistory: opts.RevisionHistory,
		DashboardURL: opts.DashboardURL}
	if !opts.Anonymous {
		e.cfg.CACert = ca.CertPEM()
	}
	e.Start()
	if opts.Cleaner {
		cctx, stop := context.WithCancel(context.Background())
		e.cleaner = stop
		go state.NewCleaner(st, 200*time.Millisecond).Run(cctx)
		t.Cleanup(stop)
	}
	t.Cleanup(func() {
		e.Stop()
		snap, err := st.Snapshot(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		if err := state.CheckInvariants(snap); err != nil {
			t.Errorf("invariants broken: %v", err)
		}
	})
	return e
}

// Start serves the API, on the same address as before after a Stop.
func (e *Env) Start() {
	e.T.Helper()
	addr := e.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old port may take a moment to be free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.T.Fatal(err)
	}
	e.Addr = lis.Addr().String()
	if !e.anonymous {
		e.cfg.Addresses = []string{e.Addr}
	}
	// A watch hub of its own, as a restarted controller has: agents
	// resume their watches from what they saw before.
	hub, err := watchhub.New(watchhub.Config{Source: e.State, QueueEvents: e.watchQueue, QueueBytes: e.watchBytes, MarkKey: state.BarrierKey})
	if err != nil {
		e.T.Fatal(err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(hctx); close(done) }()
	e.cfg.Watches = hub
	e.hub.Store(hub)
	srv, err := controller.New(e.cfg)
	if err != nil {
		cancel()
		<-done
		e.T.Fatal(err)
	}
	// The server's copies of the model, run as lifelined runs them.
	ran := make(chan struct{})
	go func() { srv.Run(hctx); close(ran) }()
	e.stopHub = func() { cancel(); <-done; <-ran }
	e.lis, e.srv, e.server = lis, srv.GRPCServer(), srv
	go e.srv.Serve(srv.Listener(lis))
}

// Hub is the watch hub of the controller served now.
func (e *Env) Hub() *watchhub.Hub { return e.hub.Load() }

// Server is the controller served now, for what serves beside the API
// in its process (the dashboard).
func (e *Env) Server() *controller.Server { return e.server }

// Stop stops serving the API (the model stays): agents see the controller
// go away.
func (e *Env) Stop() {
	if e.srv != nil {
		e.srv.Stop()
		e.srv = nil
		e.stopHub()
	}
}

// Credential stores a new credential for tag (the entity must exist; a
// user must have registered) and returns it.
func (e *Env) Credential(tag string) pki.Credential {
	e.T.Helper()
	cred, hash, err := pki.NewCredential(tag)
	if err != nil {
		e.T.Fatal(err)
	}
	if kind, name, _ := names.ParseTag(tag); kind == names.KindUser {
		err = e.State.SetUserCredential(e.Ctx, name, hash)
	} else {
		err = e.State.SetCredential(e.Ctx, tag, hash)
	}
	if err != nil {
		e.T.Fatalf("set the credential of %s: %v", tag, err)
	}
	return cred
}

// User adds the named user with role, registers it with a new credential
// as ctl register does, and returns the credential.
func (e *Env) User(name string, role pb.UserRole) pki.Credential {
	e.T.Helper()
	secret, err := pki.NewSecret()
	if err != nil {
		e.T.Fatal(err)
	}
	if _, err := e.State.AddUser(e.Ctx, state.NewUser{Name: name, Role: role, CreatedBy: names.AdminUser,
		SecretHash: pki.HashSecret(secret), Expires: time.Now().Add(time.Hour)}); err != nil {
		e.T.Fatalf("AddUser(%s): %v", name, err)
	}
	cred, hash, err := pki.NewCredential(names.UserTag(name))
	if err != nil {
		e.T.Fatal(err)
	}
	prove := func(reg *pb.Registration) bool { return pki.VerifySecret(secret, reg.SecretHash) }
	if _, err := e.State.Register(e.Ctx, name, prove, hash); err != nil {
		e.T.Fatalf("Register(%s): %v", name, err)
	}
	return cred
}

// Dial connects to the controller with cred; the connection closes with
// the test.
func (e *Env) Dial(cred pki.Credential) *grpc.ClientConn {
	e.T.Helper()
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{e.Addr}, CACert: e.CA.CertPEM(), Credential: cred})
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { conn.Close() })
	return conn
}

// Agent returns an AgentService client authenticated as tag, with a fresh
// credential.
func (e *Env) Agent(tag string) pb.AgentServiceClient {
	e.T.Helper()
	return pb.NewAgentServiceClient(e.Dial(e.Credential(tag)))
}

// Operator returns an OperatorService client with a fresh admin credential.
func (e *Env) Operator() pb.OperatorServiceClient {
	e.T.Helper()
	return pb.NewOperatorServiceClient(e.Dial(e.Credential("admin")))
}
