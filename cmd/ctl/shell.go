package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func completionCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print a script that makes the shell complete ctl's commands, flags and their
values. Load it in the current shell, or install it where the shell finds
completions: for bash, /etc/bash_completion.d/ctl (or
~/.local/share/bash-completion/completions/ctl); for zsh, a file named _ctl
in a directory of $fpath; for fish, ~/.config/fish/completions/ctl.fish.

Example:
  source <(ctl completion bash)
  ctl completion zsh > _ctl
  ctl completion fish > ctl.fish`,
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args:      argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(e.stdout, true)
			case "zsh":
				return root.GenZshCompletion(e.stdout)
			case "fish":
				return root.GenFishCompletion(e.stdout, true)
			}
			return usagef(cmd, "unknown shell %q: want bash, zsh or fish", args[0])
		},
	}
}

// manCommand writes ctl's manual pages, one a command, into a directory
// (make man); hidden, as it is for building, not for operating.
func manCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "gen-man DIR",
		Short: "Write ctl's manual pages into DIR",
		Long: `Write ctl's manual pages, one a command, into DIR (made if missing).

Example:
  ctl gen-man ./man`,
		Hidden: true,
		Args:   argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if err := doc.GenManTree(root, &doc.GenManHeader{Title: "CTL", Section: "1", Source: "Lifeline " + root.Version}, args[0]); err != nil {
				return fmt.Errorf("write the manual pages: %w", err)
			}
			fmt.Fprintf(e.stderr, "wrote ctl's manual pages into %s\n", args[0])
			return nil
		},
	}
}
