// ctl's composition root: main reads the environment once (where the client
// config is, the default data directory, where lifelined is) into an env,
// builds the command tree with it, runs it, and turns the outcome into an
// exit status (see doc.go).

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], newEnv())
	stop()
	os.Exit(code)
}

// env is what ctl takes from its environment, read once by main.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// stdoutTTY and stderrTTY say whether they are terminals (progress lines
	// and redraws use \r and escape codes only there).
	stdoutTTY, stderrTTY bool
	// stdoutWidth is the terminal's width when stdout is one (0 when
	// not, or unknown); noColorEnv is $NO_COLOR.
	stdoutWidth int
	noColorEnv  string
	// configPath is the client config: $LIFELINE_CONFIG, or the default
	// under the user's config directory; configErr says why there is none.
	configPath string
	configErr  error
	// configFlag is --config, which wins over configPath when set.
	configFlag string
	// defaultDataDir is bootstrap's default --data-dir.
	defaultDataDir string
	// lifelined is the daemon's binary for bootstrap (lifelinedErr when not
	// found).
	lifelined    string
	lifelinedErr error
}

func newEnv() *env {
	e := &env{
		stdin:  os.Stdin,
		stdout: os.Stdout, stderr: os.Stderr,
		stdoutTTY: isTerminal(os.Stdout), stderrTTY: isTerminal(os.Stderr),
		noColorEnv: os.Getenv("NO_COLOR"),
	}
	if e.stdoutTTY {
		if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
			e.stdoutWidth = w
		}
	}
	e.configPath, e.configErr = defaultClientConfigPath()
	e.defaultDataDir = defaultDataDir()
	e.lifelined, e.lifelinedErr = findLifelined()
	return e
}

// isTerminal says whether f is a character device: a terminal, in practice.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// defaultDataDir is $XDG_DATA_HOME/lifeline/controller, or
// ~/.local/share/lifeline/controller.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "lifeline", "controller")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "lifeline", "controller")
	}
	return ""
}

// run runs ctl with args and returns its exit status.
func run(ctx context.Context, args []string, e *env) int {
	root := rootCommand(e)
	root.SetArgs(args)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	return report(e.stderr, root.ExecuteContext(ctx))
}

// report prints what went wrong, if anything, and returns the exit status.
func report(w io.Writer, err error) int {
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code // already said
	case errors.As(err, &ue):
		fmt.Fprintf(w, "%s: %v\n", ue.cmd.CommandPath(), ue.err)
		fmt.Fprintf(w, "usage: %s\nrun '%s --help' for more\n", ue.cmd.UseLine(), ue.cmd.CommandPath())
		return 2
	}
	fmt.Fprintln(w, "ctl:", errorText(err))
	return 1
}

// errorText is the sentence ctl prints for err: a refusal's own message.
func errorText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// usageError is a mistake in how a command was called: exit status 2.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(cmd *cobra.Command, format string, args ...any) error {
	return usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// exitError ends ctl with a status, its reasons already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func rootCommand(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "ctl",
		Short: "Operate a Lifeline model: deploy services, relate them, watch them",
		Long: `ctl is the operator's client of a Lifeline controller.

It reads the client config (the controller's address and CA, and a user's
credential) from --config when given, else $LIFELINE_CONFIG when set,
otherwise from lifeline/client.json under the user's config directory. ctl
bootstrap starts a local controller and writes it, for the user admin; ctl
register writes another user's; every other command calls the controller.
(A service's settings at deploy are ctl deploy --service-config, not
--config as in juju deploy: --config is the client config everywhere.)

Example:
  ctl bootstrap
  ctl deploy examples/charms/kv -n 2
  ctl deploy examples/charms/app
  ctl add-relation app kv
  ctl status --watch`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.PersistentFlags().StringVar(&e.configFlag, "config", "", "the client config to use (default: $LIFELINE_CONFIG, or the current controller's in ctl's store: ctl controllers)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{cmd: cmd, err: err} })
	// Cobra's own completion command would offer powershell too, and
	// its help: completionCommand is ctl's.
	root.CompletionOptions.DisableDefaultCmd = true
	root.Version = version.Get().String()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.AddCommand(
		bootstrapCommand(e),
		killControllerCommand(e),
		controllersCommand(e),
		switchCommand(e),
		statusCommand(e),
		showUnitCommand(e),
		showMachineCommand(e),
		deployCommand(e),
		addUnitCommand(e),
		addMachineCommand(e),
		joinTokenCommand(e),
		addRelationCommand(e),
		destroyRelationCommand(e),
		destroyUnitCommand(e),
		destroyMachineCommand(e),
		destroyServiceCommand(e),
		resolvedCommand(e),
		showStatusLogCommand(e),
		configCommand(e),
		revisionsCommand(e),
		rollbackCommand(e),
		refreshCommand(e),
		planCommand(e),
		applyCommand(e),
		exportCommand(e),
		setRolloutCommand(e),
		rolloutCommand(e),
		waitCommand(e),
		addControllerCommand(e),
		addUserCommand(e),
		registerCommand(e),
		usersCommand(e),
		removeUserCommand(e),
		setRoleCommand(e),
		whoamiCommand(e),
		dashboardCommand(e),
		rotateCredentialCommand(e),
		auditCommand(e),
		debugLogCommand(e),
		versionCommand(e),
		completionCommand(e),
		manCommand(e),
	)
	root.AddCommand(operationCommands(e)...)
	return root
}

// argsRange accepts from min to max positional arguments (max < 0: any
// number), and calls anything else a usage error.
func argsRange(minN, maxN int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		n := len(args)
		switch {
		case n < minN && minN == maxN:
			return usagef(cmd, "want %s, got %s", plural(minN, "argument"), plural(n, "argument"))
		case n < minN:
			return usagef(cmd, "want at least %s, got %s", plural(minN, "argument"), plural(n, "argument"))
		case maxN >= 0 && n > maxN && maxN == 0:
			return usagef(cmd, "takes no arguments, got %q", args[0])
		case maxN >= 0 && n > maxN && minN == maxN:
			return usagef(cmd, "want %s, got %s", plural(maxN, "argument"), plural(n, "argument"))
		case maxN >= 0 && n > maxN:
			return usagef(cmd, "want at most %s, got %s", plural(maxN, "argument"), plural(n, "argument"))
		}
		return nil
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
