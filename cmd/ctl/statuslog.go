package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxStatusLog is how many status changes the controller keeps of each
// unit (state.StatusHistoryLimit), so the most -n may ask for.
const maxStatusLog = 50

// statusLogTime is how the tabular status log shows a time, as juju does.
const statusLogTime = "02 Jan 2006 15:04:05Z07:00"

func showStatusLogCommand(e *env) *cobra.Command {
	var format string
	var n int
	cmd := &cobra.Command{
		Use:   "show-status-log UNIT",
		Short: "Show a unit's last status changes, its agent's and its workload's",
		Long: `Show the last changes of a unit's status, oldest first: its agent's
(allocating, executing, idle, error...) and its workload's (what the charm
said with status-set). The controller keeps the last 50 changes of each unit,
and forgets them with the unit.

--format tabular (the default) reads like juju show-status-log: Time, Type
(agent or workload), Status and Message, with each entry's details indented
under it: the agent's state, and after a hook the last lines of its output.
json and yaml give the same as one list:

  [{"time", "type", "status", "message", "data": {"state", "output"}}]

Example:
  ctl show-status-log kv/0
  ctl show-status-log kv/0 -n 5
  ctl show-status-log kv/0 --format json | jq -r '.[-1].data.output'`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case formatTabular, formatJSON, formatYAML:
			default:
				return usagef(cmd, "--format %q: want tabular, json or yaml", format)
			}
			if n < 0 || n > maxStatusLog {
				return usagef(cmd, "-n %d: want 1 to %d (the controller keeps a unit's last %d status changes)", n, maxStatusLog, maxStatusLog)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.ShowStatusLog(ctx, &pb.ShowStatusLogRequest{Unit: args[0], Limit: int32(n)})
			if err != nil {
				return c.check(err)
			}
			return renderStatusLog(e.stdout, args[0], resp.Entries, format, time.Local)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	cmd.Flags().IntVarP(&n, "entries", "n", 0, "show the newest `N` entries (default: all the controller keeps, at most 50)")
	return cmd
}

// renderStatusLog writes a unit's status log, oldest entry first, in a
// format; tabular times are shown in loc.
func renderStatusLog(w io.Writer, unit string, entries []*pb.StatusLogEntry, format string, loc *time.Location) error {
	switch format {
	case formatJSON:
		data, err := json.MarshalIndent(statusLogDocument(entries), "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(data, '\n'))
		return err
	case formatYAML:
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(statusLogDocument(entries)); err != nil {
			return err
		}
		return enc.Close()
	case formatTabular:
		return renderStatusLogTabular(w, unit, entries, loc)
	}
	return fmt.Errorf("unknown format %q", format)
}

// statusLogDoc is one entry of ctl show-status-log as JSON and YAML.
type statusLogDoc struct {
	// Time is RFC 3339, UTC, to the nanosecond.
	Time    string            `json:"time" yaml:"time"`
	Type    string            `json:"type" yaml:"type"`
	Status  string            `json:"status" yaml:"status"`
	Message string            `json:"message" yaml:"message"`
	Data    map[string]string `json:"data,omitempty" yaml:"data,omitempty"`
}

func statusLogDocument(entries []*pb.StatusLogEntry) []statusLogDoc {
	doc := []statusLogDoc{}
	for _, e := range entries {
		doc = append(doc, statusLogDoc{
			Time: time.Unix(0, e.SinceUnixNano).UTC().Format(time.RFC3339Nano),
			Type: e.Kind, Status: e.Status, Message: e.Message, Data: e.Data,
		})
	}
	return doc
}

// renderStatusLogTabular writes the log as juju show-status-log does, one
// row an entry, its details (data) indented under it, starting in the Type
// column.
func renderStatusLogTabular(w io.Writer, unit string, entries []*pb.StatusLogEntry, loc *time.Location) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintf(w, "Unit %s has no status changes recorded yet.\n", unit)
		return err
	}
	var buf bytes.Buffer
	tw := newTable(&buf)
	fmt.Fprintln(tw, "Time\tType\tStatus\tMessage")
	for _, e := range entries {
		when := ""
		if e.SinceUnixNano != 0 {
			when = time.Unix(0, e.SinceUnixNano).In(loc).Format(statusLogTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", when, printable(e.Kind), printable(e.Status), printable(e.Message))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rows := strings.SplitAfter(buf.String(), "\n")
	indent := strings.Repeat(" ", strings.Index(rows[0], "Type"))
	out := &bytes.Buffer{}
	out.WriteString(rows[0])
	for i, e := range entries {
		out.WriteString(rows[i+1])
		for _, l := range logDetails(e.Data) {
			out.WriteString(strings.TrimRight(indent+l, " ") + "\n")
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}

// logDetails are an entry's data as lines to show under it: its one-line
// values together as key=value, then each value of several lines (a hook's
// output, under "output", always comes last) as its key and its lines,
// indented.
func logDetails(data map[string]string) []string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if (keys[i] == "output") != (keys[j] == "output") {
			return keys[j] == "output"
		}
		return keys[i] < keys[j]
	})
	var inline, blocks []string
	for _, k := range keys {
		v := strings.TrimRight(data[k], "\r\n")
		if k != "output" && !strings.Contains(v, "\n") {
			if v == "" || strings.ContainsAny(v, " \t\"=") {
				v = strconv.Quote(v)
			}
			inline = append(inline, printable(k)+"="+printable(v))
			continue
		}
		if strings.TrimSpace(v) == "" {
			continue
		}
		blocks = append(blocks, printable(k)+":")
		for _, l := range strings.Split(v, "\n") {
			blocks = append(blocks, "  "+printable(expandTabs(strings.TrimRight(l, "\r"))))
		}
	}
	if len(inline) > 0 {
		blocks = append([]string{strings.Join(inline, " ")}, blocks...)
	}
	return blocks
}

// printable makes s safe to show in a table on a terminal: what a hook
// wrote may hold tabs, newlines, escape sequences or invalid UTF-8, which
// are shown escaped (a tab as a space).
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// expandTabs replaces tabs by spaces to the next multiple of 8 columns.
func expandTabs(s string) string {
	if !strings.Contains(s, "\t") {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		if r == '\t' {
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		}
		b.WriteRune(r)
		col++
	}
	return b.String()
}
