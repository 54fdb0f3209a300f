package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The commands about a service's revisions: its history, one revision,
// and a rollback to one.

// changesWidth is how wide the revisions table's changes column may be.
const changesWidth = 60

func revisionsCommand(e *env) *cobra.Command {
	var format string
	var show int64
	cmd := &cobra.Command{
		Use:   "revisions SERVICE",
		Short: "List a service's revisions, or show one",
		Long: `List the revisions of SERVICE kept, newest first: every change of its spec (its
charm and its complete configuration) is a new revision. Each row shows the
revision's number, its charm, why it was made (deploy, config, rollback to
N), by whom, when, how many units run it, and what it changed from the
revision before (config keys as old→new; cut to fit, json and yaml show
them all). A service keeps its last 10 revisions, and any a unit runs.

With --show N, show revision N: its charm, its complete configuration and
its changes from revision N-1.

Example:
  ctl revisions kv
  ctl revisions kv --show 2
  ctl revisions kv --format json`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			if err := checkService(cmd, args[0]); err != nil {
				return err
			}
			if cmd.Flags().Changed("show") {
				if show < 1 {
					return usagef(cmd, "--show %d: want a revision's number, as ctl revisions lists them", show)
				}
				resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ShowRevisionResponse, error) {
					return op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: args[0], Number: show})
				})
				if err != nil {
					return err
				}
				return renderRevision(e.stdout, args[0], resp, format)
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ListRevisionsResponse, error) {
				return op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: args[0]})
			})
			if err != nil {
				return err
			}
			return renderRevisions(e.stdout, resp, format, time.Now())
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	cmd.Flags().Int64Var(&show, "show", 0, "show this revision's spec and its changes")
	return cmd
}

func rollbackCommand(e *env) *cobra.Command {
	var to int64
	cmd := &cobra.Command{
		Use:   "rollback SERVICE",
		Short: "Return a service to an earlier revision's spec",
		Long: `Make a new revision of SERVICE whose spec (charm and configuration together)
is that of revision --to (by default the one before the newest), as ctl
revisions lists them; its units then run with that configuration. The new
revision's reason is "rollback to N". A revision of another charm (before
a ctl refresh) brings that charm back, with its configuration. Refused when
the service is at that spec already, when the revision is no longer kept,
and when its charm lacks an endpoint a relation of the service uses.

Example:
  ctl rollback kv
  ctl rollback kv --to 1`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(cmd, args[0]); err != nil {
				return err
			}
			if to < 0 {
				return usagef(cmd, "--to %d: want a revision's number, as ctl revisions lists them", to)
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.RollbackServiceResponse, error) {
				return op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: args[0], To: to})
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "rolled %s back to revision %d: revision %d (%s)\n",
				args[0], resp.To, resp.Revision.GetNumber(), changesText(resp.Revision.GetChanges(), 0))
			return err
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "the revision to return to (default the one before the newest)")
	return cmd
}

