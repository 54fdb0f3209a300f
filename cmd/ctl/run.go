package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// runArgs are ctl run's arguments: TARGET... ACTION [KEY=VALUE...].
type runArgs struct {
	targets []string
	action  string
	params  []string
}

// parseRunArgs splits ctl run's arguments: the parameters are the
// KEY=VALUE ones at the end, the action the argument before them, the
// targets the rest (at least one).
func parseRunArgs(args []string) (runArgs, error) {
	end := len(args)
	for end > 0 && strings.Contains(args[end-1], "=") {
		end--
	}
	for _, a := range args[:end] {
		if strings.Contains(a, "=") {
			return runArgs{}, fmt.Errorf("argument %q: parameters (KEY=VALUE) come after the action", a)
		}
	}
	if end < 2 {
		return runArgs{}, errors.New("want TARGET... ACTION [KEY=VALUE...]: at least one unit or service, then the action")
	}
	return runArgs{targets: args[:end-1], action: args[end-1], params: args[end:]}, nil
}

func runCommand(e *env) *cobra.Command {
	var paramsFile string
	var maxParallel int
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run TARGET... ACTION [KEY=VALUE...]",
		Short: "Run a charm's action on units: make an operation",
		Long: `Run a charm's action (ctl actions SERVICE lists them) on units of one
service: each TARGET is a unit (kv/0) or a service (all its units). The
parameters are KEY=VALUE arguments (a dotted key nests: target.dir=/x; a
value is typed as YAML reads it: 3 is a number, true a boolean, "3" text)
over those of --params FILE (YAML or JSON), validated against the action's
schema, its defaults applied.

A safe action runs at once; any other awaits approval by one of the
action's approvers other than you (ctl approve), then you (or an admin)
execute it (ctl execute). ctl run prints the operation:

  operation 7: backup on kv/0 kv/1 kv/2: awaiting approval by alice or an admin

Parameters that do not validate are all listed, the operation is recorded
as invalid (ctl show-operation shows it) and nothing runs: exit status 1.

--max-parallel N runs at most N of its units' tasks at once (no more than
the action allows). --wait follows the operation to its end with a
progress line (operation 7: 3/10 done, 2 running, 1 failed) and exits 1
unless every task is done; --timeout bounds the wait (0: none).

Example:
  ctl run kv keys
  ctl run kv/0 kv/1 backup name=nightly compress=true
  ctl run kv reindex steps=20 --max-parallel 1 --wait --timeout 10m`,
		Args: func(cmd *cobra.Command, args []string) error {
			if _, err := parseRunArgs(args); err != nil {
				return usagef(cmd, "%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ra, _ := parseRunArgs(args) // checked by Args
			switch {
			case maxParallel < 0:
				return usagef(cmd, "--max-parallel %d: want 1 or more", maxParallel)
			case timeout < 0:
				return usagef(cmd, "--timeout %s: want 0 (none) or more", timeout)
			case timeout > 0 && !wait:
				return usagef(cmd, "--timeout is for --wait")
			}
			var file []byte
			if paramsFile != "" {
				var err error
				if file, err = os.ReadFile(paramsFile); err != nil {
					return fmt.Errorf("--params: %w", err)
				}
			}
			params, err := charm.ReadActionParams(file, ra.params)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			pj, err := charm.CanonicalJSON(params)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			resp, err := c.op.RunAction(ctx, &pb.RunActionRequest{Targets: ra.targets, Action: ra.action, ParamsJson: pj, MaxParallel: int32(maxParallel)})
			cancel()
			if err != nil {
				return reportInvalid(cmd.Context(), e, c, err)
			}
			fmt.Fprintln(e.stdout, runLine(resp.Operation, resp.WhoMayApprove))
			if !wait {
				return nil
			}
			return followOperation(cmd.Context(), e, c, resp.Operation.Id, timeout)
		},
	}
	cmd.Flags().StringVar(&paramsFile, "params", "", "read parameters from `FILE` (YAML or JSON); KEY=VALUE arguments override them")
	cmd.Flags().IntVar(&maxParallel, "max-parallel", 0, "run at most `N` tasks at once (at most what the action allows)")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the operation to its end; exit 1 unless every task is done")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait, give up after this long (0: never)")
	return cmd
}

// reportInvalid prints a refused RunAction. An operation recorded invalid
// is shown with each of its errors on a line of its own.
func reportInvalid(ctx context.Context, e *env, c *client, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return c.check(err)
	}
	var brief *pb.OperationBrief
	for _, d := range st.Details() {
		if b, ok := d.(*pb.OperationBrief); ok {
			brief = b
		}
	}
	if brief == nil {
		return c.check(err)
	}
	cctx, cancel := callContext(ctx)
	defer cancel()
	show, serr := c.op.ShowOperation(cctx, &pb.ShowOperationRequest{Id: brief.Id, Limit: 1})
	if serr != nil || len(show.Operation.GetErrors()) == 0 {
		return c.check(err)
	}
	fmt.Fprintf(e.stderr, "ctl: operation %d: %s on %s is invalid (recorded; nothing runs):\n", brief.Id, brief.Action, brief.Service)
	for _, msg := range show.Operation.Errors {
		fmt.Fprintf(e.stderr, "  %s\n", msg)
	}
	return exitError{code: 1}
}

// pollEvery is how often --wait reads the operation.
const pollEvery = time.Second

// followOperation shows an operation's progress until it ends (or the
// timeout passes): exit 1 unless every task is done.
func followOperation(ctx context.Context, e *env, c *client, id int64, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	p := newProgress(e.stdout, e.stdoutTTY)
	defer p.done()
	last := ""
	for {
		cctx, cancel := callContext(ctx)
		resp, err := c.op.ShowOperation(cctx, &pb.ShowOperationRequest{Id: id, Limit: 1})
		cancel()
		switch {
		case ctx.Err() != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded):
			p.done()
			fmt.Fprintf(e.stdout, "%s (gave up after %s)\n", last, timeout)
			return exitError{code: 1}
		case ctx.Err() != nil:
			return errors.New("interrupted")
		case err != nil:
			return c.check(err)
		}
		op := resp.Operation
		last = progressLine(id, resp.TaskCounts)
		switch op.State {
		case pb.OperationState_OPERATION_STATE_DONE:
			p.done()
			fmt.Fprintf(e.stdout, "%s: done\n", last)
			return nil
		case pb.OperationState_OPERATION_STATE_FAILED, pb.OperationState_OPERATION_STATE_STOPPED,
			pb.OperationState_OPERATION_STATE_REJECTED, pb.OperationState_OPERATION_STATE_EXPIRED,
			pb.OperationState_OPERATION_STATE_INVALID:
			p.done()
			fmt.Fprintf(e.stdout, "%s: %s\n", last, opState(op.State))
			return exitError{code: 1}
		case pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL, pb.OperationState_OPERATION_STATE_APPROVED:
			last = runLine(op, resp.WhoMayApprove)
		}
		p.update(last)
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}
