package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The commands that steer a service's rollout: its policy (set-rollout)
// and what it is doing (rollout status, pause, resume, promote, abort).

func setRolloutCommand(e *env) *cobra.Command {
	var maxParallel, gate string
	var canary int64
	var minHealthy, deadline time.Duration
	var autoRevert bool
	cmd := &cobra.Command{
		Use:   "set-rollout SERVICE",
		Short: "Set how a service's units move to a new revision, or show it",
		Long: `Set the rollout policy of SERVICE: how its units move to a new revision of its
spec (a configuration change, a rollback). Only the flags given change; with
none, show the policy.

  --max-parallel N|P%    how many units move at once: a number, or a
                         percentage of the units, rounded up (default 100%)
  --canary N             move the first N units, then wait for
                         ctl rollout promote (default 0: no canary)
  --min-healthy DURATION how long a unit must run the new revision, idle and
                         not in error or blocked, to count as done (0s)
  --deadline DURATION    the rollout fails unless done within it (10m)
  --auto-revert=BOOL     on failure, return at once to the revision before
                         (true); false pauses the failed rollout instead
  --gate NAME|none       ask the controller's gate NAME (lifelined
                         controller --rollout-gate) before each unit moves;
                         none for no gate (the default)

The policy applies from the next permit a unit is given (max-parallel) or the
next rollout (canary, deadline).

Example:
  ctl set-rollout kv
  ctl set-rollout kv --gate orly --auto-revert=false
  ctl set-rollout kv --max-parallel 25% --canary 1 --min-healthy 5m --gate none`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(cmd, args[0]); err != nil {
				return err
			}
			f := cmd.Flags()
			req := &pb.SetRolloutPolicyRequest{Service: args[0]}
			if f.Changed("max-parallel") {
				req.MaxParallel = &maxParallel
			}
			if f.Changed("canary") {
				if canary < 0 {
					return usagef(cmd, "--canary %d: want 0 or more units", canary)
				}
				req.Canary = &canary
			}
			for _, d := range []struct {
				name string
				v    time.Duration
				set  **int64
			}{{"min-healthy", minHealthy, &req.MinHealthyMs}, {"deadline", deadline, &req.DeadlineMs}} {
				if !f.Changed(d.name) {
					continue
				}
				if d.v < 0 {
					return usagef(cmd, "--%s %s: want 0 or more", d.name, d.v)
				}
				ms := d.v.Milliseconds()
				*d.set = &ms
			}
			if f.Changed("auto-revert") {
				req.AutoRevert = &autoRevert
			}
			if f.Changed("gate") {
				req.Gate = &gate
			}
			var policy *pb.RolloutPolicy
			if req.MaxParallel == nil && req.Canary == nil && req.MinHealthyMs == nil && req.DeadlineMs == nil &&
				req.AutoRevert == nil && req.Gate == nil {
				resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.GetRolloutPolicyResponse, error) {
					return op.GetRolloutPolicy(ctx, &pb.GetRolloutPolicyRequest{Service: args[0]})
				})
				if err != nil {
					return err
				}
				policy = resp.Policy
			} else {
				resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.SetRolloutPolicyResponse, error) {
					return op.SetRolloutPolicy(ctx, req)
				})
				if err != nil {
					return err
				}
				policy = resp.Policy
			}
			_, err := fmt.Fprintf(e.stdout, "rollout policy of %s: %s\n", args[0], policyText(policy))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&maxParallel, "max-parallel", "", "units that move at once: N, or P% of the units")
	f.Int64Var(&canary, "canary", 0, "units to move before waiting for ctl rollout promote")
	f.DurationVar(&minHealthy, "min-healthy", 0, "how long a moved unit must be healthy to be done")
	f.DurationVar(&deadline, "deadline", 0, "how long the rollout may take before it fails")
	f.BoolVar(&autoRevert, "auto-revert", true, "return to the revision before when the rollout fails")
	f.StringVar(&gate, "gate", "", "the controller's gate to ask before each unit moves; none for none")
	return cmd
}