func checkService(cmd *cobra.Command, name string) error {
	if err := names.CheckService(name); err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// changeText is one change as ctl shows it: "port 8080→9090", "charm
// kv-1→kv-2"; an absent value is "-".
func changeText(c *pb.RevisionChange) string {
	key := c.Key
	if c.Charm {
		key = "charm"
	}
	return fmt.Sprintf("%s %s→%s", key, orDash(c.OldValue), orDash(c.NewValue))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// changesText joins changes, cut to width runes (0: not cut); "no
// changes" when there are none.
func changesText(changes []*pb.RevisionChange, width int) string {
	if len(changes) == 0 {
		return "no changes"
	}
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = changeText(c)
	}
	s := strings.Join(parts, ", ")
	if r := []rune(s); width > 0 && len(r) > width {
		s = string(r[:width-1]) + "…"
	}
	return s
}

// ago is how long before now t was, as the revisions table shows it:
// "42s ago", "5m ago", "3h ago", "2d ago".
func ago(unixNano int64, now time.Time) string {
	d := max(now.Sub(time.Unix(0, unixNano)), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

type changeDoc struct {
	Key string `json:"key,omitempty" yaml:"key,omitempty"`
	// Charm is set for the charm's change.
	Charm bool   `json:"charm,omitempty" yaml:"charm,omitempty"`
	Old   string `json:"old" yaml:"old"`
	New   string `json:"new" yaml:"new"`
}

type revisionDoc struct {
	Number   int64       `json:"number" yaml:"number"`
	ID       string      `json:"id" yaml:"id"`
	Charm    string      `json:"charm" yaml:"charm"`
	Revision int64       `json:"charm_revision" yaml:"charm_revision"`
	Reason   string      `json:"reason" yaml:"reason"`
	By       string      `json:"by" yaml:"by"`
	Created  string      `json:"created" yaml:"created"`
	Units    int32       `json:"units" yaml:"units"`
	Changes  []changeDoc `json:"changes" yaml:"changes"`
}

func revisionDocument(r *pb.RevisionBrief) revisionDoc {
	d := revisionDoc{Number: r.Number, ID: r.Id, Charm: r.Charm.GetName(), Revision: r.Charm.GetRevision(),
		Reason: r.Reason, By: r.By, Created: when(r.CreatedUnixNano), Units: r.Units, Changes: []changeDoc{}}
	for _, c := range r.Changes {
		d.Changes = append(d.Changes, changeDoc{Key: c.Key, Charm: c.Charm, Old: c.OldValue, New: c.NewValue})
	}
	return d
}

func renderRevisions(w io.Writer, resp *pb.ListRevisionsResponse, format string, now time.Time) error {
	if format != formatTabular {
		docs := []revisionDoc{}
		for _, r := range resp.Revisions {
			docs = append(docs, revisionDocument(r))
		}
		return writeDoc(w, map[string]any{"service": resp.Service, "head": resp.Head, "revisions": docs}, format)
	}
	t := newTable(w)
	fmt.Fprintln(t, "Rev\tCharm\tReason\tBy\tWhen\tUnits\tChanges")
	for _, r := range resp.Revisions {
		by := r.By
		if by == "" {
			by = "controller"
		}
		changes := changesText(r.Changes, changesWidth)
		if r.Reason == "deploy" {
			changes = "-"
		}
		fmt.Fprintf(t, "%d\t%s-%d\t%s\t%s\t%s\t%d\t%s\n", r.Number, r.Charm.GetName(), r.Charm.GetRevision(),
			r.Reason, by, ago(r.CreatedUnixNano, now), r.Units, changes)
	}
	return t.Flush()
}

func renderRevision(w io.Writer, service string, resp *pb.ShowRevisionResponse, format string) error {
	r := resp.Revision
	keys := make([]string, 0, len(resp.Spec.GetConfig()))
	for k := range resp.Spec.GetConfig() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if format != formatTabular {
		config := map[string]string{}
		for _, k := range keys {
			config[k] = configCell(resp.Spec.Config[k])
		}
		return writeDoc(w, map[string]any{"service": service, "head": resp.Head, "revision": revisionDocument(r),
			"charm_sha256": resp.Spec.GetCharm().GetSha256(), "config": config, "previous_kept": resp.PreviousKept}, format)
	}
	by := r.By
	if by == "" {
		by = "the controller"
	}
	fmt.Fprintf(w, "Revision %d of %s (the newest is %d): %s, by %s, %s\n", r.Number, service, resp.Head, r.Reason, by, when(r.CreatedUnixNano))
	fmt.Fprintf(w, "Charm: %s-%d (sha256 %s)\n", r.Charm.GetName(), r.Charm.GetRevision(), r.Charm.GetSha256())
	fmt.Fprintf(w, "Units on it: %d\n", r.Units)
	fmt.Fprintln(w, "Config:")
	t := newTable(w)
	for _, k := range keys {
		fmt.Fprintf(t, "  %s\t%s\n", k, configCell(resp.Spec.Config[k]))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if r.Number == 1 {
		_, err := fmt.Fprintln(w, "Changes: none, the first revision")
		return err
	}
	kept := ""
	if !resp.PreviousKept {
		kept = " (no longer kept)"
	}
	fmt.Fprintf(w, "Changes from revision %d%s:\n", r.Number-1, kept)
	if len(r.Changes) == 0 {
		_, err := fmt.Fprintln(w, "  none")
		return err
	}
	for _, c := range r.Changes {
		fmt.Fprintf(w, "  %s\n", changeText(c))
	}
	return nil
}
