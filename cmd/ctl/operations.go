package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The commands about operations but ctl run (run.go).

// parseOpID is an operation's id on the command line.
func parseOpID(cmd *cobra.Command, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef(cmd, "%q is not an operation's id (a number, as ctl operations lists them)", s)
	}
	return id, nil
}

func checkUnits(cmd *cobra.Command, units []string) error {
	for _, u := range units {
		if err := names.CheckUnit(u); err != nil {
			return usagef(cmd, "%v", err)
		}
	}
	return nil
}

func actionsCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "actions SERVICE",
		Short: "List the actions of a service's charm",
		Long: `List the actions the charm of SERVICE declares (its actions.yaml): whether each
is safe (runs without approval), who may approve it (user names, @admin:
any admin, @operator: any operator), and its parameters (NAME* is
required, NAME=VALUE has a default). json and yaml add each action's
settings and its parameters' whole JSON Schema.

Example:
  ctl actions kv
  ctl actions kv --format yaml`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ListActionsResponse, error) {
				return op.ListActions(ctx, &pb.ListActionsRequest{Service: args[0]})
			})
			if err != nil {
				return err
			}
			return renderActions(e.stdout, resp, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

func operationsCommand(e *env) *cobra.Command {
	var format, state, service string
	var limit int
	cmd := &cobra.Command{
		Use:   "operations",
		Short: "List operations, newest first",
		Long: `List operations, newest first: each one's id, service, action, state, how many
units it targets, who requested and who approved it. States: invalid,
awaiting-approval, approved, rejected, expired, running, done, failed,
stopped. Finished operations are kept for the controller's
--operation-retention (14 days by default).

Example:
  ctl operations
  ctl operations --state awaiting-approval
  ctl operations --service kv --format json`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			req := &pb.ListOperationsRequest{Service: service, Limit: int32(limit)}
			if state != "" {
				st, ok := parseOpState(state)
				if !ok {
					return usagef(cmd, "--state %q: want invalid, awaiting-approval, approved, rejected, expired, running, done, failed or stopped", state)
				}
				req.State = st
			}
			if limit < 1 || limit > 1000 {
				return usagef(cmd, "--limit %d: want 1 to 1000", limit)
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ListOperationsResponse, error) {
				return op.ListOperations(ctx, req)
			})
			if err != nil {
				return err
			}
			return renderOperations(e.stdout, resp.Operations, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	cmd.Flags().StringVar(&state, "state", "", "only the operations in this state")
	cmd.Flags().StringVar(&service, "service", "", "only the operations on this service")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many (up to 1000)")
	return cmd
}

func showOperationCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show-operation OP",
		Short: "Show an operation and its tasks",
		Long: `Show an operation: its action, service, units and parameters, the charm
revision it was made against, who requested it, who may approve it and
who did, its digest (what an approval binds), its validation errors if it
is invalid, its progress, and each unit's task: state, attempt, how long
ago its machine last reported (for a running task), its results and
message. The first 1,000 tasks are listed.

Example:
  ctl show-operation 3
  ctl show-operation 3 --format json | jq '.tasks[] | select(.state == "failed")'`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ShowOperationResponse, error) {
				return op.ShowOperation(ctx, &pb.ShowOperationRequest{Id: id})
			})
			if err != nil {
				return err
			}
			return renderOperation(e.stdout, resp, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

func showTaskCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show-task OP UNIT",
		Short: "Show one unit's task of an operation",
		Long: `Show a unit's task of an operation: its state, attempt, times, how long ago its
machine last reported, its results, message and the keys of its
checkpoint (what a resumed action goes on from).

Example:
  ctl show-task 3 kv/0`,
		Args: argsRange(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			if err := checkUnits(cmd, args[1:]); err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ShowTaskResponse, error) {
				return op.ShowTask(ctx, &pb.ShowTaskRequest{Id: id, Unit: args[1]})
			})
			if err != nil {
				return err
			}
			return renderTask(e.stdout, id, resp.Task, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

func approveCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "approve OP",
		Short: "Approve an operation awaiting approval, as shown",
		Long: `Approve an operation awaiting approval. ctl approve first shows what it
approves (service, action, units, parameters, charm revision, requester and
digest) and sends that digest: the approval holds for exactly what was
shown, and is refused if the operation is not what was read. Its requester
cannot approve it, and only the action's approvers may. Approving does not
run it: its requester (or an admin) then runs ctl execute.

Example:
  ctl approve 4`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			show, err := c.op.ShowOperation(ctx, &pb.ShowOperationRequest{Id: id, Limit: 1})
			if err != nil {
				return c.check(err)
			}
			op := show.Operation
			fmt.Fprint(e.stdout, approvalText(op))
			resp, err := c.op.ApproveOperation(ctx, &pb.ApproveOperationRequest{Id: id, Digest: op.Digest})
			if err != nil {
				return c.check(err)
			}
			fmt.Fprintf(e.stdout, "approved operation %d; %s (or an admin) runs it with: ctl execute %d\n", id, resp.Operation.Requester, id)
			return nil
		},
	}
}

// approvalText is what ctl approve shows before it approves.
func approvalText(op *pb.Operation) string {
	var b strings.Builder
	t := newTable(&b)
	fmt.Fprintf(t, "Operation:\t%d\n", op.Id)
	fmt.Fprintf(t, "Action:\t%s on %s\n", op.Action, op.Service)
	fmt.Fprintf(t, "Units:\t%s\n", unitList(op.Units))
	fmt.Fprintf(t, "Parameters:\t%s\n", op.ParamsJson)
	fmt.Fprintf(t, "Charm:\t%s revision %d\n", op.Charm.GetName(), op.Charm.GetRevision())
	fmt.Fprintf(t, "Requester:\t%s\n", op.Requester)
	fmt.Fprintf(t, "Digest:\t%s\n", op.Digest)
	t.Flush()
	return b.String()
}

