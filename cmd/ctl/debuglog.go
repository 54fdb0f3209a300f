package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func debugLogCommand(e *env) *cobra.Command {
	var (
		include, exclude []string
		level            string
		replay, follow   bool
		lines            int64
		format           string
	)
	cmd := &cobra.Command{
		Use:   "debug-log",
		Short: "Show the controller's and the agents' log lines",
		Long: `Show the log lines of the controller and of the machine agents it serves
(with their units' agents and hooks): each line starts with who logged it
(machine-3, kv/0, controller-ID), then its time, level, message and fields.

Machine agents send their lines to the controller they are connected to,
which keeps the recent ones in memory (50,000 lines, 32 MiB; no agent
more than an eighth of them): a live tail with a bounded replay, not an
archive (that is what --log-file on each host is for). With several
controllers, this shows the lines of the one ctl reaches: its own and its
agents'.

--include and --exclude name a unit (kv/0), a service (kv: its units), a
machine (machine-3: its agent and its units) or controller; each may be
given again. --level shows that level and above (trace, debug, info, warn,
error; info by default; the agents send what their --log-level logs).
The last --lines lines are shown first (10 by default), or every line
kept with --replay; --follow then shows new lines as they arrive, until
interrupted. --format json prints each line as one JSON object (entity,
machine, time in RFC 3339, level, module, message, fields), for jq or a
log collector.

Example:
  ctl debug-log
  ctl debug-log --include kv/0 --level debug --lines 50
  ctl debug-log --exclude controller --replay
  ctl debug-log --include kv --follow
  ctl debug-log --format json --lines 100`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replay && cmd.Flags().Changed("lines") {
				return usagef(cmd, "--replay shows every line kept: --lines too is one too many")
			}
			if lines < 1 {
				return usagef(cmd, "--lines %d: want 1 or more", lines)
			}
			if format != "text" && format != formatJSON {
				return usagef(cmd, "--format %q: want text or json", format)
			}
			if replay {
				lines = 0 // every line: the controller's replay
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := streamContext(cmd.Context(), follow)
			defer cancel()
			stream, err := c.op.DebugLog(ctx, &pb.DebugLogRequest{
				Include: include, Exclude: exclude, Level: level, Replay: replay, Lines: lines, Follow: follow,
			})
			if err != nil {
				return c.check(err)
			}
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						return nil // interrupted: the normal end
					}
					return c.check(err)
				}
				if n := resp.GetSkipped(); n > 0 {
					if err := writeSkipped(e.stdout, format, n); err != nil {
						return err
					}
				}
				for _, l := range resp.GetLines() {
					line := formatLogLine(l)
					if format == formatJSON {
						line = jsonLogLine(l)
					}
					if _, err := io.WriteString(e.stdout, line); err != nil {
						return err
					}
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&include, "include", nil, "show only the lines of this unit, service, machine-N or controller (again for more)")
	fl.StringArrayVar(&exclude, "exclude", nil, "hide the lines of this unit, service, machine-N or controller (again for more)")
	fl.StringVar(&level, "level", "", "the least level shown: trace, debug, info, warn or error (default info)")
	fl.BoolVar(&replay, "replay", false, "show every line the controller keeps first")
	fl.Int64Var(&lines, "lines", 10, "show the last this many lines first")
	fl.BoolVar(&follow, "follow", false, "then show new lines until interrupted")
	fl.StringVar(&format, "format", "text", "text or json (one object a line)")
	return cmd
}

// formatLogLine is one line as debug-log prints it:
//
//	kv/0: 2026-12-02 21:20:01.123 INFO unit: hook ran hook=install duration=1.2s
func formatLogLine(l *pb.LogLine) string {
	var b strings.Builder
	b.WriteString(l.GetEntity())
	b.WriteString(": ")
	b.WriteString(time.Unix(0, l.GetTime()).Local().Format("2006-01-02 15:04:05.000"))
	b.WriteByte(' ')
	b.WriteString(strings.ToUpper(l.GetLevel()))
	b.WriteByte(' ')
	if m := l.GetModule(); m != "" {
		b.WriteString(m)
		b.WriteString(": ")
	}
	b.WriteString(oneLine(l.GetMessage()))
	for _, f := range l.GetFields() {
		if f.GetKey() == "unit" && f.GetValue() == l.GetEntity() {
			continue // said first
		}
		b.WriteByte(' ')
		b.WriteString(f.GetKey())
		b.WriteByte('=')
		v := f.GetValue()
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	b.WriteByte('\n')
	return b.String()
}

// writeSkipped says that the controller dropped n lines before they were
// shown: a sentence in text, an object of its own in JSON.
func writeSkipped(w io.Writer, format string, n int64) error {
	if format == formatJSON {
		_, err := fmt.Fprintf(w, "{\"skipped\":%d}\n", n)
		return err
	}
	_, err := fmt.Fprintf(w, "... %d lines dropped by the controller before they were shown ...\n", n)
	return err
}

// jsonLogLine is one line as debug-log --format json prints it: an object
// on one line, its fields an object in the order logged (a key logged
// twice keeps its last value).
func jsonLogLine(l *pb.LogLine) string {
	var b strings.Builder
	b.WriteString(`{"entity":`)
	b.WriteString(jsonString(l.GetEntity()))
	if m := l.GetMachine(); m != "" {
		b.WriteString(`,"machine":`)
		b.WriteString(jsonString(m))
	}
	b.WriteString(`,"time":`)
	b.WriteString(jsonString(time.Unix(0, l.GetTime()).UTC().Format(time.RFC3339Nano)))
	b.WriteString(`,"level":`)
	b.WriteString(jsonString(l.GetLevel()))
	if m := l.GetModule(); m != "" {
		b.WriteString(`,"module":`)
		b.WriteString(jsonString(m))
	}
	b.WriteString(`,"message":`)
	b.WriteString(jsonString(l.GetMessage()))
	if fs := l.GetFields(); len(fs) > 0 {
		b.WriteString(`,"fields":{`)
		for i, f := range fs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(f.GetKey()))
			b.WriteByte(':')
			b.WriteString(jsonString(f.GetValue()))
		}
		b.WriteByte('}')
	}
	b.WriteString("}\n")
	return b.String()
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	out, _ := json.Marshal(s) // a string always marshals
	return string(out)
}

// oneLine keeps a message on its line.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\n\r") {
		return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
	}
	return s
}
