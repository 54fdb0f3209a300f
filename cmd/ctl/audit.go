package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// auditDoc is an audit entry as ctl audit shows it in json and yaml.
type auditDoc struct {
	Seq        int64    `json:"seq" yaml:"seq"`
	Time       string   `json:"time" yaml:"time"`
	User       string   `json:"user" yaml:"user"`
	Call       string   `json:"call" yaml:"call"`
	Targets    []string `json:"targets" yaml:"targets"`
	Summary    string   `json:"summary" yaml:"summary"`
	Changed    bool     `json:"changed" yaml:"changed"`
	Result     string   `json:"result" yaml:"result"`
	Message    string   `json:"message,omitempty" yaml:"message,omitempty"`
	Controller string   `json:"controller,omitempty" yaml:"controller,omitempty"`
	Unrecorded int64    `json:"unrecorded-refusals-before,omitempty" yaml:"unrecorded-refusals-before,omitempty"`
}

// auditResult is an entry's outcome: the gRPC code's name, or pending.
func auditResult(e *pb.AuditEntry) string {
	if e.Pending {
		return "pending"
	}
	return codes.Code(e.Code).String()
}

func auditDocument(e *pb.AuditEntry) auditDoc {
	targets := e.Targets
	if targets == nil {
		targets = []string{}
	}
	return auditDoc{Seq: e.Seq, Time: time.Unix(0, e.UnixNano).UTC().Format(time.RFC3339Nano), User: e.User, Call: e.Rpc,
		Targets: targets, Summary: e.Summary, Changed: e.Changed, Result: auditResult(e), Message: e.Message,
		Controller: e.Controller, Unrecorded: e.Unrecorded}
}

func auditCommand(e *env) *cobra.Command {
	var (
		user, entity, call, format string
		since                      time.Duration
		follow                     bool
		limit                      int
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit log: who changed what, and what was refused",
		Long: `Show the audit log: every call that changed the model, and every refused one,
with its user, the entities it named, a summary of its arguments (never a
secret or a configuration's values) and its result (OK, PermissionDenied,
FailedPrecondition...). Entries are numbered without gaps; the oldest go
once beyond the controller's --audit-retention.

--user, --since, --call (the call's name: Deploy, PauseTasks; any case) and
--entity (a service, unit, machine or user: kv, kv/0, machine:3, bob; a
service also selects its units') filter; --limit bounds the newest entries
shown first. --follow then shows each new entry as its call
ends, until interrupted. --format json gives one JSON array (with --follow,
one JSON object a line); yaml one document (with --follow, one an entry).

Example:
  ctl audit --user admin --since 24h
  ctl audit --call AddUser
  ctl audit --entity bob --follow`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			if since < 0 {
				return usagef(cmd, "--since %s: want a positive duration", since)
			}
			if limit < 1 || limit > 10000 {
				return usagef(cmd, "--limit %d: want 1 to 10000", limit)
			}
			req := &pb.AuditRequest{User: user, Entity: entity, Rpc: call, Limit: int32(limit), Follow: follow}
			if since > 0 {
				req.SinceUnixNano = time.Now().Add(-since).UnixNano()
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := streamContext(cmd.Context(), follow)
			defer cancel()
			stream, err := c.op.Audit(ctx, req)
			if err != nil {
				return c.check(err)
			}
			out := newAuditWriter(e.stdout, format, follow)
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return out.close()
				}
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						return out.close() // interrupted: the normal end
					}
					return c.check(err)
				}
				if resp.Truncated {
					fmt.Fprintf(e.stderr, "ctl: older entries were not looked at: narrow the query (--since, --user, --call, --entity) or raise --limit\n")
				}
				if err := out.write(resp.Entries); err != nil {
					return err
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&user, "user", "", "only this user's entries")
	fl.DurationVar(&since, "since", 0, "only entries this recent (24h, 30m)")
	fl.StringVar(&entity, "entity", "", "only entries naming this service, unit or machine")
	fl.StringVar(&call, "call", "", "only entries of this call (Deploy, PauseTasks)")
	fl.BoolVar(&follow, "follow", false, "then show each new entry, until interrupted")
	fl.IntVar(&limit, "limit", 100, "show at most this many of the newest entries first")
	fl.StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

// auditWriter writes entries as they come: a table (its header once), a
// JSON array (or, following, JSON lines), YAML (one document, or one an
// entry when following).
type auditWriter struct {
	w       io.Writer
	format  string
	follow  bool
	header  bool
	pending []auditDoc
}

func newAuditWriter(w io.Writer, format string, follow bool) *auditWriter {
	return &auditWriter{w: w, format: format, follow: follow}
}

func (a *auditWriter) write(entries []*pb.AuditEntry) error {
	switch {
	case a.format == formatTabular:
		tw := tabwriter.NewWriter(a.w, 0, 4, 2, ' ', 0)
		if !a.header {
			fmt.Fprintln(tw, "Seq\tTime\tUser\tCall\tTargets\tResult\tSummary")
			a.header = true
		}
		for _, e := range entries {
			summary := e.Summary
			if e.Message != "" {
				summary += ": " + e.Message
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, time.Unix(0, e.UnixNano).Local().Format("2006-01-02 15:04:05"),
				e.User, e.Rpc, dash(strings.Join(e.Targets, ",")), auditResult(e), summary)
		}
		return tw.Flush()
	case !a.follow:
		for _, e := range entries {
			a.pending = append(a.pending, auditDocument(e))
		}
		return nil
	case a.format == formatJSON:
		for _, e := range entries {
			data, err := json.Marshal(auditDocument(e))
			if err != nil {
				return err
			}
			if _, err := a.w.Write(append(data, '\n')); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range entries {
		if err := writeDocument(a.w, auditDocument(e), formatYAML); err != nil {
			return err
		}
		if _, err := io.WriteString(a.w, "---\n"); err != nil {
			return err
		}
	}
	return nil
}

func (a *auditWriter) close() error {
	switch {
	case a.format == formatTabular && !a.header:
		_, err := fmt.Fprintln(a.w, "No entries.")
		return err
	case a.follow || a.format == formatTabular:
		return nil
	}
	docs := a.pending
	if docs == nil {
		docs = []auditDoc{}
	}
	return writeDocument(a.w, docs, a.format)
}
