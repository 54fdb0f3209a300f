package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ohler55/ojg/jp"
	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func statusCommand(e *env) *cobra.Command {
	var format, output string
	var watch, noColor bool
	cmd := &cobra.Command{
		Use:   "status [SELECTOR]...",
		Short: "Show the model: machines, services, units and relations",
		Long: `Show the model: every machine, service, unit and relation, with its life
(alive, dying, dead), its agent's status and its workload's, and what each
dying entity is still waiting for.

Selectors show part of the model, the union of what each selects (as juju
status does): a service (kv) with its units, their subordinates and
machines, and its relations; a unit (kv/0) with its service, its
subordinates, its machine and their services' relations; a machine (3, or
machine 3) with its units, their subordinates and services, and those
services' relations. A service shown for a unit's or a machine's sake lists
those units alone, and its status is theirs; a relation lists the units
shown in its scope. The controller reads only what is selected. A name that
does not exist fails (exit 1).

--format tabular (the default) reads like juju status, under a line naming
the controller that answered, its version, the time it read the model at and
the user; on a terminal, states are coloured (error red, blocked and waiting
yellow, active, idle and started green) unless --no-color or NO_COLOR says
not to. json and yaml give the same data as one document:

  {"schema_version": 1, "revision",
   "machines": {"0": {"life", "instance", "address", "agent", "since", "units"}},
   "services": {"kv": {"charm", "revision", "life", "status", "version",
                       "units": {"kv/0": {"life", "machine", "principal",
                                          "agent", "agent_since", "state",
                                          "workload", "workload_since",
                                          "message", "ports"}}}},
   "relations": [{"id", "key", "life", "scope",
                  "endpoints": [{"service", "endpoint", "role", "interface"}]}],
   "operations": {"running", "awaiting_approval", "approved", "lost_tasks"}}

schema_version is the document's shape's: fields are added within it, and a
field changed or removed makes the next. since times are RFC 3339, in UTC.
--format line writes one line a unit, every field always there in the same
order, "-" when empty, the message last and quoted:

  kv/0 service=kv machine=0 principal=- life=alive agent=idle state=running workload=active rev=4 target=4 message="serving"

-o takes any of the formats, or jsonpath=EXPR: what the JSONPath EXPR
selects of the json document, a line each (strings as they are, the rest as
JSON); $.services.kv.units and kubectl's {.services.kv.units} both work, and
an EXPR that selects nothing fails.

revision is the model's as read (what ctl wait --since-revision takes).
A service's revision is its charm's and spec_revision its spec's (ctl
revisions); while its units move to a new one, rollout says how far:
{"state", "target", "previous", "updated", "units"} (ctl rollout status). A
unit's revision is the spec revision it runs, target_revision the one it
moves to. A unit's ports are its port claims, its charm's and those its
hooks opened (open-port), as its agent last reported them; the tabular
status has a Ports column when a unit shown has any. The tabular Spec
columns show "rev 4", "rev 4 (3/10)" for a service
whose rollout has 3 of its 10 units on revision 4, and "rev 3→4" for a unit
moving.
A service's leader (the unit its charm's is-leader says True in) is marked
"kv/0*" in the tabular status, and has "leader": true in JSON and YAML.
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
  ctl status --format line | grep '^kv/'
  ctl status -o jsonpath='{.services.kv.units.*.workload}'
  ctl status --watch`,
		Args: argsRange(0, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := e.statusOutput(cmd, format, output, noColor)
			if err != nil {
				return err
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
				return watchStatus(cmd.Context(), e, c, req, out)
			}
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.Status(ctx, statusRequest(services, units, machines))
			if err != nil {
				return c.check(err)
			}
			e.learnControllers(resp.Status)
			// Written as it is rendered, in pieces: a 100,000-unit
			// model is tens of MB of JSON, which a buffer of the whole
			// would grow, clear and fault in page by page.
			w := bufio.NewWriterSize(e.stdout, 64<<10)
			if out.format == formatTabular {
				w.WriteString(statusHeader(resp.Controller, resp.Version, resp.TimeUnixNano, resp.Status, resp.User))
			}
			if err := out.render(w, resp.Status); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json, yaml or line")
	cmd.Flags().StringVarP(&output, "output", "o", "", "tabular, json, yaml, line or jsonpath=`EXPR` (instead of --format)")
	cmd.Flags().BoolVar(&noColor, "no-color", false, "never colour the tabular status (as NO_COLOR does)")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw after every change, until interrupted")
	return cmd
}

// statusOutput is how ctl status writes what it reads.
type statusOutput struct {
	format string
	// path, for -o jsonpath=EXPR, selects what of the json document to
	// write.
	path jp.Expr
	look statusLook
}

// statusOutput reads ctl status's --format, -o and --no-color.
func (e *env) statusOutput(cmd *cobra.Command, format, output string, noColor bool) (statusOutput, error) {
	if output != "" {
		if cmd.Flags().Changed("format") {
			return statusOutput{}, usagef(cmd, "-o and --format: give one")
		}
		format = output
	}
	out := statusOutput{format: format}
	switch {
	case strings.HasPrefix(format, jsonPathPrefix):
		x, err := parseJSONPath(strings.TrimPrefix(format, jsonPathPrefix))
		if err != nil {
			return statusOutput{}, usagef(cmd, "%v", err)
		}
		out.format, out.path = formatJSON, x
	case format == formatTabular, format == formatJSON, format == formatYAML, format == formatLine:
	default:
		return statusOutput{}, usagef(cmd, "--format %q: want tabular, json, yaml, line or jsonpath=EXPR", format)
	}
	out.look.color = out.format == formatTabular && useColor(noColor, e.noColorEnv, e.stdoutTTY)
	return out, nil
}

// render writes a status as out says.
func (out statusOutput) render(w io.Writer, st *pb.ModelStatus) error {
	if out.path != nil {
		return renderJSONPath(w, st, out.path)
	}
	return renderStatusWith(w, st, out.format, out.look)
}

// watchStatus renders every status the controller streams until ctx ends
// (an interrupt: a normal end).
func watchStatus(ctx context.Context, e *env, c *client, req *pb.WatchStatusRequest, out statusOutput) error {
	format := out.format
	redraw := format == formatTabular && e.stdoutTTY
	if redraw {
		// A redraw's lines are cut to the terminal's width: wrapped,
		// they would scroll its top out of sight.
		out.look.width = e.stdoutWidth
	}
	stream, err := c.op.WatchStatus(ctx, req)
	if err != nil {
		return c.check(err)
	}
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
			buf.WriteString(statusHeader(resp.Controller, resp.Version, resp.TimeUnixNano, resp.Status, resp.User))
		}
		if err := out.render(&buf, resp.Status); err != nil {
			return err
		}
		if _, err := e.stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		first = false
	}
}

// errStreamEnded says the controller ended a status stream (it ends them
// only when it stops).
var errStreamEnded = errors.New("the controller ended the status stream: is it stopping?")

// learnControllers keeps the addresses of the live controllers that status
// names in the client config's address cache, so that ctl fails over to
// controllers added after the config was written; the config itself, which
// holds the credential, is never rewritten by a reading command. Addresses
// it already has stay (after the live ones): ctl may reach a controller by
// an address the controller does not advertise. Failing to save is only
// worth a warning.
func (e *env) learnControllers(st *pb.ModelStatus) {
	cfg, err := e.readConfig()
	if err != nil {
		return
	}
	path, err := e.clientConfigPath()
	if err != nil {
		return
	}
	merged := mergeControllers(cfg.Controllers, st.GetControllers())
	if slices.Equal(merged, cfg.Controllers) {
		return
	}
	if err := writeAddressCache(path, merged); err != nil {
		fmt.Fprintf(e.stderr, "ctl: warning: cannot save the controllers' addresses in %s: %v\n", addressCachePath(path), err)
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
