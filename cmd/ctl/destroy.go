package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func destroyRelationCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "destroy-relation SERVICE[:ENDPOINT] SERVICE[:ENDPOINT]",
		// Juju 3's name, for operators coming from Juju.
		Aliases: []string{"remove-relation"},
		Short:   "Remove the relation between two services",
		Long: `Remove the relation between two services. It goes at once when no unit is
in it; otherwise it becomes dying while its units run relation-departed and
relation-broken and leave, and the last to leave removes it. Name the
endpoints when the services are related in more than one way.

Example:
  ctl destroy-relation app logger
  ctl destroy-relation web:db kv:server`,
		Args: argsRange(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			if _, err := c.op.DestroyRelation(ctx, &pb.DestroyRelationRequest{Endpoints: args}); err != nil {
				return c.check(err)
			}
			fmt.Fprintf(e.stdout, "destroying the relation between %s and %s\n", args[0], args[1])
			return nil
		},
	}
}

// forceFlags are the flags of a destroy that an operator may force.
type forceFlags struct {
	force   bool
	maxWait time.Duration
	noWait  bool
}

func (f *forceFlags) register(cmd *cobra.Command, what string) {
	fl := cmd.Flags()
	fl.BoolVar(&f.force, "force", false, "have the controller remove the "+what+" for its agent if the agent has not done it within --max-wait")
	fl.DurationVar(&f.maxWait, "max-wait", 0, "with --force, how long the agent gets before the controller forces (default 1m)")
	fl.BoolVar(&f.noWait, "no-wait", false, "with --force, force at once")
}

// maxWaitMs checks the flags and returns the request's max_wait_ms (nil
// for the controller's default).
func (f *forceFlags) maxWaitMs(cmd *cobra.Command) (*int64, error) {
	waitSet := cmd.Flags().Changed("max-wait")
	switch {
	case waitSet && f.noWait:
		return nil, usagef(cmd, "--max-wait and --no-wait contradict each other: give one")
	case (waitSet || f.noWait) && !f.force:
		return nil, usagef(cmd, "--max-wait and --no-wait need --force")
	case waitSet && f.maxWait < 0:
		return nil, usagef(cmd, "--max-wait %s: want a duration of 0 or more", f.maxWait)
	case f.noWait:
		var zero int64
		return &zero, nil
	case waitSet:
		ms := f.maxWait.Milliseconds()
		return &ms, nil
	}
	return nil, nil
}

func (f *forceFlags) describe() string {
	switch {
	case !f.force:
		return ""
	case f.noWait:
		return " (forced now)"
	case f.maxWait > 0:
		return fmt.Sprintf(" (forced after %s)", f.maxWait)
	}
	return " (forced if its agent does not finish in time)"
}

// destroyEach calls destroy for every name, one call each (a destroy
// command's, or resolved's answer to each unit); it prints each failure on
// its own line and fails (exit status 1) when any did.
func destroyEach(ctx context.Context, e *env, c *client, names []string, destroy func(ctx context.Context, name string) error, done func(name string)) error {
	failed := 0
	for _, name := range names {
		cctx, cancel := callContext(ctx)
		err := destroy(cctx, name)
		cancel()
		if err != nil {
			err = c.check(err)
			var unreachable unreachableError
			if ctx.Err() != nil || errors.As(err, &unreachable) {
				return err // the others would fail the same way
			}
			fmt.Fprintln(e.stderr, "ctl:", errorText(err))
			failed++
			continue
		}
		done(name)
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}

// machinesACall is how many machines ctl names in a DestroyMachines call
// (the controller takes at most 1,000).
const machinesACall = 1000

// destroyMachines destroys the machines named with as few calls as it can
// (DestroyMachines, several machines a transaction), and reports each as
// destroyEach does. A call that fails whole stops it.
func destroyMachines(ctx context.Context, e *env, c *client, ids []string, req *pb.DestroyMachinesRequest, describe string) error {
	failed := 0
	for len(ids) > 0 {
		req.Machines = ids[:min(len(ids), machinesACall)]
		ids = ids[len(req.Machines):]
		cctx, cancel := callContext(ctx)
		resp, err := c.op.DestroyMachines(cctx, req)
		cancel()
		if err != nil {
			return c.check(err)
		}
		for i, id := range req.Machines {
			r := &pb.StatusReportResult{Code: uint32(codes.Unknown), Message: "machine " + id + ": the controller gave no answer"}
			if i < len(resp.GetResults()) {
				r = resp.GetResults()[i]
			}
			if codes.Code(r.GetCode()) != codes.OK {
				fmt.Fprintln(e.stderr, "ctl:", r.GetMessage())
				failed++
				continue
			}
			fmt.Fprintf(e.stdout, "destroying machine %s%s\n", id, describe)
		}
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}

func destroyUnitCommand(e *env) *cobra.Command {
	var f forceFlags
	cmd := &cobra.Command{
		Use: "destroy-unit UNIT...",
		// Juju 3's name, for operators coming from Juju.
		Aliases: []string{"remove-unit"},
		Short:   "Remove units",
		Long: `Remove units. Each becomes dying; its agent departs its relations (their
hooks run), waits for its subordinates to go, runs stop and remove, and the
unit is removed. Subordinate units go with their principal or their relation.

With --force, the controller does the agent's work for it when the agent has
not finished after --max-wait (1 minute by default; --no-wait: at once): for
agents that are gone or stuck.

Every unit is tried; each failure is reported on its own line.

Example:
  ctl destroy-unit kv/2
  ctl destroy-unit kv/1 app/1 --force --max-wait 30s
  ctl destroy-unit web/0 --force --no-wait`,
		Args: argsRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			maxWait, err := f.maxWaitMs(cmd)
			if err != nil {
				return err
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			return destroyEach(cmd.Context(), e, c, args, func(ctx context.Context, unit string) error {
				_, err := c.op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: unit, Force: f.force, MaxWaitMs: maxWait})
				return err
			}, func(unit string) { fmt.Fprintf(e.stdout, "destroying unit %s%s\n", unit, f.describe()) })
		},
	}
	f.register(cmd, "unit")
	return cmd
}

