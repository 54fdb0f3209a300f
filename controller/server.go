package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"

	"github.com/lifelinehq/lifeline/controller/modelcache"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/version"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Config configures a Server.
type Config struct {
	State *state.State
	// Watches serves the agents' watch streams from one watch of the
	// model; required. The caller runs it, with state.BarrierKey as its
	// mark key: the barriers ctl wait asks for reach the agents through
	// it.
	Watches *watchhub.Hub
	Logger  hclog.Logger
	// TLS is the server's TLS configuration; required.
	TLS *tls.Config
	// Metrics registers the API's metrics; none when nil.
	Metrics prometheus.Registerer
	// DefaultMaxWait is how long a forced destroy waits for agents when the
	// operator names no wait; a minute when zero.
	DefaultMaxWait time.Duration
	// HookTimeout bounds every hook's run, for the agents; 5 minutes when
	// zero.
	HookTimeout time.Duration
	// UpdateStatusInterval is how often each unit runs update-status, for
	// the agents; 5 minutes when zero, never when negative.
	UpdateStatusInterval time.Duration
	// PresenceTimeout is how long an agent may go without a ping before it
	// counts as lost; 15 s when zero.
	PresenceTimeout time.Duration
	// Addresses are the controller addresses agents are told to dial, and
	// CACert the PEM of the CA they verify it with (for join tokens).
	Addresses []string
	CACert    []byte
	// Busy reports whether the controller's writes queue, when it
	// declines progress reports; State.Busy when nil.
	Busy func() bool
	// ID is this controller's id, recorded in the join tokens it issues
	// and in audit entries, and named by WhoAmI and the status.
	ID string
	// KEK is the key-encryption key of the model's CA key, which
	// JoinController hands a controller that presents a join token; zero
	// when this controller holds none that opens the key stored.
	KEK pki.KEK
	// Etcd says how this controller reaches the model's etcd, for the
	// command ctl add-controller prints.
	Etcd EtcdAccess
	// Connections bound the connections Listener admits; none when
	// zero.
	Connections ConnLimits
	// HandshakeTimeout bounds how long a new connection may take to
	// complete its TLS handshake and start HTTP/2 (the client's preface
	// and settings): a connection that sends nothing is closed then;
	// 10 s when zero.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has carried no call for that
	// long (an agent's always carries its presence and watch streams);
	// 5 minutes when zero.
	IdleTimeout time.Duration
	// Watch bounds the agents' watch streams: what they may hold queued
	// and how many each may open (watchlimit.go).
	Watch WatchLimits
	// Budgets bound what each agent credential writes (budget.go).
	Budgets Budgets
	// Storage reports etcd's database space (storage.go): while it is
	// near its quota the controller takes only writes that shrink the
	// model. Never tight when nil.
	Storage func() Storage
	// ApprovalTTL is how long an operation awaits approval, and then
	// execution once approved; state.DefaultApprovalTTL when zero.
	ApprovalTTL time.Duration
	// Health is the standard gRPC health service, served without a
	// credential on the API; none when nil. The caller sets its statuses
	// (lifelined: SERVING while the controller is ready).
	Health *health.Server
	// Build is what this controller's binary is, which Version answers;
	// version.Get() when its Version is empty.
	Build version.Info
	// RevisionHistory is how many revisions of each service's spec are
	// kept, at least (state.SpecChange.History); the default when zero.
	RevisionHistory int
	// LogRing bounds the log lines kept for ctl debug-log (logring.go).
	LogRing LogRingLimits
	// DashboardURL is the dashboard this controller serves
	// ("https://host:port"), which DashboardLogin's links point to; ""
	// when it serves none.
	DashboardURL string
	// ModelCacheIdle is how long the decoded model kept for the
	// whole-model status (modelcache) is kept after the last such call,
	// and ModelCacheWait how long a call waits for it to reach the
	// model's current revision before reading etcd instead; modelcache's
	// defaults (5 minutes, 2 s) when zero.
	ModelCacheIdle, ModelCacheWait time.Duration
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case c.State == nil:
		return errors.New("controller: no state")
	case c.Watches == nil:
		return errors.New("controller: no watch hub")
	case c.TLS == nil:
		return errors.New("controller: no TLS configuration: the API is served over TLS only")
	}
	return nil
}