// policyText is a policy as ctl shows it: "max-parallel 100%, canary 0,
// min-healthy 0s, deadline 10m, auto-revert true, gate none".
func policyText(p *pb.RolloutPolicy) string {
	gate := p.GetGate()
	if gate == "" {
		gate = "none"
	}
	return fmt.Sprintf("max-parallel %s, canary %d, min-healthy %s, deadline %s, auto-revert %v, gate %s",
		p.GetMaxParallel(), p.GetCanary(), shortDuration(p.GetMinHealthyMs()), shortDuration(p.GetDeadlineMs()), p.GetAutoRevert(), gate)
}

// shortDuration is a duration of ms milliseconds without its zero
// units: "10m", "1h30m", "0s", "1.5s".
func shortDuration(ms int64) string {
	s := (time.Duration(ms) * time.Millisecond).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rolloutVerbs are rollout's verbs beside status, with what each says it
// did.
var rolloutVerbs = map[string]func(ctx context.Context, op pb.OperatorServiceClient, service string) (string, error){
	"pause": func(ctx context.Context, op pb.OperatorServiceClient, service string) (string, error) {
		resp, err := op.PauseRollout(ctx, &pb.PauseRolloutRequest{Service: service})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: rollout to revision %d paused: no unit starts moving until ctl rollout resume", service, resp.Rollout.GetTarget()), nil
	},
	"resume": func(ctx context.Context, op pb.OperatorServiceClient, service string) (string, error) {
		resp, err := op.ResumeRollout(ctx, &pb.ResumeRolloutRequest{Service: service})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: rollout to revision %d resumed: %s, deadline %s", service, resp.Rollout.GetTarget(),
			rolloutStateName(resp.Rollout.GetState()), when(resp.Rollout.GetDeadlineUnixNano())), nil
	},
	"promote": func(ctx context.Context, op pb.OperatorServiceClient, service string) (string, error) {
		resp, err := op.PromoteRollout(ctx, &pb.PromoteRolloutRequest{Service: service})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: rollout to revision %d promoted: the rest of its units move", service, resp.Rollout.GetTarget()), nil
	},
	"abort": func(ctx context.Context, op pb.OperatorServiceClient, service string) (string, error) {
		resp, err := op.AbortRollout(ctx, &pb.AbortRolloutRequest{Service: service})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s: rollout to revision %d aborted: revision %d returns to revision %d's spec, rolling out without a canary",
			service, resp.Aborted, resp.Revision.GetNumber(), resp.ReturnedTo), nil
	},
}

// rolloutWatchInterval is how often rollout status --watch asks.
const rolloutWatchInterval = time.Second

func rolloutCommand(e *env) *cobra.Command {
	var format string
	var watch bool
	cmd := &cobra.Command{
		Use:   "rollout status|pause|resume|promote|abort SERVICE",
		Short: "Show or steer a service's rollout to its newest revision",
		Long: `Show or steer the rollout of SERVICE: how its units move to the newest
revision of its spec (ctl revisions), within its policy (ctl set-rollout).

  status   the rollout's revisions and state, its units counted and listed
           (each unit's revision, whether it holds a permit to move, why it
           waits, its agent and workload), and the gate's recent decisions,
           newest first. --watch redraws it every second as it changes,
           until interrupted or the rollout is done; --format json or yaml
           gives the same as one document.
  pause    no unit starts moving until resume (units moving finish).
  resume   a paused or failed rollout goes on, with a new deadline.
  promote  after the canary's units moved, the rest move.
  abort    return now: a new revision with the spec the rollout started
           from (charm and configuration together), rolled out to every
           unit without a canary.

The status's first line reads
  kv: rev 3→4 rolling, 3/10 updated, 2 updating, 5 waiting, 0 denied, 0 failed, permits 2/2
where updated units run revision 4, updating ones hold a permit and move,
waiting ones wait for one, denied ones were refused by the gate, failed ones
are in error; permits are those out of those max-parallel allows.

Example:
  ctl rollout status kv
  ctl rollout pause kv
  ctl rollout resume kv
  ctl rollout promote kv
  ctl rollout status kv --format json
  ctl rollout status kv --watch
  ctl rollout abort kv`,
		Args: argsRange(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			verb, service := args[0], args[1]
			if err := checkService(cmd, service); err != nil {
				return err
			}
			if verb != "status" {
				do, ok := rolloutVerbs[verb]
				if !ok {
					return usagef(cmd, "%q: want status, pause, resume, promote or abort", verb)
				}
				if cmd.Flags().Changed("format") || watch {
					return usagef(cmd, "--format and --watch are status's: ctl rollout %s takes none", verb)
				}
				msg, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (string, error) {
					return do(ctx, op, service)
				})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(e.stdout, msg)
				return err
			}
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			if watch {
				return watchRollout(cmd.Context(), e, service, format)
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.RolloutStatusResponse, error) {
				return op.RolloutStatus(ctx, &pb.RolloutStatusRequest{Service: service})
			})
			if err != nil {
				return err
			}
			return renderRollout(e.stdout, resp, format, time.Now())
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml (status)")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw the status as it changes, until interrupted or done (status)")
	return cmd
}

