package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/leader"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/version"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/provisioner"
	"github.com/lifelinehq/lifeline/provisioner/provider"
	"github.com/lifelinehq/lifeline/state"
)

// controllerFlags are the controller's flags, as given.
type controllerFlags struct {
	dataDir        string
	apiAddr        string
	metricsAddr    string
	advertise      []string
	clientConfig   string
	provider       string
	namespace      string
	log            logFlags
	debugLogLines  int
	debugLogSize   string
	etcdEndpoints  []string
	etcdCA         string
	etcdCert       string
	etcdKey        string
	hookTimeout    time.Duration
	updateStatus   time.Duration
	presence       time.Duration
	statusCache    time.Duration
	pprof          bool
	machinesDir    string
	localNetwork   string
	localAgentArgs []string
	memoryLimit    string
	joinToken      string
	resealCAKey    bool
	limits         limitFlags
	budgets        budgetFlags
	auditRetention string
	operations     operationFlags
	rollouts       rolloutFlags
	dashboard      dashboardFlags
	// set says whether a flag was given (for those that only apply to
	// embedded etcd).
	set func(name string) bool
}

func controllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run a Lifeline controller",
		Long: `Run a Lifeline controller: the API that ctl and the agents call, over TLS,
with the model in etcd (embedded in the data directory unless --etcd-endpoints
names an external cluster).

On first start it makes a CA and a server certificate in the data directory
and the user admin with its credential, and writes the client config that
ctl reads (--client-config). The client config is written again, with a new
credential for admin (an admin again), whenever it is missing at start.

Several controllers may serve one model: start each with the same
--etcd-endpoints and --namespace and its own --data-dir and addresses. The
first one's CA is stored in etcd and used by all, its key sealed with a
key-encryption key that only the controllers hold (ca-kek in the data
directory): a controller joins the others, the first time, with the join
token ctl add-controller prints (--join-file). Agents learn every live
controller's address and move to another when theirs goes. One controller,
elected through etcd, runs the provisioner and the cleaner; when it stops,
another takes over (within 8 s if it died without resigning). With the
local provider, controllers on one host share --machines-dir.

Each controller serves the web dashboard over HTTPS with its certificate
(signed by the model's CA) at --dashboard-addr, by default the API's host and
port + 2; ctl dashboard prints a one-time login link.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.set = func(name string) bool { return cmd.Flags().Changed(name) }
			return runController(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	f.budgets.add(fl)
	f.operations.add(fl)
	f.rollouts.add(fl)
	f.dashboard.add(fl)
	fl.StringVar(&f.dataDir, "data-dir", "", "directory for the controller's state: etcd data, certificates, logs (required)")
	fl.StringVar(&f.apiAddr, "api-addr", "127.0.0.1:17070", "address the API listens on")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:17071", "address /metrics is served on; empty for none")
	fl.StringSliceVar(&f.advertise, "advertise", nil, "addresses clients and agents dial (default: the API address)")
	fl.StringVar(&f.clientConfig, "client-config", "", "where to write the operator's client config (default: $LIFELINE_CONFIG, or lifeline/client.json in the user's config dir)")
	fl.StringVar(&f.provider, "provider", "local", "machine provider: local (each machine an agent process on this host) or manual (hosts join with a token)")
	fl.StringVar(&f.namespace, "namespace", "/lifeline/", "etcd key prefix under which the model lives")
	f.log.add(fl)
	fl.IntVar(&f.debugLogLines, "debug-log-lines", controller.DefaultLogRingLines, "how many log lines (its own and its agents') the controller keeps in memory for ctl debug-log; one machine at most an eighth")
	fl.StringVar(&f.debugLogSize, "debug-log-size", "32MiB", "how many bytes of log lines the controller keeps in memory for ctl debug-log")
	fl.DurationVar(&f.hookTimeout, "hook-timeout", 5*time.Minute, "how long a hook may run before its agent kills it")
	fl.DurationVar(&f.updateStatus, "update-status-interval", 5*time.Minute, "how often each unit runs update-status, jittered (0: never)")
	fl.DurationVar(&f.presence, "presence-timeout", 15*time.Second, "how long an agent may be silent before status shows it lost")
	fl.DurationVar(&f.statusCache, "status-cache-idle", 5*time.Minute, "how long the controller keeps the model decoded in memory after the last whole-model status; the first status after it reads etcd (about 2 s at 100,000 units)")
	fl.StringVar(&f.machinesDir, "machines-dir", "", "where the local provider keeps its machines (default: machines in the data directory; controllers of one model on one host share it)")
	fl.StringArrayVar(&f.localAgentArgs, "local-agent-arg", nil, "a flag for every machine agent the local provider starts, such as --local-agent-arg=--package-manager=exec:/usr/local/bin/pkg or --local-agent-arg=--metrics-addr=127.0.0.1:0 (repeatable)")
	fl.StringVar(&f.localNetwork, "local-network", "", "the local provider's machines' loopback addresses, 127.N.X.Y: give another 127.N to a second local controller on one host (default: the one its machines directory records, else "+provider.DefaultLocalNetwork+")")
	fl.StringVar(&f.memoryLimit, "memory-limit", "auto", "soft limit on the controller's memory, as GOMEMLIMIT: auto (512 MiB and 36 KiB for each unit of the most the model has had; GOMEMLIMIT instead when set), none, or a size such as 2GiB")
	fl.StringVar(&f.joinToken, "join-file", "", "file holding a controller join token (ctl add-controller), or - for stdin: how a new controller joins the model's controllers; not read once the data directory holds the key-encryption key")
	fl.BoolVar(&f.resealCAKey, "reseal-ca-key", false, "make a new key-encryption key and seal the model's CA key with it, from the CA in the data directory: for when no controller holds the key-encryption key any more")
	fl.StringVar(&f.auditRetention, "audit-retention", "90d,1000000", "how much of the audit log is kept: an age (90d, 2160h), a number of entries, or both separated by a comma; the leader prunes what is beyond")
	fl.BoolVar(&f.pprof, "pprof", false, "also serve Go's profiles at /debug/pprof/ on the metrics address, and /debug/gc (POST: collect garbage and return free memory to the system)")
	fl.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "an external etcd cluster's client URLs; embedded etcd when empty")
	fl.StringVar(&f.etcdCA, "etcd-cacert", "", "CA certificate of the external etcd cluster")
	fl.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate for the external etcd cluster")
	fl.StringVar(&f.etcdKey, "etcd-key", "", "client key for the external etcd cluster")
	f.limits.register(fl)
	return cmd
}

func (f *controllerFlags) validate() error {
	if f.dataDir == "" {
		return usageError{errors.New("--data-dir is required")}
	}
	if _, _, err := net.SplitHostPort(f.apiAddr); err != nil {
		return usageError{fmt.Errorf("--api-addr %q: %w", f.apiAddr, err)}
	}
	if err := f.dashboard.validate(); err != nil {
		return err
	}
	switch f.provider {
	case "manual", "local":
	default:
		return usageError{fmt.Errorf("unknown provider %q: use local or manual", f.provider)}
	}
	if f.localNetwork != "" {
		if f.provider != "local" {
			return usageError{errors.New("--local-network is for --provider local")}
		}
		if err := provider.CheckLocalNetwork(f.localNetwork); err != nil {
			return usageError{fmt.Errorf("--local-network: %w", err)}
		}
	}
	if len(f.localAgentArgs) > 0 && f.provider != "local" {
		return usageError{errors.New("--local-agent-arg is for --provider local: start a manual machine's agent with its flags yourself")}
	}
	for _, a := range f.localAgentArgs {
		if !strings.HasPrefix(a, "--") {
			return usageError{fmt.Errorf("--local-agent-arg %q: want a flag of lifelined machine-agent, such as --metrics-addr=127.0.0.1:0", a)}
		}
	}
	if len(f.etcdEndpoints) == 0 && f.joinToken != "" {
		return usageError{errors.New("--join-file needs --etcd-endpoints: a controller joins the others on the model's etcd")}
	}
	if f.joinToken != "" && f.resealCAKey {
		return usageError{errors.New("--join-file and --reseal-ca-key exclude each other")}
	}
	if len(f.etcdEndpoints) == 0 && (f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != "") {
		return usageError{errors.New("--etcd-cacert, --etcd-cert and --etcd-key need --etcd-endpoints")}
	}
	if _, err := parseMemoryLimit(f.memoryLimit); err != nil {
		return usageError{err}
	}
	if _, err := parseRetention(f.auditRetention); err != nil {
		return usageError{err}
	}
	if err := f.operations.validate(); err != nil {
		return usageError{err}
	}
	if _, err := f.rollouts.parse(); err != nil {
		return usageError{err}
	}
	set := f.set
	if set == nil {
		set = func(string) bool { return false }
	}
	if err := f.budgets.validate(len(f.etcdEndpoints) > 0, set); err != nil {
		return usageError{err}
	}
	if err := f.log.check(); err != nil {
		return err
	}
	if f.statusCache <= 0 {
		return usageError{fmt.Errorf("--status-cache-idle %s: want a positive duration", f.statusCache)}
	}
	if f.debugLogLines < 1 {
		return usageError{fmt.Errorf("--debug-log-lines %d: want 1 or more", f.debugLogLines)}
	}
	if _, err := parseSizeFlag("--debug-log-size", f.debugLogSize, false); err != nil {
		return usageError{err}
	}
	if !strings.HasPrefix(f.namespace, "/") || !strings.HasSuffix(f.namespace, "/") {
		return usageError{fmt.Errorf("--namespace %q must start and end with /", f.namespace)}
	}
	return nil
}

// controllerGCPercent is the controller's garbage collection target
// (GOGC) unless the environment sets one: the heap may grow to four times
// what is live between collections. At 10,000 units the collector and its
// scans of goroutine stacks were a fifth to a quarter of the controller's
// CPU at Go's default; at 200 the controller used 10-15% less CPU and
// peaked at 59-86 KiB a unit; at 300, about a sixth less again while
// destroying, peaking at 78-89 KiB a unit, within the 100 KiB the scale
// targets allow (docs/PERFORMANCE.md).
// The soft memory limit (--memory-limit, memlimit.go) bounds the peak
// when a collection finds more live than usual.
const controllerGCPercent = 300

// logRing is what --debug-log-lines and --debug-log-size say (checked by
// validate).
func (f *controllerFlags) logRing() controller.LogRingLimits {
	n, _ := parseSizeFlag("", f.debugLogSize, false)
	return controller.LogRingLimits{Lines: f.debugLogLines, Bytes: int(min(n, math.MaxInt32))}
}

func runController(ctx context.Context, f controllerFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(controllerGCPercent)
	}
	memLimit, _ := parseMemoryLimit(f.memoryLimit) // validated
	if memLimit != 0 {
		debug.SetMemoryLimit(memLimit)
	}
	// The API's connections take at most part of the process's
	// descriptors; the rest are etcd's, which exits when it cannot open
	// what it needs.
	nofile, err := raiseDescriptorLimit()
	if err != nil {
		return err
	}
	lim, err := f.limits.resolve(nofile)
	if err != nil {
		return usageError{err}
	}
	if f.clientConfig == "" {
		p, err := pki.DefaultClientConfigPath()
		if err != nil {
			return err
		}
		f.clientConfig = p
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if f.provider == "local" {
		if f.machinesDir == "" {
			f.machinesDir = filepath.Join(f.dataDir, "machines")
		}
		network, err := provider.ClaimLocalNetwork(f.machinesDir, f.localNetwork)
		if err != nil {
			return err
		}
		f.localNetwork = network
	}
	rootLogger, logOut, err := newLogger("controller", f.log)
	if err != nil {
		return err
	}
	defer logOut.Close()
	var logger hclog.Logger = rootLogger
	quietGRPC(logger)
	logger.Info("limits", "descriptors", nofile, "api_max_connections", lim.conns.Max,
		"api_max_connections_per_address", lim.conns.PerAddress)

	// etcd: embedded in the data directory, or a client of a cluster.
	var g run.Group
	var etcdClient *clientv3.Client
	etcdAccess := controller.EtcdAccess{Namespace: f.namespace, Endpoints: f.etcdEndpoints, TLS: f.etcdCA != "" || f.etcdCert != ""}
	// The watch hub, made below: the embedded member's compaction leaves
	// what it has not handed out, and the State's reads are at or past
	// it.
	var hubOf atomic.Pointer[watchhub.Hub]
	handed := func() int64 {
		if h := hubOf.Load(); h != nil {
			return h.Revision()
		}
		return 0
	}
	var storage func() controller.Storage
	if len(f.etcdEndpoints) == 0 {
		// The member's own hourly compaction is off: the controller
		// compacts it (Keep).
		srv, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(f.dataDir, "etcd"), Logger: logger.Named("etcd"),
			QuotaBytes: f.budgets.quota(), CompactionRetention: "0"})
		if err != nil {
			return err
		}
		defer srv.Close()
		etcdAccess.Endpoints = []string{srv.Endpoint()}
		storage = func() controller.Storage {
			sp := srv.Space()
			return controller.Storage{Size: sp.Size, InUse: sp.InUse, Quota: sp.Quota, NoSpace: sp.NoSpace, Tight: sp.Tight}
		}
		kctx, kcancel := context.WithCancel(context.Background())
		g.Add(func() error {
			return srv.Keep(kctx, embedetcd.SpaceConfig{Floor: handed, History: f.budgets.history(), Logger: logger.Named("etcd")})
		}, func(error) { kcancel() })
		if etcdClient, err = srv.Client(); err != nil {
			return err
		}
		stop := make(chan struct{})
		g.Add(func() error {
			select {
			case err := <-srv.Err():
				return fmt.Errorf("embedded etcd: %w", err)
			case <-stop:
				return nil
			}
		}, func(error) { close(stop) })
		logger.Info("embedded etcd started", "dir", filepath.Join(f.dataDir, "etcd"))
	} else {
		cfg := clientv3.Config{Endpoints: f.etcdEndpoints}
		if f.etcdCA != "" || f.etcdCert != "" {
			tlsCfg, err := (transport.TLSInfo{TrustedCAFile: f.etcdCA, CertFile: f.etcdCert, KeyFile: f.etcdKey}).ClientConfig()
			if err != nil {
				return fmt.Errorf("etcd TLS: %w", err)
			}
			cfg.TLS = tlsCfg
		}
		if etcdClient, err = embedetcd.NewClient(cfg); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = embedetcd.Ping(pctx, etcdClient)
		cancel()
		if err != nil {
			return fmt.Errorf("etcd cluster %s does not answer: %w", strings.Join(f.etcdEndpoints, ","), err)
		}
		logger.Info("using external etcd", "endpoints", strings.Join(f.etcdEndpoints, ","))
	}
	defer etcdClient.Close()

	// The State's reads are at or past what the watch hub handed out: an
	// agent's call about a change it was just handed finds the change.
	st, err := state.New(etcdClient, state.Config{Namespace: f.namespace, Logger: logger, RevisionHistory: f.rollouts.revisionHistory, AtLeast: handed,
		CharmStoreLimit: f.budgets.charmStoreLimit()})
	if err != nil {
		return err
	}

	// TLS: the CA and server certificate live in the data directory.
	advertise := f.advertise
	if len(advertise) == 0 {
		advertise = []string{f.apiAddr}
	}
	id, err := controllerID(f.dataDir)
	if err != nil {
		return err
	}
	logger = logger.With("controller", id)
	ca, kek, err := (&caSetup{
		st: st, dir: filepath.Join(f.dataDir, "pki"), joinToken: f.joinToken, stdin: os.Stdin, reseal: f.resealCAKey, logger: logger,
	}).run(ctx)
	if err != nil {
		return err
	}
	hosts := []string{apiclient.ServerName}
	for _, a := range append([]string{f.apiAddr}, advertise...) {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
			hosts = append(hosts, h)
		}
	}
	if hn, err := os.Hostname(); err == nil {
		hosts = append(hosts, hn)
	}
	cert, err := pki.LoadOrCreateServerCert(filepath.Join(f.dataDir, "pki"), ca, hosts)
	if err != nil {
		return err
	}
	// Listen before writing the client config, so that a taken port leaves
	// no config behind for a controller that never ran, and whoever waits
	// for the config finds the API and /metrics answering.
	lis, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	defer lis.Close()
	var ml net.Listener
	if f.metricsAddr != "" {
		if ml, err = net.Listen("tcp", f.metricsAddr); err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		defer ml.Close()
	}
	dl, dashURL, err := f.dashboard.listen(f.apiAddr, advertise, logger)
	if err != nil {
		return err
	}
	if dl != nil {
		defer dl.Close()
	}
	if err := ensureAdmin(ctx, st, id, f.clientConfig, advertise, ca.CertPEM(), logger); err != nil {
		return err
	}

	// The watch hub: one etcd watch of the model for all the agents' watch
	// streams. Added before the API, it is interrupted first (run.Group
	// interrupts in the order of Add): its streams end with Unavailable,
	// so that the API's graceful stop need not wait for them.
	hub, err := watchhub.New(watchhub.Config{Source: st, MarkKey: state.BarrierKey, Logger: logger.Named("watchhub"), QueueBytes: lim.watchTotal})
	if err != nil {
		return err
	}
	hubOf.Store(hub)
	hctx, hcancel := context.WithCancel(context.Background())
	g.Add(func() error { return hub.Run(hctx) }, func(error) { hcancel() })

	reg := prometheus.NewRegistry()
	// The collector's CPU (go_cpu_classes_gc_total_cpu_seconds_total)
	// besides the Go collector's defaults: how much of the controller's
	// CPU its garbage collection takes, which the scale harness's
	// timeline prints.
	gcCPU := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/total:cpu-seconds$`)}
	// And the heap the last collection left live (go_gc_heap_live_bytes):
	// what the controller holds, where the heap in use also counts the
	// garbage of up to four times as much (GOGC=300).
	heapLive := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	build := version.Get()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU, heapLive)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(build))
	// Readiness (health.go): the gRPC health service, NOT_SERVING until
	// the first check passes, and /readyz. Added before the API, it is
	// interrupted first: the health service says NOT_SERVING while the
	// API drains.
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	ready := &readiness{client: etcdClient, election: f.namespace + state.LeaderElection, storage: storage, health: hs, logger: logger.Named("ready")}
	rdctx, rdcancel := context.WithCancel(context.Background())
	g.Add(func() error { return ready.run(rdctx) }, func(error) { rdcancel() })
	api, err := controller.New(controller.Config{
		State: st, Watches: hub, Logger: logger, TLS: pki.ServerTLSConfig(cert), Metrics: reg,
		Addresses: advertise, CACert: ca.CertPEM(), HookTimeout: f.hookTimeout, PresenceTimeout: f.presence, ModelCacheIdle: f.statusCache,
		UpdateStatusInterval: updateStatusSetting(f.updateStatus),
		ID:                   id, KEK: kek, Etcd: etcdAccess,
		Connections: lim.conns, HandshakeTimeout: lim.handshake, IdleTimeout: lim.idle, Watch: lim.watch,
		Budgets: f.budgets.budgets(), Storage: storage, ApprovalTTL: f.operations.approvalTTL,
		Health: hs, Build: build, RevisionHistory: f.rollouts.revisionHistory,
		LogRing: f.logRing(), DashboardURL: dashURL,
	})
	if err != nil {
		return err
	}
	// From here the controller's own lines are kept for ctl debug-log too.
	rootLogger.RegisterSink(api.LogSink(hclog.LevelFromString(f.log.level)))
	actx, acancel := context.WithCancel(context.Background())
	g.Add(func() error { return api.Run(actx) }, func(error) { acancel() })
	gs := api.GRPCServer()
	g.Add(func() error {
		logger.Info("API serving", "addr", lis.Addr().String())
		return gs.Serve(api.Listener(lis))
	}, func(error) {
		// Give calls a moment to finish, then cut the streams.
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			gs.Stop()
		}
	})

	if dl != nil {
		if err := serveDashboard(&g, dl, f.dashboard, api, st, hub, cert, logger); err != nil {
			return err
		}
	}

	if ml != nil {
		mux := http.NewServeMux()
		var metrics prometheus.Gatherer = reg
		if len(f.etcdEndpoints) == 0 {
			metrics = prometheus.Gatherers{reg, etcdMetrics{}}
		}
		mux.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
		serveHealth(mux, ready)
		if f.pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
			mux.HandleFunc("/debug/gc", freeMemory)
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Add(func() error {
			logger.Info("metrics serving", "addr", ml.Addr().String())
			if err := hs.Serve(ml); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}, func(error) { hs.Close() })
	}

	if memLimit == 0 && os.Getenv("GOMEMLIMIT") == "" {
		b := &memoryBudget{floor: budgetFloor, perUnit: budgetPerUnit, units: st.UnitCount,
			live: liveHeap, set: debug.SetMemoryLimit, logger: logger}
		bctx, bcancel := context.WithCancel(context.Background())
		g.Add(func() error { return b.run(bctx) }, func(error) { bcancel() })
	}

	rctx, rcancel := context.WithCancel(context.Background())
	g.Add(func() error { return register(rctx, st, id, advertise, logger) }, func(error) { rcancel() })

	var instances provider.Provider = provider.Manual{}
	if f.provider == "local" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		instances = &provider.Local{Dir: f.machinesDir, Lifelined: self, Logger: logger, Network: f.localNetwork,
			Args: append([]string{"--log-level", f.log.level, "--log-format", f.log.format}, f.localAgentArgs...)}
	}
	prov, err := provisioner.New(provisioner.Config{
		State: st, Provider: instances, Controllers: advertise, CACert: ca.CertPEM(), Logger: logger,
		LiveControllers: st.ControllerAddresses,
	})
	if err != nil {
		return err
	}
	retention, err := parseRetention(f.auditRetention)
	if err != nil {
		return err
	}
	pruner, err := state.NewPruner(st, retention, 0)
	if err != nil {
		return err
	}
	opRetention, _ := parseAge("--operation-retention", f.operations.retention) // validated
	ops, err := controller.NewOperationsWorker(controller.OperationsWorkerConfig{
		State: st, Logger: logger, Metrics: reg, TaskLostAfter: f.operations.taskLostAfter, Retention: opRetention,
	})
	if err != nil {
		return err
	}
	gates, _ := f.rollouts.parse() // validated
	rollouts, err := controller.NewRolloutWorker(controller.RolloutWorkerConfig{State: st, Logger: logger, Metrics: reg, Gates: gates})
	if err != nil {
		return err
	}
	elector, err := controller.NewLeadershipElector(controller.LeadershipElectorConfig{State: st, Logger: logger})
	if err != nil {
		return err
	}
	// The singleton workers run in the elected controller only; the
	// gauge says whether they run here (an alert wants one leader).
	leading := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "lifeline", Name: "leader",
		Help: "1 while this controller is the elected one running the singleton workers (provisioner, cleaner, operations, rollouts and the leadership elector), else 0.",
	})
	reg.MustRegister(leading)
	lctx, lcancel := context.WithCancel(context.Background())
	g.Add(func() error {
		return leader.Run(lctx, leader.Config{
			Client: etcdClient, Election: f.namespace + state.LeaderElection, ID: id, TTL: controllerTTL, Logger: logger,
		}, func(ctx context.Context) error {
			leading.Set(1)
			defer leading.Set(0)
			var workers run.Group
			wctx, stop := context.WithCancel(ctx)
			workers.Add(func() error { <-wctx.Done(); return nil }, func(error) { stop() })
			workers.Add(func() error { return state.NewCleaner(st, 0).Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return state.NewCharmCollector(st, 0).Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return prov.Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return pruner.Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return ops.Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return rollouts.Run(wctx) }, func(error) { stop() })
			workers.Add(func() error { return elector.Run(wctx) }, func(error) { stop() })
			return workers.Run()
		})
	}, func(error) { lcancel() })

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	g.Add(func() error {
		select {
		case s := <-sigs:
			logger.Info("stopping", "signal", s.String())
		case <-ctx.Done():
		}
		return nil
	}, func(error) { signal.Stop(sigs); close(sigs) })

	if err := writePID(filepath.Join(f.dataDir, "controller.pid")); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(f.dataDir, "controller.pid"))
	return g.Run()
}

