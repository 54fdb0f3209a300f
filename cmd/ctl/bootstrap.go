package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/provisioner/provider"
)

const (
	defaultAPIPort = 17070
	// startTimeout bounds how long bootstrap waits for a new controller to
	// answer.
	startTimeout = 2 * time.Minute
	// stopTimeout is how long kill-controller waits after SIGTERM before
	// SIGKILL.
	stopTimeout = 30 * time.Second
	// pingTimeout bounds one "does it answer" call.
	pingTimeout = 3 * time.Second
)

type bootstrapFlags struct {
	dataDir     string
	dataDirSet  bool // --data-dir given
	apiPort     int
	portSet     bool // --api-port given
	provider    string
	providerSet bool   // --provider given
	network     string // --local-network
	// name is the controller's name in ctl's store (--name, else the
	// current one's); "" with $LIFELINE_CONFIG or --config.
	name  string
	store clientStore
}

func bootstrapCommand(e *env) *cobra.Command {
	var f bootstrapFlags
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Start a controller on this host",
		Long: `Start a Lifeline controller on this host, in the background, and wait until it
answers.

The controller (lifelined controller, found next to ctl or on $PATH) runs
detached from the terminal, keeps its state in the data directory and logs to
controller.log there. It listens on 127.0.0.1:--api-port, and serves /metrics
on the next port. On first start it writes the client config (the address,
its CA and an admin credential) to $LIFELINE_CONFIG, or to
lifeline/client.json under the user's config directory; every other command
reads it from there. Next to it, client.controller.json records the data
directory for ctl kill-controller.

--name NAME keeps the client config under that name in ctl's store
(lifeline/controllers/NAME/ under the user's config directory; data in
lifeline/controllers/NAME under the user's data directory) and makes it
the current controller: ctl controllers lists them, ctl switch changes
which one commands talk to. Without --name, bootstrap starts the current
controller ("default" at first).

With the local provider each machine has a loopback address, 127.1.X.Y by
default: a second local controller on the same host needs its own
--local-network (127.2, say) for its units to bind the ports the first
one's bind. A data directory keeps the network it was made with.

bootstrap refuses to replace a client config whose controller still answers.
When the client config's controller was stopped with its data kept (ctl
kill-controller --keep-data, or a crash), bootstrap starts that controller
again on its data directory, with its model, credentials and provider: no
--data-dir is needed, and another one is refused rather than leave that
data without a client config.

Example:
  ctl bootstrap
  ctl bootstrap --data-dir /srv/lifeline --api-port 17080
  ctl bootstrap --data-dir /tmp/second --api-port 17170 --local-network 127.2`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.apiPort < 1 || f.apiPort > 65534 {
				return usagef(cmd, "--api-port %d: want a port from 1 to 65534 (the metrics port is the next one)", f.apiPort)
			}
			switch f.provider {
			case "manual", "local":
			default:
				return usagef(cmd, "--provider %q: want local or manual", f.provider)
			}
			if f.network != "" {
				if f.provider != "local" {
					return usagef(cmd, "--local-network is for --provider local")
				}
				if err := provider.CheckLocalNetwork(f.network); err != nil {
					return usagef(cmd, "--local-network: %v", err)
				}
			}
			f.portSet = cmd.Flags().Changed("api-port")
			f.dataDirSet = cmd.Flags().Changed("data-dir")
			f.providerSet = cmd.Flags().Changed("provider")
			if err := chooseBootstrapName(cmd, e, &f); err != nil {
				return err
			}
			if err := bootstrap(cmd, e, f); err != nil {
				return err
			}
			if f.name == "" {
				return nil
			}
			if err := f.store.setCurrent(f.name); err != nil {
				return fmt.Errorf("started, but cannot make %s the current controller: %w", f.name, err)
			}
			fmt.Fprintf(e.stdout, "current controller: %s\n", f.name)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", e.defaultDataDir, "the controller's data directory `DIR` (etcd, certificates, log)")
	fl.IntVar(&f.apiPort, "api-port", defaultAPIPort, "the `PORT` the API listens on, on 127.0.0.1 (metrics on the next)")
	fl.StringVar(&f.provider, "provider", "local", "machine provider: local (each machine an agent process on this host) or manual (hosts join with a token)")
	fl.StringVar(&f.name, "name", "", "keep the controller under this `NAME` in ctl's store and make it current (default: the current controller)")
	fl.StringVar(&f.network, "local-network", "", "the local machines' loopback addresses, `127.N`.X.Y (default: what the data directory was made with, else "+provider.DefaultLocalNetwork+")")
	return cmd
}