// watchRollout draws a service's rollout status, asking every
// rolloutWatchInterval and drawing it again when it changed, until ctx
// ends (an interrupt: a normal end) or the rollout is done.
func watchRollout(ctx context.Context, e *env, service, format string) error {
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	redraw := format == formatTabular && e.stdoutTTY
	var last []byte
	first := true
	for {
		callCtx, cancel := callContext(ctx)
		resp, err := c.op.RolloutStatus(callCtx, &pb.RolloutStatusRequest{Service: service})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return c.check(err)
		}
		// Drawn without the clock, so that a redraw means a change.
		var body bytes.Buffer
		if err := renderRollout(&body, resp, format, time.Time{}); err != nil {
			return err
		}
		if !bytes.Equal(body.Bytes(), last) {
			last = body.Bytes()
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
			buf.Write(body.Bytes())
			if _, err := e.stdout.Write(buf.Bytes()); err != nil {
				return err
			}
			first = false
		}
		if resp.Rollout.GetState() == pb.RolloutState_ROLLOUT_STATE_DONE {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(rolloutWatchInterval):
		}
	}
}

// rolloutStateName is a rollout's state as ctl shows it: "rolling".
func rolloutStateName(st pb.RolloutState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "ROLLOUT_STATE_"))
}

// revText is a move between revisions: "4", or "3→4" while from is
// another.
func revText(from, to int64) string {
	if to == 0 {
		return "-"
	}
	if from == to || from == 0 {
		return fmt.Sprint(to)
	}
	return fmt.Sprintf("%d→%d", from, to)
}

// rolloutHeader is the status's first line: "kv: rev 3→4 rolling, 3/10
// updated, 2 updating, 5 waiting, 0 denied, 0 failed, permits 2/2".
func rolloutHeader(resp *pb.RolloutStatusResponse) string {
	ro, c := resp.Rollout, resp.Counts
	rev := revText(ro.GetPrevious(), ro.GetTarget())
	if ro.GetState() == pb.RolloutState_ROLLOUT_STATE_DONE {
		rev = fmt.Sprint(ro.GetTarget())
	}
	return fmt.Sprintf("%s: rev %s %s, %d/%d updated, %d updating, %d waiting, %d denied, %d failed, permits %d/%d",
		resp.Service, rev, rolloutStateName(ro.GetState()), c.GetUpdated(), c.GetUnits(), c.GetUpdating(), c.GetWaiting(),
		c.GetDenied(), c.GetFailed(), ro.GetPermits(), resp.PermitLimit)
}

