package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func waitCommand(e *env) *cobra.Command {
	var timeout time.Duration
	var since int64
	var tolerate bool
	cmd := &cobra.Command{
		Use:   "wait [SERVICE|UNIT]...",
		Short: "Wait until the agents have acted on the model as it is now",
		Long: `Wait until every agent has seen the model as it is now (or as of
--since-revision) and finished acting on it, showing what it still waits for.

wait first asks the controller for a barrier: a revision at or past the
model's current one (or --since-revision), which every agent's watches are
brought to. It then waits until

  - every unit's agent has reported that it saw every change up to the
    barrier and has nothing left to do: idle with the unit running, or in
    an error state (a hook failed and its retries ran out: it waits for
    ctl resolved); a unit removed meanwhile is done with;
  - and nothing is on its way out: no unit, service or relation is dying,
    and no machine is dying or dead;
  - and no rollout moves units: none is rolling, or in its canary before
    the canary's units are through (a canary waiting for ctl rollout
    promote, a paused or a failed rollout waits for an operator: settled).

The hooks run for those changes may have written more after the barrier
(a kv unit's new port, in the settings its clients read): once settled,
wait takes another barrier and settles again, and again while a round
finds a unit on its way.

Named SERVICEs and UNITs narrow it to those units (a unit's subordinates
with it), the lives of the services named, the relations of those units'
services, and the machines of those units. A name the model does not hold
counts as done with.

A unit whose hook failed shows in error at once, with when the hook runs
again ("in error: kv/0 (hook failed: ...)" in the progress line); it is
waited for until the hook succeeds or its retries run out. A unit whose
agent the controller refuses (its credential replaced, and its machine
unable to get it a new one) is not settled, and named with why
("kv/0 (agent unauthenticated: ...)").

wait exits 0 once settled with no unit in error; 1 once settled with units
in error (it names them); 1 at once when a unit in error holds up something
dying (the unit itself, its service, machine, principal or subordinates, a
relation it must depart), unless --tolerate-errors, when it keeps waiting;
1 when --timeout passes first (it names what is not settled). --timeout 0
waits for ever.

Example:
  ctl deploy examples/charms/kv -n 3 && ctl wait
  ctl config kv port=7071 && ctl wait kv
  ctl wait kv/0 --timeout 30m
  ctl destroy-service kv && ctl wait --tolerate-errors`,
		Args: func(cmd *cobra.Command, args []string) error {
			if _, err := newSelection(args); err != nil {
				return usagef(cmd, "%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef(cmd, "--timeout %s: want a duration of 0 or more", timeout)
			}
			if since < 0 {
				return usagef(cmd, "--since-revision %d: want a revision of the model, or 0 for now", since)
			}
			sel, _ := newSelection(args)
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			return waitSettled(cmd.Context(), e, c, waitOptions{timeout: timeout, since: since, tolerate: tolerate, sel: sel})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long (0: never)")
	cmd.Flags().Int64Var(&since, "since-revision", 0, "wait for the model as of this revision (ctl status --format json shows the model's), not as it is now")
	cmd.Flags().BoolVar(&tolerate, "tolerate-errors", false, "keep waiting when a unit in error holds up something dying")
	return cmd
}

// waitOptions are ctl wait's flags and arguments.
type waitOptions struct {
	timeout  time.Duration
	since    int64
	tolerate bool
	sel      selection
}

// waitSettled asks for a barrier, then follows the model's status until
// its selected part settles as of the barrier, an error holds up
// something dying (unless tolerated), the timeout passes (0: none) or ctx
// ends.
func waitSettled(ctx context.Context, e *env, c *client, o waitOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	takeBarrier := func(atLeast int64) (int64, error) {
		bctx, bcancel := callContext(ctx)
		defer bcancel()
		b, err := c.op.Barrier(bctx, &pb.BarrierRequest{AtLeast: atLeast})
		if err != nil {
			return 0, c.check(err)
		}
		return b.Revision, nil
	}
	barrier, err := takeBarrier(o.since)
	if err != nil {
		return err
	}
	// Settled as of one barrier, the units have acted on every change up
	// to it; but the hooks they ran for those changes wrote after it (a
	// kv unit's config-changed sets the relation settings its clients
	// read), and their readers need not have acted on that yet. So once
	// settled, wait takes another barrier, past those writes, and settles
	// again; and again while a round finds a unit on its way (more than
	// catching up with the barrier), which shows hooks still ran in it.
	rounds, busy := 1, false
	stream, err := c.op.WatchStatus(ctx, &pb.WatchStatusRequest{IntervalMs: 500})
	if err != nil {
		return c.check(err)
	}
	type update struct {
		st  *pb.ModelStatus
		err error
	}
	updates := make(chan update)
	go func() { // ends with the stream, which ends with ctx
		for {
			resp, err := stream.Recv()
			select {
			case updates <- update{resp.GetStatus(), err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var deadline <-chan time.Time
	if o.timeout > 0 {
		timer := time.NewTimer(o.timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	p := newProgress(e.stderr, e.stderrTTY)
	defer p.done()
	var last *settlement
	show := func() {
		if last == nil {
			p.update(fmt.Sprintf("waiting for the model's status (%s)", seconds(time.Since(start))))
			return
		}
		p.update(waitingLine(*last, time.Since(start)))
	}
	// named are the errors the progress line has shown: a new one (a
	// unit that failed, or failed again) is shown at once, in a log too.
	named := map[string]bool{}
	for {
		select {
		case u := <-updates:
			if u.err != nil {
				if errors.Is(u.err, context.Canceled) || ctx.Err() != nil {
					return errors.New("interrupted")
				}
				if errors.Is(u.err, io.EOF) {
					return errStreamEnded
				}
				return c.check(u.err)
			}
			s := settle(u.st, barrier, o.sel)
			for s.settled() && len(s.errors) == 0 && (rounds == 1 || busy) {
				// The status need not change for the new round (an
				// empty model's does not): look at it again first.
				if barrier, err = takeBarrier(0); err != nil {
					return err
				}
				rounds++
				busy = false
				s = settle(u.st, barrier, o.sel)
			}
			if len(s.blocking) > 0 && !o.tolerate {
				p.done()
				return fmt.Errorf("%s in error, holding up what is dying: %s (answer with ctl resolved, or wait with --tolerate-errors)",
					plural(len(s.blocking), "unit"), strings.Join(s.blocking, "; "))
			}
			if s.settled() {
				p.done()
				if len(s.errors) > 0 {
					return fmt.Errorf("settled with %s in error: %s", plural(len(s.errors), "unit"), listSome(s.errors, 20))
				}
				done := fmt.Sprintf("settled: %s idle, nothing dying, as of revision %d (%s)", plural(s.units, "unit"), barrier, seconds(time.Since(start)))
				if len(s.missing) > 0 {
					done += "; not in the model: " + strings.Join(s.missing, ", ")
				}
				fmt.Fprintln(e.stdout, done)
				return nil
			}
			last = &s
			busy = busy || s.busy()
			fresh := false
			for _, e := range s.errors {
				fresh = fresh || !named[e]
				named[e] = true
			}
			if fresh {
				p.now(waitingLine(s, time.Since(start)))
			} else {
				show()
			}
		case <-tick.C:
			show()
		case <-deadline:
			p.done()
			if last == nil {
				return fmt.Errorf("timed out after %s: no status from the controller", o.timeout)
			}
			msg := fmt.Sprintf("timed out after %s", o.timeout)
			if len(last.unsettled) > 0 {
				msg += ": not settled: " + listSome(last.unsettled, 20)
			}
			if len(last.errors) > 0 {
				msg += "; in error: " + listSome(last.errors, 20)
			}
			return errors.New(msg)
		case <-ctx.Done():
			return errors.New("interrupted")
		}
	}
}

// waitingLine is the progress line of a wait that has gone on for d:
// what is not settled, and the units in error.
func waitingLine(s settlement, d time.Duration) string {
	line := fmt.Sprintf("waiting (%s)", seconds(d))
	sep := ": "
	if len(s.unsettled) > 0 {
		line += fmt.Sprintf("%s%d not settled: %s", sep, len(s.unsettled), listSome(s.unsettled, 10))
		sep = "; "
	}
	if len(s.errors) > 0 {
		line += sep + "in error: " + listSome(s.errors, 10)
	}
	return line
}