// ensureAdmin makes sure the model has its first user, admin (a model
// made before there were users gets it, keeping its operator's
// credential), and issues the user admin a new credential and writes the
// client config when the client config is missing: on first start, or
// after it was lost (the user admin is then made an admin again, should it
// have been demoted or removed: the recovery of a lost admin). A
// controller joining others that serve the model leaves the admin
// credential alone (a new one would revoke the one the operator holds).
func ensureAdmin(ctx context.Context, st *state.State, self, path string, addrs []string, caPEM []byte, logger hclog.Logger) error {
	if err := st.BootstrapAdmin(ctx, ""); err != nil {
		return fmt.Errorf("make the user admin: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("client config: %w", err)
	}
	live, err := st.Controllers(ctx)
	if err != nil {
		return err
	}
	for _, c := range live {
		if c.ID != self {
			logger.Info("joined controllers that serve the model: the operator's client config stays as it is (it reaches this controller too)",
				"controllers", len(live), "not_written", path)
			return nil
		}
	}
	cred, hash, err := pki.NewCredential(names.AdminTag)
	if err != nil {
		return err
	}
	if err := st.BootstrapAdmin(ctx, hash); err != nil {
		return fmt.Errorf("store the admin credential: %w", err)
	}
	if err := pki.WriteClientConfig(path, pki.ClientConfig{Controllers: addrs, CACert: string(caPEM), Tag: cred.Tag, Secret: cred.Secret}); err != nil {
		return err
	}
	logger.Info("wrote the operator's client config with a new admin credential", "path", path)
	return nil
}

// parseRetention parses --audit-retention: an age ("90d", "2160h"), a
// number of entries, or both separated by a comma; what is not given is
// the default's.
func parseRetention(v string) (state.AuditRetention, error) {
	r := state.DefaultAuditRetention
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			r.MaxEntries = n
			continue
		}
		if days, ok := strings.CutSuffix(part, "d"); ok {
			n, err := strconv.Atoi(days)
			if err != nil {
				return r, fmt.Errorf("--audit-retention %q: %q is neither an age nor a number of entries", v, part)
			}
			r.MaxAge = time.Duration(n) * 24 * time.Hour
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return r, fmt.Errorf("--audit-retention %q: %q is neither an age nor a number of entries", v, part)
		}
		r.MaxAge = d
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("--audit-retention %q: %w", v, err)
	}
	return r, nil
}

func writePID(path string) error {
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	return nil
}

// etcdMetrics gathers the embedded etcd member's own metrics (its WAL's
// fsync and its backend's commit durations, its proposals pending and
// applied, its slow applies), which etcd registers with Prometheus's
// default registry: every family named etcd_*. They are served only when
// etcd is embedded: an external cluster serves its own.
type etcdMetrics struct{}

func (etcdMetrics) Gather() ([]*dto.MetricFamily, error) {
	all, err := prometheus.DefaultGatherer.Gather()
	out := all[:0]
	for _, mf := range all {
		if strings.HasPrefix(mf.GetName(), "etcd_") {
			out = append(out, mf)
		}
	}
	return out, err
}

// updateStatusSetting is controller.Config.UpdateStatusInterval for the
// flag's value: 0 (never) is negative there, where 0 is the default.
func updateStatusSetting(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