// chooseBootstrapName settles which controller of ctl's store bootstrap
// starts: --name's (pointing e at its client config), else the current
// one; none with $LIFELINE_CONFIG or --config. A named controller's data
// directory defaults to one of its own.
func chooseBootstrapName(cmd *cobra.Command, e *env, f *bootstrapFlags) error {
	if cmd.Flags().Changed("name") {
		s, err := e.useNamedController(f.name)
		if err != nil {
			return usagef(cmd, "--name: %v", err)
		}
		f.store = s
	} else if s, ok := userClientStore(); ok && e.configFlag == "" {
		f.name, f.store = s.current(), s
	}
	if f.name != "" && !f.dataDirSet {
		f.dataDir = namedDataDir(e.defaultDataDir, f.name)
	}
	return nil
}

func bootstrap(cmd *cobra.Command, e *env, f bootstrapFlags) error {
	ctx := cmd.Context()
	if e.configErr != nil {
		return e.configErr
	}
	if e.lifelinedErr != nil {
		return e.lifelinedErr
	}
	kept, err := keptController(e, &f)
	if err != nil {
		return err
	}
	if f.network != "" && f.provider != "local" {
		return usagef(cmd, "--local-network is for --provider local, and the controller kept in %s has provider %s", f.dataDir, f.provider)
	}
	if f.dataDir == "" {
		return usagef(cmd, "no default data directory (no home directory): give --data-dir")
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return err
	}
	if pid, ok := runningController(dataDir); ok {
		return fmt.Errorf("a controller (pid %d) already runs with data directory %s: stop it first", pid, dataDir)
	}
	port, err := claimClientConfig(ctx, e, dataDir, f)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	restart := madeBefore(dataDir)
	switch {
	case kept && !f.dataDirSet:
		fmt.Fprintf(e.stdout, "the controller of %s was stopped with its data kept in %s: restarting it there\n", e.configPath, dataDir)
	case restart:
		fmt.Fprintf(e.stdout, "restarting the controller on its data in %s\n", dataDir)
	}

	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create the data directory: %w", err)
	}
	logPath := filepath.Join(dataDir, logFile)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("controller log: %w", err)
	}
	defer logf.Close()
	rec := controllerRecord{DataDir: dataDir, APIAddr: addr, Provider: f.provider, Lifelined: e.lifelined}
	if err := writeRecord(recordPath(e.configPath), rec); err != nil {
		return err
	}

	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1))
	proc := exec.Command(e.lifelined, "controller",
		"--data-dir", dataDir, "--api-addr", addr, "--metrics-addr", metricsAddr,
		"--client-config", e.configPath, "--provider", f.provider)
	if f.network != "" {
		proc.Args = append(proc.Args, "--local-network", f.network)
	}
	proc.Dir = dataDir
	proc.Stdout, proc.Stderr = logf, logf
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // its own session: no terminal, no signals from it
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start %s: %w", e.lifelined, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()

	if err := waitStarted(ctx, e, addr, exited); err != nil {
		var ex exitedError
		if errors.As(err, &ex) {
			return startFailure(e, ex.err, logPath)
		}
		// It runs but does not answer (or ctl was interrupted): stop it,
		// rather than leave a controller nobody knows about.
		_ = proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			_ = proc.Process.Kill()
		}
		return fmt.Errorf("%w; stopped it (its log: %s)", err, logPath)
	}

	what := "started"
	if restart {
		what = "restarted on its data (its model, credentials and machines as they were)"
	}
	fmt.Fprintf(e.stdout, "controller %s, pid %d: API at %s, provider %s\n", what, proc.Process.Pid, addr, f.provider)
	fmt.Fprintf(e.stdout, "  client config:  %s\n", e.configPath)
	fmt.Fprintf(e.stdout, "  data directory: %s (log: %s)\n", dataDir, logFile)
	if restart {
		return nil
	}
	fmt.Fprintln(e.stdout, "next:")
	fmt.Fprintln(e.stdout, "  ctl add-machine --manual        add a machine: prints the command that starts its agent on the host")
	fmt.Fprintln(e.stdout, "  ctl deploy examples/charms/kv   deploy a charm directory (the demo charms are in Lifeline's source); then ctl status --watch")
	fmt.Fprintln(e.stdout, "  ctl kill-controller             stop the controller and remove its data")
	return nil
}

