package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

type unitAgentFlags struct {
	dataDir     string
	unit        string
	agentConfig string
	address     string
	hookTimeout time.Duration
	retry       time.Duration
	attempts    int
	logLevel    string
}

// unitAgentCommand runs one unit agent on its own: the machine agent runs
// unit agents inside its own process, and this is for debugging a unit,
// and for tests that kill a unit's agent.
func unitAgentCommand() *cobra.Command {
	var f unitAgentFlags
	cmd := &cobra.Command{
		Use:   "unit-agent",
		Short: "Run one unit's agent on its own (the machine agent runs them for you)",
		Long: `Run one unit's agent in its own process, until the unit is dead or the agent
is stopped. The machine agent normally runs every unit agent of its machine
inside its own process; this command is for debugging one unit.

The agent config is a client config file (the format ctl reads) holding the
unit's own credential (tag unit-<service>/<n>).

Example:
  lifelined unit-agent --unit kv/0 --data-dir /var/lib/lifeline/units/kv-0 --agent-config agent.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUnitAgent(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "", "the unit's data directory (required)")
	fl.StringVar(&f.unit, "unit", "", "the unit, <service>/<n> (required)")
	fl.StringVar(&f.agentConfig, "agent-config", "", "file with the controllers, their CA and the unit's credential (required)")
	fl.StringVar(&f.address, "address", "127.0.0.1", "the unit's address, for unit-get and its relations")
	fl.DurationVar(&f.hookTimeout, "hook-timeout", 0, "how long a hook may run (default: the controller's setting)")
	fl.DurationVar(&f.retry, "retry-delay", 5*time.Second, "the first pause before a failed hook runs again (it doubles up to 5m)")
	fl.IntVar(&f.attempts, "hook-attempts", 5, "runs of a failing hook before the unit enters its error state")
	fl.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	return cmd
}

func runUnitAgent(ctx context.Context, f unitAgentFlags) error {
	switch {
	case f.dataDir == "" || f.unit == "" || f.agentConfig == "":
		return usageError{errors.New("--data-dir, --unit and --agent-config are required")}
	case !names.ValidUnit(f.unit):
		return usageError{fmt.Errorf("--unit %q: want <service>/<number>", f.unit)}
	}
	logger, _, err := newLogger("unit-agent", logFlags{level: f.logLevel, format: "text", maxSizeMiB: 1})
	if err != nil {
		return err
	}
	quietGRPC(logger)
	cfg, err := pki.ReadClientConfig(f.agentConfig)
	if err != nil {
		return err
	}
	if cfg.Tag != names.UnitTag(f.unit) {
		return fmt.Errorf("agent config %s holds the credential of %s, not of unit %s", f.agentConfig, cfg.Tag, f.unit)
	}
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		return err
	}
	defer conn.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	toolsDir := filepath.Join(f.dataDir, "tools")
	if err := hooks.InstallTools(toolsDir, self); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := unitagent.New(unitagent.Config{
		Unit: f.unit, Address: f.address, DataDir: f.dataDir, ToolsDir: toolsDir,
		API: pb.NewAgentServiceClient(conn), Logger: logger, HookLock: make(chan struct{}, 1),
		HookTimeout: f.hookTimeout, Retry: unitagent.RetryPolicy{Initial: f.retry, Attempts: f.attempts},
	})
	if err != nil {
		return err
	}
	err = a.Run(ctx)
	switch {
	case errors.Is(err, unitagent.ErrDead):
		return nil
	case errors.Is(err, context.Canceled):
		logger.Info("stopped")
		return nil
	}
	return err
}