// Server implements the API.
type Server struct {
	pb.UnimplementedOperatorServiceServer
	agentServer

	st      *state.State
	logger  hclog.Logger
	cfg     Config
	metrics *metrics
	creds   *credMirror
	// holders is the copy of the presence keys' last changes that ends
	// presence streams taken over.
	holders *presenceHolders
	// models keeps the decoded model for the whole-model status while
	// it is asked for.
	models *modelcache.Cache
	// rels keeps what authorization needs of the relations it read.
	rels relationCache
	// workers run the unary calls' handlers.
	workers *handlerWorkers
	// conns count the API's connections (Listener).
	conns *connMetrics
	// watchers are the agents' watch streams, each charged to its
	// caller's budget (watchlimit.go).
	watchers *watchers
	// budgets keep the agents' budgets, and limits count what they and
	// the storage refuse.
	budgets *budgetBook
	limits  *limitMetrics
	// refusals rate-limits the refused calls recorded in the audit log.
	refusals refusalLimits
	// registrations rate-limits RegistrationService's calls, which come
	// without a credential, and health the health service's.
	registrations *rate.Limiter
	health        *healthGate
	// follows bounds the open audit streams that follow the log.
	follows auditFollows
	// actions keeps charms' actions parsed (operations.go).
	actions actionsCache
	// logFollows bounds the open TaskLogs streams that follow logs.
	logFollows logFollows
	// logs keeps the recent log lines of the controller and its machine
	// agents (debuglog.go), and debugFollows bounds the DebugLog streams
	// that follow them.
	logs         *logRing
	debugFollows logFollows
	// shipUnits remembers the units' machines for ShipLogs.
	shipUnits shipUnits
	// dashLogins rate-limits DashboardLogin a user.
	dashLogins dashboardLogins
	// addrs is the list of controller addresses last read
	// (controllerAddresses).
	addrs struct {
		mu   sync.Mutex
		at   time.Time
		list []string
	}
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.DefaultMaxWait == 0 {
		cfg.DefaultMaxWait = time.Minute
	}
	if cfg.HookTimeout == 0 {
		cfg.HookTimeout = 5 * time.Minute
	}
	if cfg.UpdateStatusInterval == 0 {
		cfg.UpdateStatusInterval = 5 * time.Minute
	}
	if cfg.PresenceTimeout == 0 {
		cfg.PresenceTimeout = 15 * time.Second
	}
	if cfg.Busy == nil {
		cfg.Busy = cfg.State.Busy
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	cfg.Watch = cfg.Watch.withDefaults()
	if cfg.Build.Version == "" {
		cfg.Build = version.Get()
	}
	s := &Server{st: cfg.State, logger: cfg.Logger.Named("api"), cfg: cfg, metrics: newMetrics(cfg.Metrics, cfg.State, cfg.Watches),
		logs:         newLogRing(cfg.LogRing),
		debugFollows: logFollows{max: maxDebugLogFollows, perUser: maxDebugLogFollowsPerUser, what: "the debug log"}}
	s.conns = newConnMetrics(cfg.Metrics, cfg.Connections)
	s.watchers = newWatchers(cfg.Watches, cfg.Watch, cfg.Metrics, s.logger)
	s.creds = newCredMirror(cfg.Watches, s.logger)
	s.holders = newPresenceHolders(cfg.Watches, s.logger)
	models, err := modelcache.New(modelcache.Config{Hub: cfg.Watches, Logger: s.logger.Named("model-cache"),
		Progress: cfg.State.RequestProgress, Idle: cfg.ModelCacheIdle, Wait: cfg.ModelCacheWait})
	if err != nil {
		return nil, err
	}
	s.models = models
	registerModelCacheMetrics(cfg.Metrics, models)
	s.registrations = rate.NewLimiter(registrationRate, registrationBurst)
	s.health = newHealthGate()
	s.workers = newHandlerWorkers(maxHandlerWorkers, workerIdle)
	s.budgets = newBudgetBook(cfg.Budgets, s.logger)
	s.limits = newLimitMetrics(cfg.Metrics, cfg.Storage)
	s.agentServer.s = s
	return s, nil
}

// readBufferSize is the read buffer of each connection to the API.
const readBufferSize = 8 << 10

// writeBufferSize is the write buffer of each connection to the API: a
// connection takes one from a pool while it writes and gives it back when
// it has sent all it had. At 10,000 units destroyed on 1,000 machines
// nearly every connection was writing at once, each holding gRPC's
// default 32 KiB: 31 MiB live, which the collector at GOGC=300 let grow
// to four times that before collecting. At 8 KiB the controller's peak
// fell from 86–115 KiB a unit (mean 97) to 75–92 (mean 83) in five runs
// each, the destroy's CPU and system calls the same. An agent's messages
// are small; a long answer (a status of 10,000 units) is sent in more
// writes.
const writeBufferSize = 8 << 10

// streamWindow and connWindow are the flow-control windows of a stream
// and of a connection to the API: what a client may send before the
// controller reads it. A charm upload over a link of 50 ms round trip
// moves at up to 20 MiB a second.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// keepaliveTime and keepaliveTimeout are when the controller pings a
// silent connection, and how long it waits for the answer.
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
)

