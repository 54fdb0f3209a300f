package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func waitCommand(e *env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the model settles",
		Long: `Wait until the model settles, showing what it still waits for.

The model is settled when every unit is settled (its agent idle with the
unit running, or its agent in error; removed units are gone) and nothing is
on its way out: no machine, service, unit or relation is dying, and no dead
machine waits for the provisioner.

wait exits 0 once settled with no unit in error; 1 when units are in error
(it names them), and 1 when --timeout passes first (it names what is not
settled). --timeout 0 waits for ever.

Example:
  ctl deploy examples/charms/kv -n 3 && ctl wait
  ctl wait --timeout 30m`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout < 0 {
				return usagef(cmd, "--timeout %s: want a duration of 0 or more", timeout)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			return waitSettled(cmd.Context(), e, c, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long (0: never)")
	return cmd
}

// settlement is how far a model is from settled.
type settlement struct {
	// unsettled names what is not settled: units on their way, and
	// anything dying (or dead, for machines).
	unsettled []string
	// errors names the units whose agents are in error, with their messages.
	errors []string
	units  int
}

func (s settlement) settled() bool { return len(s.unsettled) == 0 }

// settle says what in st is not settled. A unit in error counts as settled
// (it goes nowhere until an operator answers), and is listed in errors.
func settle(st *pb.ModelStatus) settlement {
	var s settlement
	for _, m := range sortedMachines(st.GetMachines()) {
		if m.Life == "dying" || m.Life == "dead" {
			s.unsettled = append(s.unsettled, fmt.Sprintf("machine %s (%s)", m.Id, m.Life))
		}
	}
	var units []*pb.UnitStatus
	for _, svc := range st.GetServices() {
		if svc.Life == "dying" {
			s.unsettled = append(s.unsettled, fmt.Sprintf("service %s (dying)", svc.Name))
		}
		units = append(units, svc.Units...)
	}
	sort.Slice(units, func(i, j int) bool { return lessUnit(units[i].Name, units[j].Name) })
	s.units = len(units)
	for _, u := range units {
		switch {
		case u.Agent == "error":
			msg := u.Message
			if msg == "" {
				msg = u.State
			}
			s.errors = append(s.errors, fmt.Sprintf("%s (%s)", u.Name, msg))
		case u.Life != "alive":
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s)", u.Name, u.Life))
		case u.Agent == "idle" && u.State == "running":
		default:
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s, %s)", u.Name, u.Agent, u.State))
		}
	}
	for _, r := range st.GetRelations() {
		if r.Life == "dying" {
			s.unsettled = append(s.unsettled, fmt.Sprintf("relation %d %q (dying)", r.Id, r.Key))
		}
	}
	return s
}

// waitSettled follows the model's status until it settles, the timeout
// passes (0: none) or ctx ends.
func waitSettled(ctx context.Context, e *env, c *client, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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

	start := time.Now()
	var deadline <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
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
		p.update(fmt.Sprintf("waiting (%s): %d not settled: %s", seconds(time.Since(start)), len(last.unsettled), listSome(last.unsettled, 10)))
	}
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
			s := settle(u.st)
			if s.settled() {
				p.done()
				if len(s.errors) > 0 {
					return fmt.Errorf("settled with %s in error: %s", plural(len(s.errors), "unit"), listSome(s.errors, 20))
				}
				fmt.Fprintf(e.stdout, "settled: %s idle, nothing dying (%s)\n", plural(s.units, "unit"), seconds(time.Since(start)))
				return nil
			}
			last = &s
			show()
		case <-tick.C:
			show()
		case <-deadline:
			p.done()
			if last == nil {
				return fmt.Errorf("timed out after %s: no status from the controller", timeout)
			}
			msg := fmt.Sprintf("timed out after %s: not settled: %s", timeout, listSome(last.unsettled, 20))
			if len(last.errors) > 0 {
				msg += "; in error: " + listSome(last.errors, 20)
			}
			return errors.New(msg)
		case <-ctx.Done():
			return errors.New("interrupted")
		}
	}
}