// keptController finds the controller recorded for the client config (by
// the bootstrap that started it) that is stopped with its data kept, and
// has f start that one: its data directory unless --data-dir names it too,
// its provider unless --provider names the same. It refuses a --data-dir
// or --provider that would start another controller in its place: the
// client config and the record would then be the new one's, and nothing
// would lead to the kept data any more. It says whether there is one.
func keptController(e *env, f *bootstrapFlags) (bool, error) {
	recPath := recordPath(e.configPath)
	rec, err := readRecord(recPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%w: fix or remove it", err)
	}
	if !looksLikeDataDir(rec.DataDir) {
		return false, nil // its data is gone: the record is stale
	}
	if _, ok := runningController(rec.DataDir); ok {
		return false, nil // not stopped: bootstrap refuses a controller that answers
	}
	if f.dataDirSet {
		dir, err := filepath.Abs(f.dataDir)
		if err != nil {
			return false, err
		}
		if !sameDir(dir, rec.DataDir) {
			return false, fmt.Errorf("the controller of %s was stopped with its data kept in %s: `ctl bootstrap` without --data-dir starts it again, `ctl kill-controller` removes it, or set LIFELINE_CONFIG to bootstrap another controller beside it", e.configPath, rec.DataDir)
		}
	}
	if rec.Provider != "" {
		if f.providerSet && f.provider != rec.Provider {
			return false, fmt.Errorf("the controller kept in %s has provider %s, not %s: `ctl bootstrap` without --provider starts it again, or `ctl kill-controller` removes it", rec.DataDir, rec.Provider, f.provider)
		}
		f.provider = rec.Provider
	}
	f.dataDir = rec.DataDir
	return true, nil
}

// madeBefore says whether a controller was started with dataDir before:
// it made its CA there.
func madeBefore(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "pki", pki.CACertFile))
	return err == nil
}

// claimClientConfig deals with a client config already at the path the new
// controller will use, and returns the port to listen on. It refuses when
// that config's controller answers; keeps the config when it belongs to
// the data directory's controller (a restart: on its old port unless
// --api-port says otherwise); and moves it aside otherwise, so that the new
// controller writes its own.
func claimClientConfig(ctx context.Context, e *env, dataDir string, f bootstrapFlags) (int, error) {
	cfg, err := pki.ReadClientConfig(e.configPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f.apiPort, nil
	case err != nil:
		return 0, fmt.Errorf("%w: fix or remove it", err)
	}
	if answers(ctx, cfg) {
		return 0, fmt.Errorf("the controller of %s answers at %s: stop it with `ctl kill-controller` first, or set LIFELINE_CONFIG to bootstrap another", e.configPath, strings.Join(cfg.Controllers, ", "))
	}
	ca, err := os.ReadFile(filepath.Join(dataDir, "pki", pki.CACertFile))
	if err != nil || string(ca) != cfg.CACert {
		old := e.configPath + ".old"
		if err := os.Rename(e.configPath, old); err != nil {
			return 0, fmt.Errorf("move the stale client config aside: %w", err)
		}
		fmt.Fprintf(e.stderr, "the controller of %s does not answer: moved that client config to %s\n", e.configPath, old)
		return f.apiPort, nil
	}
	port := f.apiPort
	if _, p, err := net.SplitHostPort(cfg.Controllers[0]); err == nil && !f.portSet {
		if n, err := strconv.Atoi(p); err == nil {
			port = n
		}
	}
	if addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); len(cfg.Controllers) != 1 || cfg.Controllers[0] != addr {
		cfg.Controllers = []string{addr}
		if err := pki.WriteClientConfig(e.configPath, cfg); err != nil {
			return 0, err
		}
	}
	return port, nil
}

// waitStarted waits, showing progress, until the controller answers a
// Status call with the client config it wrote, or exits.
func waitStarted(ctx context.Context, e *env, addr string, exited <-chan error) error {
	p := newProgress(e.stderr, e.stderrTTY)
	defer p.done()
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		p.update(fmt.Sprintf("waiting for the controller to answer at %s (%s)", addr, seconds(time.Since(start))))
		select {
		case err := <-exited:
			return exitedError{err}
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-tick.C:
		}
		if cfg, err := pki.ReadClientConfig(e.configPath); err == nil && answers(ctx, cfg) {
			return nil
		}
		if time.Since(start) > startTimeout {
			return fmt.Errorf("the controller did not answer at %s within %s", addr, startTimeout)
		}
	}
}

// exitedError says the controller exited while bootstrap waited.
type exitedError struct{ err error }

func (e exitedError) Error() string { return "the controller exited" }

