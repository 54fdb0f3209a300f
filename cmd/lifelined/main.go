// Command lifelined is Lifeline's daemon: the controller, the machine agent
// and, through symlinks, the hook tools.
//
// The controller's components, in the order they start:
//
//	flags ─► logger ─► etcd (embedded, or a client of an external cluster)
//	                    └► state ─► cleaner
//	                         └► watch hub (one etcd watch of the model)
//	                         └► controller API (gRPC over TLS) ─► listener
//	                              └► dashboard (HTTPS, its own listener; calls the API as its users)
//	                         └► readiness (every 2 s: etcd, leader, NOSPACE) ─► gRPC health
//	                         └► metrics (/metrics, /healthz, /readyz on its own listener)
//
// Each long-running piece is an execute/interrupt pair in one oklog/run
// group; the first to return stops the others, in the order they were
// added.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/version"
)

func main() {
	// Invoked through a hook tool's symlink (relation-get, ...): be that tool.
	if tool := filepath.Base(os.Args[0]); hooks.IsTool(tool) {
		// A tool runs in its hook's (or action's) process group, which a
		// pause ends with SIGTERM: a checkpoint-set in flight completes
		// (the agent kills the group with SIGKILL after the grace).
		signal.Ignore(syscall.SIGTERM)
		os.Exit(hooks.RunTool(os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
	if err := rootCommand().Execute(); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "lifelined:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "lifelined:", err)
		os.Exit(1)
	}
}

// usageError is a mistake in how the command was called.
type usageError struct{ error }

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "lifelined",
		Short:         "Lifeline's daemon: the controller and the machine agent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	root.Version = version.Get().String()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.AddCommand(controllerCommand(), machineAgentCommand(), unitAgentCommand(), backupCommand(), restoreCommand(), manCommand())
	return root
}

// manCommand writes lifelined's manual pages, one a command, into a
// directory (make man); hidden, as it is for building.
func manCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write lifelined's manual pages into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if err := doc.GenManTree(root, &doc.GenManHeader{Title: "LIFELINED", Section: "8", Source: "Lifeline " + root.Version}, args[0]); err != nil {
				return fmt.Errorf("write the manual pages: %w", err)
			}
			return nil
		},
	}
}
