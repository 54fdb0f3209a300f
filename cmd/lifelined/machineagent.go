package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/logship"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/version"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// followEvery is how often a machine agent asks which controllers live.
const followEvery = 30 * time.Second

type machineAgentFlags struct {
	dataDir     string
	agentConfig string
	joinFile    string
	join        string
	controllers []string
	address     string
	log         logFlags
	packages    string
	metricsAddr string
}

func machineAgentCommand() *cobra.Command {
	var f machineAgentFlags
	cmd := &cobra.Command{
		Use:   "machine-agent",
		Short: "Run a machine's agent: the units assigned to it, and their hooks",
		Long: `Run the agent of one machine: it keeps the machine present at the controller,
runs an agent for every unit assigned to it (and their subordinates), and
stops once the machine is dead.

A machine the local provider starts gets its agent config from the
controller. On a host you bring yourself (ctl add-machine --manual), start
it once with the join token ctl printed, in a file or on stdin (never on
the command line, where ps shows it): the token joins once, before it
expires, and the agent makes the machine's credential and keeps it in the
data directory, so later starts need only --data-dir:

  lifelined machine-agent --join-file token.txt --controller 10.0.0.1:17070 --data-dir /var/lib/lifeline/machine
  lifelined machine-agent --data-dir /var/lib/lifeline/machine

One agent runs a machine: another started for it (a copy of the host, or
of the data directory) is refused while the first is present, and stops.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMachineAgent(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "", "the machine agent's directory (required)")
	fl.StringVar(&f.agentConfig, "agent-config", "", "file with the controllers, their CA and the machine's credential (default: agent.json in the data directory)")
	fl.StringVar(&f.joinFile, "join-file", "", "a file holding a join token from ctl add-machine --manual or ctl join-token, - for stdin (first start only)")
	fl.StringVar(&f.join, "join", "", "")
	_ = fl.MarkHidden("join") // refused with a sentence: see runMachineAgent
	fl.StringSliceVar(&f.controllers, "controller", nil, "controller addresses to dial, before those the token or config names")
	fl.StringVar(&f.address, "address", "127.0.0.1", "the machine's address, given to its units")
	f.log.add(fl)
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics (the hooks run, by name and result, with their durations) at /metrics on this address; port 0 picks one, written to metrics.addr in the data directory")
	fl.StringVar(&f.packages, "package-manager", "none", "how the units' package claims are carried out: apt (dpkg-query and apt-get), none (refused: the unit shows the error) or exec:PATH (a program with query, install and remove verbs)")
	return cmd
}

func runMachineAgent(ctx context.Context, f machineAgentFlags) error {
	if f.dataDir == "" {
		return usageError{errors.New("--data-dir is required")}
	}
	if f.join != "" {
		return usageError{errors.New("--join puts the token on the command line, which every user of the host can read (ps): give it in a file, or on stdin (--join-file FILE, --join-file -)")}
	}
	// None by default: an agent that started installing packages with
	// apt on a host whose operator never asked for it would surprise.
	pkgs, err := hostexec.ParsePackageManager(f.packages)
	if err != nil {
		return usageError{err}
	}
	logger, logOut, err := newLogger("machine-agent", f.log)
	if err != nil {
		return err
	}
	defer logOut.Close()
	quietGRPC(logger)
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	path := f.agentConfig
	if path == "" {
		path = filepath.Join(f.dataDir, "agent.json")
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.joinFile != "" {
		if _, err := os.Stat(path); err == nil {
			logger.Warn("already joined: the join token is ignored, the agent config is used", "config", path)
		} else {
			tok, err := readJoinToken(f.joinFile, os.Stdin)
			if err != nil {
				return err
			}
			if err := joinMachine(ctx, logger, path, tok, f.controllers); err != nil {
				return err
			}
		}
	}
	cfg, err := pki.ReadClientConfig(path)
	if err != nil {
		return err
	}
	kind, id, _ := names.ParseTag(cfg.Tag)
	if kind != names.KindMachine {
		return fmt.Errorf("agent config %s holds the credential of %s, not of a machine", path, cfg.Tag)
	}
	var addrs []string
	for _, a := range append(append([]string(nil), f.controllers...), cfg.Controllers...) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	cfg.Controllers = addrs
	// One connection for the machine and all its units, each call made
	// with its caller's own credential.
	dial := apiclient.FromClientConfig(cfg)
	dial.Credential = pki.Credential{}
	conn, err := apiclient.DialConn(dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The agent's lines and its units' go to the controller too (ctl
	// debug-log), through a bounded buffer that never holds it up.
	logs := logship.NewBuffer(id, hclog.LevelFromString(f.log.level), 0, 0)
	logger.RegisterSink(logs)
	var hookMetrics *unitagent.HookMetrics
	if f.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(version.Get()))
		reg.MustRegister(logs.Metrics()...)
		if hookMetrics, err = unitagent.NewHookMetrics(reg); err != nil {
			return err
		}
		stopMetrics, err := serveAgentMetrics(f.metricsAddr, f.dataDir, reg, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	a, err := machineagent.New(machineagent.Config{
		MachineID: id, DataDir: f.dataDir, Address: f.address,
		API: pb.NewAgentServiceClient(apiclient.As(conn, cfg.Credential())),
		DialUnit: func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
			return pb.NewAgentServiceClient(apiclient.AsRenewable(conn, cred)), io.NopCloser(nil), nil
		},
		Lifelined: self, Logger: logger, PackageManager: pkgs, HookMetrics: hookMetrics,
		Logs: logship.NewShipper(logs, pb.NewAgentServiceClient(apiclient.As(conn, cfg.Credential()))),
	})
	if err != nil {
		return err
	}
	// Controllers come and go: dial the live ones, and remember them for
	// the next start.
	// The follower ends, and is waited for, before the connection closes.
	api := pb.NewAgentServiceClient(apiclient.As(conn, cfg.Credential()))
	followCtx, stopFollow := context.WithCancel(ctx)
	var follower sync.WaitGroup
	defer follower.Wait()
	defer stopFollow()
	follower.Add(1)
	go func() {
		defer follower.Done()
		conn.Follow(followCtx, followEvery, followControllers(api), func(addrs []string) error {
			logger.Info("controllers changed", "controllers", addrs)
			saved := cfg
			saved.Controllers = addrs
			if err := pki.WriteClientConfig(path, saved); err != nil {
				logger.Warn("cannot save the controllers in the agent config", "config", path, "error", err)
				return err
			}
			return nil
		})
	}()
	logger.Info("machine agent started", "machine", id, "controllers", cfg.Controllers)
	err = a.Run(ctx)
	switch {
	case errors.Is(err, machineagent.ErrMachineDead):
		return nil
	case errors.Is(err, context.Canceled):
		logger.Info("stopped")
		return nil
	}
	return err
}

// followControllers fetches the live controllers' addresses from the
// agent settings.
func followControllers(api pb.AgentServiceClient) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		s, err := api.GetAgentSettings(ctx, &pb.GetAgentSettingsRequest{})
		if err != nil {
			return nil, err
		}
		return s.ControllerAddresses, nil
	}
}

// MetricsAddrFile names the file in a machine agent's data directory that
// holds the address its metrics are served on, with --metrics-addr.
const MetricsAddrFile = "metrics.addr"

// serveAgentMetrics serves reg at /metrics on addr, writing the address
// listened on to MetricsAddrFile in dataDir, until the returned stop is
// called, which waits for the server to end.
func serveAgentMetrics(addr, dataDir string, reg *prometheus.Registry, logger hclog.Logger) (stop func(), err error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	if err := pki.WriteFileAtomic(filepath.Join(dataDir, MetricsAddrFile), []byte(lis.Addr().String()+"\n"), 0o644); err != nil {
		lis.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server ended", "error", err)
		}
	}()
	logger.Info("metrics serving", "addr", lis.Addr().String())
	return func() {
		hs.Close()
		<-done
	}, nil
}
