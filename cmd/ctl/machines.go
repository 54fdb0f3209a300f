package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// defaultJoinTTL is how long the join tokens ctl asks for stay good.
const defaultJoinTTL = time.Hour

func addMachineCommand(e *env) *cobra.Command {
	var n int
	var manual bool
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "add-machine",
		Short: "Add machines to the model",
		Long: `Add -n machines (1 by default) for the provisioner to start.

With --manual the machines are hosts you bring yourself: for each, ctl prints
a join token and the command to run on the host with the token in a file
(or on stdin: --join-file -), which starts its machine agent:

  lifelined machine-agent --join-file FILE --controller ADDR --data-dir DIR

A token joins one host, once, within --expires (1h by default; at most
168h); ctl join-token MACHINE makes a new one. Pass it to the host
privately, and not on a command line, where ps shows it.

Example:
  ctl add-machine
  ctl add-machine -n 2 --manual --expires 24h`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return usagef(cmd, "-n %d: want at least 1 machine", n)
			}
			if expires <= 0 {
				return usagef(cmd, "--expires %s: want more than 0", expires)
			}
			if cmd.Flags().Changed("expires") && !manual {
				return usagef(cmd, "--expires is for --manual machines' join tokens")
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			req := &pb.AddMachinesRequest{NumMachines: int32(n), Manual: manual}
			if manual {
				req.JoinTokenTtlMs = expires.Milliseconds()
			}
			resp, err := c.op.AddMachines(ctx, req)
			if err != nil {
				return c.check(err)
			}
			for i, m := range resp.Machines {
				if !manual {
					fmt.Fprintf(e.stdout, "created machine %s\n", m.Id)
					continue
				}
				if i >= len(resp.JoinTokens) {
					return fmt.Errorf("the controller sent no join token for machine %s", m.Id)
				}
				fmt.Fprintf(e.stdout, "created manual machine %s\n", m.Id)
				if err := printJoin(e.stdout, m.Id, resp.JoinTokens[i], c.addrs[0]); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "num-machines", "n", 1, "`N` machines to add")
	cmd.Flags().BoolVar(&manual, "manual", false, "hosts you bring yourself: print a join token for each")
	cmd.Flags().DurationVar(&expires, "expires", defaultJoinTTL, "how long the join tokens of --manual machines stay good")
	return cmd
}

func joinTokenCommand(e *env) *cobra.Command {
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "join-token MACHINE",
		Short: "Make a new join token for a manual machine",
		Long: `Make a new join token for a manual machine, replacing any it has not used:
for a token that expired unused, or a host to join again (rebuilt, or its
agent's data directory lost). Joining with it gives the machine a new
credential, and the agent still running with the old one, if any, is
refused from then on.

Example:
  ctl join-token 7 --expires 30m`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if expires <= 0 {
				return usagef(cmd, "--expires %s: want more than 0", expires)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.IssueJoinToken(ctx, &pb.IssueJoinTokenRequest{Machine: args[0], TtlMs: expires.Milliseconds()})
			if err != nil {
				return c.check(err)
			}
			return printJoin(e.stdout, args[0], resp.JoinToken, c.addrs[0])
		},
	}
	cmd.Flags().DurationVar(&expires, "expires", defaultJoinTTL, "how long the token stays good (at most 168h)")
	return cmd
}

// printJoin prints machine's join token, when it expires, and the command
// that joins the host with it.
func printJoin(w io.Writer, machine, token, addr string) error {
	tok, err := pki.DecodeJoinToken(token)
	if err != nil {
		return fmt.Errorf("the controller's join token for machine %s: %w", machine, err)
	}
	fmt.Fprintf(w, "join token for machine %s (joins one host, once, until %s):\n  %s\n", machine, tok.Expires.Local().Format(time.RFC3339), token)
	fmt.Fprintf(w, "to start its agent, put the token in a file on the host (mode 0600) and run there:\n")
	fmt.Fprintf(w, "  lifelined machine-agent --join-file FILE --controller %s --data-dir /var/lib/lifeline/machine-%s\n", addr, machine)
	return nil
}