func destroyMachineCommand(e *env) *cobra.Command {
	var f forceFlags
	cmd := &cobra.Command{
		Use: "destroy-machine MACHINE...",
		// Juju 3's name, for operators coming from Juju.
		Aliases: []string{"remove-machine"},
		Short:   "Remove machines",
		Long: `Remove machines. A machine with alive units assigned is refused (the
refusal names them): destroy its units first. Otherwise it becomes dying, its
agent sets it dead once its units are gone, and the provisioner releases it.

With --force the machine is destroyed with its units: they become dying at
once, and when their agents have not finished after --max-wait (1 minute by
default; --no-wait: at once) the controller removes them and sets the
machine dead.

Every machine is tried; each failure is reported on its own line.

Example:
  ctl destroy-machine 6
  ctl destroy-machine 7 8 --force
  ctl destroy-machine 1 --force --no-wait`,
		Args: argsRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			maxWait, err := f.maxWaitMs(cmd)
			if err != nil {
				return err
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			return destroyMachines(cmd.Context(), e, c, args, &pb.DestroyMachinesRequest{Force: f.force, MaxWaitMs: maxWait}, f.describe())
		},
	}
	f.register(cmd, "machine's units")
	return cmd
}

func destroyServiceCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "destroy-service SERVICE...",
		// Juju 3's name, for operators coming from Juju.
		Aliases: []string{"remove-application"},
		Short:   "Remove services",
		Long: `Remove services. A service without units or relations goes at once;
otherwise it becomes dying with its relations, its units follow, and the last
of them to go removes it.

Every service is tried; each failure is reported on its own line.

Example:
  ctl destroy-service cache
  ctl destroy-service app web kv logger`,
		Args: argsRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			return destroyEach(cmd.Context(), e, c, args, func(ctx context.Context, name string) error {
				_, err := c.op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: name})
				return err
			}, func(name string) { fmt.Fprintf(e.stdout, "destroying service %s\n", name) })
		},
	}
}

func resolvedCommand(e *env) *cobra.Command {
	var noRetry, all bool
	cmd := &cobra.Command{
		Use: "resolved UNIT... | --all",
		// Juju 3's name, for operators coming from Juju.
		Aliases: []string{"resolve"},
		Short:   "Answer a unit's failed hook: run it again, or count it done",
		Long: `Answer a unit whose hook failed (its agent in error): its agent runs the
failed hook again, or, with --no-retry, counts it as done and moves on.
A unit is answered once: one that is not in error, or whose answer its
agent has yet to act on, is refused. Each unit named is tried; each
refusal is reported on its own line.

With --all, every unit in error is answered, and each is reported; one
answered already, or out of error by the time its turn comes, is reported
and left as it is.

Example:
  ctl resolved cache/0
  ctl resolved cache/1 --no-retry
  ctl resolved --all`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef(cmd, "--all answers every unit in error: name no unit with it")
			case !all && len(args) == 0:
				return usagef(cmd, "name the units to answer, or give --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			done := func(unit string) {
				if noRetry {
					fmt.Fprintf(e.stdout, "unit %s: its failed hook counts as done\n", unit)
				} else {
					fmt.Fprintf(e.stdout, "unit %s: its failed hook will run again\n", unit)
				}
			}
			if all {
				return resolveAll(cmd.Context(), e, c, noRetry, done)
			}
			return destroyEach(cmd.Context(), e, c, args, func(ctx context.Context, unit string) error {
				_, err := c.op.Resolved(ctx, &pb.ResolvedRequest{Unit: unit, NoRetry: noRetry})
				return err
			}, done)
		},
	}
	cmd.Flags().BoolVar(&noRetry, "no-retry", false, "count the failed hook as done instead of running it again")
	cmd.Flags().BoolVar(&all, "all", false, "answer every unit in error")
	return cmd
}

// resolveAll answers every unit in error and reports each: done for those
// answered; the controller's sentence for a unit answered already, out of
// error or gone by its turn (nothing to do for it); an error for any other
// failure.
func resolveAll(ctx context.Context, e *env, c *client, noRetry bool, done func(unit string)) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	resp, err := c.op.Resolved(ctx, &pb.ResolvedRequest{All: true, NoRetry: noRetry})
	if err != nil {
		return c.check(err)
	}
	if len(resp.Results) == 0 {
		fmt.Fprintln(e.stdout, "no unit is in an error state")
		return nil
	}
	failed := 0
	for _, r := range resp.Results {
		switch codes.Code(r.Code) {
		case codes.OK:
			done(r.Unit)
		case codes.AlreadyExists, codes.FailedPrecondition, codes.NotFound:
			fmt.Fprintln(e.stdout, r.Message)
		default:
			fmt.Fprintln(e.stderr, "ctl:", r.Message)
			failed++
		}
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}