// renderRollout writes a rollout's status in a format; now, when not
// zero, says how far the deadline is.
func renderRollout(w io.Writer, resp *pb.RolloutStatusResponse, format string, now time.Time) error {
	if format != formatTabular {
		return writeDoc(w, rolloutDocument(resp), format)
	}
	ro := resp.Rollout
	fmt.Fprintln(w, rolloutHeader(resp))
	if ro.GetReason() != "" {
		fmt.Fprintf(w, "Reason: %s\n", ro.GetReason())
	}
	if ro.GetReverting() != 0 {
		fmt.Fprintf(w, "Returning from revision %d\n", ro.GetReverting())
	}
	if ro.GetState() == pb.RolloutState_ROLLOUT_STATE_CANARY {
		fmt.Fprintf(w, "Canary: %d of %d units given a permit; ctl rollout promote %s moves the rest\n", ro.GetCanaryGranted(), ro.GetCanary(), resp.Service)
	}
	if ro.GetState() != pb.RolloutState_ROLLOUT_STATE_DONE {
		deadline := when(ro.GetDeadlineUnixNano())
		if !now.IsZero() {
			if d := time.Unix(0, ro.GetDeadlineUnixNano()).Sub(now).Round(time.Second); d > 0 {
				deadline += fmt.Sprintf(" (in %s)", d)
			} else {
				deadline += " (passed)"
			}
		}
		fmt.Fprintf(w, "Deadline: %s\n", deadline)
	}
	fmt.Fprintf(w, "Policy: %s\n", policyText(resp.Policy))
	if len(resp.Units) > 0 {
		fmt.Fprintln(w)
		t := newTable(w)
		fmt.Fprintln(t, "Unit\tMachine\tRev\tPermit\tAgent\tWorkload\tNote")
		for _, u := range resp.Units {
			permit := "-"
			if u.Permit {
				permit = "yes"
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Machine, revText(u.Current, u.Target), permit, u.Agent, u.Workload,
				unitNote(u))
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if resp.UnitsLeftOut > 0 {
		fmt.Fprintf(w, "... and %d more units (counted above)\n", resp.UnitsLeftOut)
	}
	if len(resp.Decisions) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Gate decisions, newest first:")
		t := newTable(w)
		fmt.Fprintln(t, "When\tUnit\tGate\tDecision\tRev\tReason")
		for _, d := range resp.Decisions {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", when(d.AtUnixNano), d.Unit, d.Gate, verdictName(d.Decision), revText(d.From, d.To), d.Reason)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// unitNote is what a unit's row says of it: why it waits, then its
// message.
func unitNote(u *pb.RolloutUnit) string {
	var parts []string
	for _, s := range []string{u.Note, u.Message} {
		if s != "" {
			parts = append(parts, strings.ReplaceAll(s, "\n", " "))
		}
	}
	return strings.Join(parts, "; ")
}

func verdictName(v pb.GateVerdict) string {
	return strings.ToLower(strings.TrimPrefix(v.String(), "GATE_VERDICT_"))
}

type rolloutDoc struct {
	Service       string           `json:"service" yaml:"service"`
	Revision      int64            `json:"revision" yaml:"revision"`
	Previous      int64            `json:"previous" yaml:"previous"`
	State         string           `json:"state" yaml:"state"`
	Reason        string           `json:"reason" yaml:"reason"`
	Started       string           `json:"started" yaml:"started"`
	Deadline      string           `json:"deadline" yaml:"deadline"`
	Reverting     int64            `json:"reverting,omitempty" yaml:"reverting,omitempty"`
	Permits       int64            `json:"permits" yaml:"permits"`
	PermitLimit   int64            `json:"permit_limit" yaml:"permit_limit"`
	Canary        int64            `json:"canary" yaml:"canary"`
	CanaryGranted int64            `json:"canary_granted" yaml:"canary_granted"`
	Counts        rolloutCountsDoc `json:"counts" yaml:"counts"`
	Policy        policyDoc        `json:"policy" yaml:"policy"`
	Units         []rolloutUnitDoc `json:"units" yaml:"units"`
	UnitsLeftOut  int32            `json:"units_left_out,omitempty" yaml:"units_left_out,omitempty"`
	Decisions     []decisionDoc    `json:"decisions" yaml:"decisions"`
}

type rolloutCountsDoc struct {
	Units    int32 `json:"units" yaml:"units"`
	Updated  int32 `json:"updated" yaml:"updated"`
	Updating int32 `json:"updating" yaml:"updating"`
	Waiting  int32 `json:"waiting" yaml:"waiting"`
	Denied   int32 `json:"denied" yaml:"denied"`
	Failed   int32 `json:"failed" yaml:"failed"`
}

type policyDoc struct {
	MaxParallel string `json:"max_parallel" yaml:"max_parallel"`
	Canary      int64  `json:"canary" yaml:"canary"`
	MinHealthy  string `json:"min_healthy" yaml:"min_healthy"`
	Deadline    string `json:"deadline" yaml:"deadline"`
	AutoRevert  bool   `json:"auto_revert" yaml:"auto_revert"`
	Gate        string `json:"gate" yaml:"gate"`
}

type rolloutUnitDoc struct {
	Name     string `json:"name" yaml:"name"`
	Machine  string `json:"machine" yaml:"machine"`
	Current  int64  `json:"current" yaml:"current"`
	Target   int64  `json:"target" yaml:"target"`
	Permit   bool   `json:"permit" yaml:"permit"`
	Note     string `json:"note,omitempty" yaml:"note,omitempty"`
	Agent    string `json:"agent" yaml:"agent"`
	Workload string `json:"workload" yaml:"workload"`
	Message  string `json:"message,omitempty" yaml:"message,omitempty"`
}

type decisionDoc struct {
	At         string `json:"at" yaml:"at"`
	Unit       string `json:"unit" yaml:"unit"`
	Machine    string `json:"machine" yaml:"machine"`
	Gate       string `json:"gate" yaml:"gate"`
	From       int64  `json:"from" yaml:"from"`
	To         int64  `json:"to" yaml:"to"`
	Decision   string `json:"decision" yaml:"decision"`
	Reason     string `json:"reason" yaml:"reason"`
	RetryAfter string `json:"retry_after,omitempty" yaml:"retry_after,omitempty"`
}

func rolloutDocument(resp *pb.RolloutStatusResponse) rolloutDoc {
	ro, c, p := resp.Rollout, resp.Counts, resp.Policy
	d := rolloutDoc{
		Service: resp.Service, Revision: ro.GetTarget(), Previous: ro.GetPrevious(), State: rolloutStateName(ro.GetState()),
		Reason: ro.GetReason(), Started: when(ro.GetStartedUnixNano()), Deadline: when(ro.GetDeadlineUnixNano()),
		Reverting: ro.GetReverting(), Permits: ro.GetPermits(), PermitLimit: resp.PermitLimit,
		Canary: ro.GetCanary(), CanaryGranted: ro.GetCanaryGranted(),
		Counts: rolloutCountsDoc{Units: c.GetUnits(), Updated: c.GetUpdated(), Updating: c.GetUpdating(), Waiting: c.GetWaiting(),
			Denied: c.GetDenied(), Failed: c.GetFailed()},
		Policy: policyDoc{MaxParallel: p.GetMaxParallel(), Canary: p.GetCanary(), MinHealthy: shortDuration(p.GetMinHealthyMs()),
			Deadline: shortDuration(p.GetDeadlineMs()), AutoRevert: p.GetAutoRevert(), Gate: p.GetGate()},
		Units: []rolloutUnitDoc{}, UnitsLeftOut: resp.UnitsLeftOut, Decisions: []decisionDoc{},
	}
	for _, u := range resp.Units {
		d.Units = append(d.Units, rolloutUnitDoc{Name: u.Name, Machine: u.Machine, Current: u.Current, Target: u.Target,
			Permit: u.Permit, Note: u.Note, Agent: u.Agent, Workload: u.Workload, Message: u.Message})
	}
	for _, g := range resp.Decisions {
		dd := decisionDoc{At: when(g.AtUnixNano), Unit: g.Unit, Machine: g.Machine, Gate: g.Gate, From: g.From, To: g.To,
			Decision: verdictName(g.Decision), Reason: g.Reason}
		if g.RetryAfterMs > 0 {
			dd.RetryAfter = shortDuration(g.RetryAfterMs)
		}
		d.Decisions = append(d.Decisions, dd)
	}
	return d
}