func rejectCommand(e *env) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reject OP",
		Short: "Reject an operation awaiting approval",
		Long: `Reject an operation awaiting approval: it never runs. One of its approvers, or
an admin, may.

Example:
  ctl reject 5 --reason "not during business hours"`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			if _, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.RejectOperationResponse, error) {
				return op.RejectOperation(ctx, &pb.RejectOperationRequest{Id: id, Reason: reason})
			}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "rejected operation %d\n", id)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the requester and the audit log")
	return cmd
}

func executeCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "execute OP",
		Short: "Run an approved operation",
		Long: `Run an approved operation: its requester, or an admin, before its approval
expires, while its service still runs the charm revision it was made
against (otherwise: run it again).

Example:
  ctl execute 4`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ExecuteOperationResponse, error) {
				return op.ExecuteOperation(ctx, &pb.ExecuteOperationRequest{Id: id})
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, runLine(resp.Operation, ""))
			return nil
		},
	}
}

// taskVerb is one of ctl pause, resume and stop.
type taskVerb struct {
	name, past, short, long string
	call                    func(ctx context.Context, op pb.OperatorServiceClient, id int64, units []string) (*pb.TaskVerbResult, error)
}

var taskVerbs = []taskVerb{
	{name: "pause", past: "paused", short: "Pause an operation's tasks",
		long: `Pause an operation's tasks on the units named, or all that can be: a running
one's action is sent SIGTERM, and SIGKILL after its pause-grace; a pending
one does not start. ctl resume starts them again (an action that
checkpoints goes on from its checkpoint).`,
		call: func(ctx context.Context, op pb.OperatorServiceClient, id int64, units []string) (*pb.TaskVerbResult, error) {
			r, err := op.PauseTasks(ctx, &pb.PauseTasksRequest{Id: id, Units: units})
			return r.GetResult(), err
		}},
	{name: "resume", past: "resumed", short: "Resume an operation's paused, failed or lost tasks",
		long: `Resume an operation's paused, failed and lost tasks on the units named, or all
of them: each starts again (with LIFELINE_ACTION_RESUMED=1 when it has a
checkpoint), within the operation's max-parallel. A stopped task cannot be
resumed: stopping is final.`,
		call: func(ctx context.Context, op pb.OperatorServiceClient, id int64, units []string) (*pb.TaskVerbResult, error) {
			r, err := op.ResumeTasks(ctx, &pb.ResumeTasksRequest{Id: id, Units: units})
			return r.GetResult(), err
		}},
	{name: "stop", past: "stopped", short: "Stop an operation's tasks, for good",
		long: `Stop an operation's tasks on the units named, or all its open ones: a running
one's action is ended as a pause's is, and none runs again. Stopping is
final.`,
		call: func(ctx context.Context, op pb.OperatorServiceClient, id int64, units []string) (*pb.TaskVerbResult, error) {
			r, err := op.StopTasks(ctx, &pb.StopTasksRequest{Id: id, Units: units})
			return r.GetResult(), err
		}},
}

func taskVerbCommand(e *env, v taskVerb) *cobra.Command {
	return &cobra.Command{
		Use:   v.name + " OP [UNIT...]",
		Short: v.short,
		Long: v.long + `

It prints the units whose tasks it ` + v.past + `, those already so, and those it
could not move with why: exit status 1 when there is any of those.

Example:
  ctl ` + v.name + ` 6 kv/0
  ctl ` + v.name + ` 6`,
		Args: argsRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			if err := checkUnits(cmd, args[1:]); err != nil {
				return err
			}
			res, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.TaskVerbResult, error) {
				return v.call(ctx, op, id, args[1:])
			})
			if err != nil {
				return err
			}
			fmt.Fprint(e.stdout, verbText(id, v.name, v.past, res))
			for _, r := range res.Refused {
				fmt.Fprintf(e.stderr, "ctl: %s\n", r.Message)
			}
			if len(res.Refused) > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
}

// verbText says what a verb did: "operation 7: paused kv/0 kv/1; already
// paused: kv/2".
func verbText(id int64, name, past string, res *pb.TaskVerbResult) string {
	var parts []string
	if len(res.GetChanged()) > 0 {
		parts = append(parts, past+" "+unitList(res.Changed))
	}
	if len(res.GetAlready()) > 0 {
		parts = append(parts, "already "+past+": "+unitList(res.Already))
	}
	if len(parts) == 0 {
		if len(res.GetRefused()) > 0 {
			return ""
		}
		parts = append(parts, "no task to "+name)
	}
	return fmt.Sprintf("operation %d: %s\n", id, strings.Join(parts, "; "))
}

// operationCommands are ctl's commands about operations.
func operationCommands(e *env) []*cobra.Command {
	cmds := []*cobra.Command{
		actionsCommand(e), runCommand(e), operationsCommand(e), showOperationCommand(e), showTaskCommand(e),
		approveCommand(e), rejectCommand(e), executeCommand(e), logsCommand(e),
	}
	for _, v := range taskVerbs {
		cmds = append(cmds, taskVerbCommand(e, v))
	}
	return cmds
}