// startFailure reports a controller that exited at start, with the end of
// its log, where it said why.
func startFailure(e *env, werr error, logPath string) error {
	how := "exited"
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		how = "exited with " + ee.ProcessState.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ctl: the controller %s at start; the end of its log (%s):\n", how, logPath)
	for _, line := range tail(logPath, 10) {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	fmt.Fprintf(&b, "its data directory stays for inspection: ctl kill-controller removes it\n")
	fmt.Fprint(e.stderr, b.String())
	return exitError{code: 1}
}

// answers says whether a controller answers at cfg's addresses: a Status
// call gets any answer but "unreachable".
func answers(ctx context.Context, cfg pki.ClientConfig) bool {
	c, err := dial(cfg)
	if err != nil {
		return false
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	_, err = c.op.Status(ctx, &pb.StatusRequest{})
	switch status.Code(err) {
	case codes.OK:
		return true
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true // it refused us, but something answers there
}

func killControllerCommand(e *env) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "kill-controller [NAME]",
		Short: "Stop the controller started by ctl bootstrap and remove its data",
		Long: `Stop the controller that ctl bootstrap started for this client config, and
remove its data directory, the client config and its controller record.

It sends SIGTERM to the pid in the data directory's controller.pid (having
checked that it is that controller's lifelined process), waits for it to
exit, and sends SIGKILL after 30 seconds; then it stops the local
provider's machines (their agents and everything their units started).
With --keep-data the machines keep running and the data
directory, the client config and the record stay: ctl bootstrap then starts
the same controller again, with its model.

NAME is a controller of ctl controllers (the current one by default);
removing the current one makes "default" current again.

Example:
  ctl kill-controller --keep-data
  ctl bootstrap                      # the same controller again, on its data
  ctl kill-controller`,
		Args: argsRange(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var name string
			var store clientStore
			if len(args) == 1 {
				name = args[0]
				s, err := e.useNamedController(name)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				if _, err := os.Stat(e.configPath); err != nil {
					known, _ := s.names()
					return fmt.Errorf("no controller called %s (known: %s)", name, knownList(known))
				}
				store = s
			} else if s, ok := userClientStore(); ok && e.configFlag == "" {
				name, store = s.current(), s
			}
			if err := killController(cmd.Context(), e, keep); err != nil {
				return err
			}
			if name == "" || keep {
				return nil
			}
			if name != defaultControllerName {
				_ = os.Remove(filepath.Dir(e.configPath)) // its directory in the store, when empty
			}
			return store.clearCurrent(name)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-data", false, "keep the data directory and the client config")
	return cmd
}

func killController(ctx context.Context, e *env, keep bool) error {
	if e.configErr != nil {
		return e.configErr
	}
	recPath := recordPath(e.configPath)
	rec, err := readRecord(recPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no controller started by `ctl bootstrap` is recorded for %s (%s is missing)", e.configPath, recPath)
	}
	if err != nil {
		return err
	}
	pidPath := filepath.Join(rec.DataDir, pidFile)
	pid, err := readPID(pidPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(e.stdout, "the controller of %s is not running\n", rec.DataDir)
	case err != nil:
		return err
	case !isController(pid, rec.DataDir):
		fmt.Fprintf(e.stdout, "the controller of %s is not running (process %d in %s is not it)\n", rec.DataDir, pid, pidPath)
	default:
		if err := stopProcess(ctx, e, pid); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "stopped the controller (pid %d)\n", pid)
	}
	if keep {
		machines := ""
		if rec.Provider == "local" {
			machines = "; its local machines keep running"
		}
		fmt.Fprintf(e.stdout, "kept its data directory %s, the client config %s and its record%s\n", rec.DataDir, e.configPath, machines)
		fmt.Fprintln(e.stdout, "`ctl bootstrap` with this client config starts this controller again on its data")
		return nil
	}
	// The local provider's machines outlive their controller (a restarted
	// one takes them back): with the controller gone for good, stop them
	// and everything their units started.
	if n := (&provider.Local{Dir: filepath.Join(rec.DataDir, "machines")}).StopAll(); n > 0 {
		fmt.Fprintf(e.stdout, "stopped %d local machines\n", n)
	}
	if _, err := os.Stat(rec.DataDir); err == nil {
		if !looksLikeDataDir(rec.DataDir) {
			return fmt.Errorf("%s does not look like a controller's data directory: not removing it (remove %s and %s yourself)", rec.DataDir, e.configPath, recPath)
		}
		if err := os.RemoveAll(rec.DataDir); err != nil {
			return fmt.Errorf("remove the data directory: %w", err)
		}
	}
	for _, p := range []string{e.configPath, recPath, addressCachePath(e.configPath)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "removed %s and the client config %s\n", rec.DataDir, e.configPath)
	return nil
}

// stopProcess sends SIGTERM to pid and waits, with progress, for it to
// exit; SIGKILL after stopTimeout.
func stopProcess(ctx context.Context, e *env, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop the controller (pid %d): %w", pid, err)
	}
	p := newProgress(e.stderr, e.stderrTTY)
	defer p.done()
	start := time.Now()
	killed := false
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for processAlive(pid) {
		elapsed := time.Since(start)
		switch {
		case !killed && elapsed > stopTimeout:
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("kill the controller (pid %d): %w", pid, err)
			}
			killed = true
			p.update(fmt.Sprintf("the controller (pid %d) did not stop within %s: killed it", pid, stopTimeout))
		case killed && elapsed > stopTimeout+10*time.Second:
			return fmt.Errorf("the controller (pid %d) is still there after SIGKILL", pid)
		default:
			p.update(fmt.Sprintf("waiting for the controller (pid %d) to stop (%s)", pid, seconds(elapsed)))
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-tick.C:
		}
	}
	return nil
}