// Run keeps the server's copies of the credentials and of the presence
// keys' changes current, from the watch hub, and the decoded model while
// the whole-model status is asked for (modelcache), until ctx ends (or
// the hub stops, after which calls read etcd). Calls answer without them,
// reading etcd, until their first listing. When ctx ends it stops the
// handler workers too, and returns once the copies and every worker have
// ended (a worker after the call it runs).
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.creds.run(ctx) })
	wg.Go(func() { s.holders.run(ctx) })
	wg.Go(func() { s.models.Run(ctx) })
	wg.Wait()
	<-ctx.Done()
	s.workers.stop()
	return nil
}

// GRPCServer returns a gRPC server with the services registered, serving
// TLS only and authenticating every call (ControllerJoinService's and
// MachineJoinService's by the join token it carries) but the health
// service's (Config.Health). The caller serves and stops it.
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(s.cfg.TLS)),
		grpc.ChainUnaryInterceptor(s.metrics.grpc.UnaryServerInterceptor(), s.unaryInterceptor, s.budgetUnary),
		grpc.ChainStreamInterceptor(s.metrics.grpc.StreamServerInterceptor(), s.streamInterceptor, s.budgetStream),
		grpc.MaxRecvMsgSize(4 << 20),
		// Each connection keeps its read buffer for as long as it lives:
		// 32 KiB by default, 41 MiB for 1,250 agents at 10,000 units. The
		// agents' messages are small; an operator's charm upload takes a
		// few more reads.
		grpc.ReadBufferSize(readBufferSize),
		grpc.WriteBufferSize(writeBufferSize),
		// Fixed flow-control windows, as the agents' (apiclient). With
		// gRPC's dynamic ones each side pings the other whenever data
		// comes after a quiet spell, to estimate the link's bandwidth,
		// and answers the other's pings: frames, reads, writes and
		// wake-ups on every agent's connection whenever the model
		// changes. Fixed, the controller made 29% fewer reads and 12%
		// fewer writes over a scale run, its agents 38% and 45% fewer.
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		// A client may ping every 10 s at most (the agents ping every
		// 30 s, with or without a call); one that pings more often is
		// sent away.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A connection silent for a minute is pinged, and closed when the
		// ping is not answered within 20 s: a peer gone without closing
		// (a machine powered off, a cut link) frees its descriptor and
		// its streams. One that carries no call for IdleTimeout is
		// closed too (GOAWAY; a client dials again for its next call).
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: s.cfg.IdleTimeout, Time: keepaliveTime, Timeout: keepaliveTimeout,
		}),
		// A connection that has not completed its TLS handshake and
		// started HTTP/2 within HandshakeTimeout is closed.
		grpc.ConnectionTimeout(s.cfg.HandshakeTimeout),
	}, opts...)
	g := grpc.NewServer(opts...)
	pb.RegisterOperatorServiceServer(g, s)
	pb.RegisterAgentServiceServer(g, &s.agentServer)
	pb.RegisterControllerJoinServiceServer(g, &joinServer{s: s})
	pb.RegisterMachineJoinServiceServer(g, &machineJoinServer{s: s})
	pb.RegisterRegistrationServiceServer(g, &registrationServer{s: s})
	registerHealth(g, s.cfg.Health)
	return g
}
