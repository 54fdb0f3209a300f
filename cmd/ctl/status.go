package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func statusCommand(e *env) *cobra.Command {
	var format string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status [SELECTOR]...",
		Short: "Show the model: machines, services, units and relations",
		Long: `Show the model: every machine, service, unit and relation, with its life
(alive, dying, dead), its agent's status and its workload's, and what each
dying entity is still waiting for.

Selectors show part of the model, the union of what each selects (as juju
status does): a service (kv) with its units, their subordinates and
machines, and its relations; a unit (kv/0) with its service, its
subordinates, its machine and their services' relations; a machine (3, or machine 3)
with its units, their subordinates and services, and those services'
relations. A
service shown for a unit's or a machine's sake lists those units alone,
and its status is theirs; a relation lists the units shown in its scope.
The controller reads only what is selected. A name that does not exist
fails (exit 1).

--format tabular (the default) reads like juju status; json and yaml give the
same data as one document:

  {"revision", "machines": {"0": {"life", "instance", "address", "agent", "units"}},
   "services": {"kv": {"charm", "revision", "life", "status",
                       "units": {"kv/0": {"life", "machine", "principal",
                                          "agent", "state", "workload", "message"}}}},
   "relations": [{"id", "key", "life", "scope"}],
   "operations": {"running", "awaiting_approval", "approved", "lost_tasks"}}

revision is the model's as read (what ctl wait --since-revision takes).
A service's revision is its charm's and spec_revision its spec's (ctl
revisions); while its units move to a new one, rollout says how far:
{"state", "target", "previous", "updated", "units"} (ctl rollout status). A
unit's revision is the spec revision it runs, target_revision the one it
moves to. The tabular Spec columns show "rev 4", "rev 4 (3/10)" for a service
whose rollout has 3 of its 10 units on revision 4, and "rev 3→4" for a unit
moving.
operations counts the open operations and their lost tasks (ctl operations);
the tabular status heads with a line of them when any is not zero.
A machine's agent is pending, started, lost or down; a unit's agent is
allocating, executing, idle, error or lost, its state the unit agent's state
(new, ready, running, install-error...), its workload what the charm said.

--watch follows the model, redrawing after every change until interrupted
(in json and yaml, one document after another).

Example:
  ctl status
  ctl status kv
  ctl status kv/0 machine 3
  ctl status --format json | jq '.services.kv.units'
  ctl status --watch`,
		Args: argsRange(0, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case formatTabular, formatJSON, formatYAML:
			default:
				return usagef(cmd, "--format %q: want tabular, json or yaml", format)
			}
			services, units, machines, err := statusSelection(args)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			if watch {
				req := &pb.WatchStatusRequest{IntervalMs: 500, Services: services, Units: units, Machines: machines}
				return watchStatus(cmd.Context(), e, c, req, format)
			}
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.Status(ctx, statusRequest(services, units, machines))
			if err != nil {
				return c.check(err)
			}
			e.learnControllers(resp.Status)
			if format == formatTabular {
				fmt.Fprint(e.stdout, statusHeader(resp.Controller, resp.User))
			}
			return renderStatus(e.stdout, resp.Status, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw after every change, until interrupted")
	return cmd
}

// watchStatus renders every status the controller streams until ctx ends
// (an interrupt: a normal end).
func watchStatus(ctx context.Context, e *env, c *client, req *pb.WatchStatusRequest, format string) error {
	stream, err := c.op.WatchStatus(ctx, req)
	if err != nil {
		return c.check(err)
	}
	redraw := format == formatTabular && e.stdoutTTY
	first := true
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end
			}
			if errors.Is(err, io.EOF) {
				return errStreamEnded
			}
			return c.check(err)
		}
		var buf bytes.Buffer
		switch {
		case redraw:
			buf.WriteString("\x1b[H\x1b[2J") // home, clear screen
			fmt.Fprintf(&buf, "%s  (watching; interrupt to stop)\n\n", time.Now().Format("15:04:05"))
		case format == formatTabular && !first:
			fmt.Fprintf(&buf, "\n--- %s\n", time.Now().Format(time.RFC3339))
		case format == formatYAML && !first:
			buf.WriteString("---\n")
		}
		if format == formatTabular {
			buf.WriteString(statusHeader(resp.Controller, resp.User))
		}
		if err := renderStatus(&buf, resp.Status, format); err != nil {
			return err
		}
		if _, err := e.stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		first = false
	}
}

// statusHeader is the line above the tabular status: the controller that
// answered and the user asking.
func statusHeader(controller, user string) string {
	if controller == "" && user == "" {
		return ""
	}
	return fmt.Sprintf("Controller %s, user %s\n\n", dash(controller), dash(user))
}

// errStreamEnded says the controller ended a status stream (it ends them
// only when it stops).
var errStreamEnded = errors.New("the controller ended the status stream: is it stopping?")

// learnControllers adds the addresses of the live controllers that status
// names to the client config, so that ctl fails over to controllers added
// after the config was written. Addresses it already has stay (after the
// live ones): ctl may reach a controller by an address the controller does
// not advertise. Failing to save is only worth a warning.
func (e *env) learnControllers(st *pb.ModelStatus) {
	cfg, err := e.readConfig()
	if err != nil {
		return
	}
	merged := mergeControllers(cfg.Controllers, st.GetControllers())
	if slices.Equal(merged, cfg.Controllers) {
		return
	}
	cfg.Controllers = merged
	if err := pki.WriteClientConfig(e.configPath, cfg); err != nil {
		fmt.Fprintf(e.stderr, "ctl: warning: cannot save the controllers' addresses in %s: %v\n", e.configPath, err)
	}
}

// mergeControllers returns have with the live controllers' addresses it
// lacks added, or have itself when it has them all. The leader's come
// first among those added.
func mergeControllers(have []string, live []*pb.ControllerStatus) []string {
	live = slices.Clone(live)
	slices.SortStableFunc(live, func(a, b *pb.ControllerStatus) int {
		switch {
		case a.Leader == b.Leader:
			return strings.Compare(a.Id, b.Id)
		case a.Leader:
			return -1
		}
		return 1
	})
	out := have
	for _, c := range live {
		for _, a := range c.Addresses {
			if !slices.Contains(out, a) {
				out = append(slices.Clip(out), a)
			}
		}
	}
	return out
}
