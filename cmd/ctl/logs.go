package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func logsCommand(e *env) *cobra.Command {
	var (
		follow bool
		tail   int64
	)
	cmd := &cobra.Command{
		Use:   "logs OP [UNIT]",
		Short: "Show the logs of an operation's tasks",
		Long: `Show what an operation's actions wrote: each task's stdout, stderr and
action-log lines, or UNIT's task's alone. With several tasks each line
starts with its unit. The controller keeps the last 1 MiB of a task's log;
a line says how much of it was dropped before.

--tail shows only about that many bytes of each task's end (whole lines).
--follow then shows new lines as the actions write them, until every task
shown has ended (or interrupted).

Example:
  ctl logs 6
  ctl logs 6 kv/0 --follow`,
		Args: argsRange(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOpID(cmd, args[0])
			if err != nil {
				return err
			}
			req := &pb.TaskLogsRequest{Operation: id, Follow: follow, TailBytes: tail}
			if len(args) == 2 {
				if err := names.CheckUnit(args[1]); err != nil {
					return usagef(cmd, "%v", err)
				}
				req.Unit = args[1]
			}
			if tail < 0 {
				return usagef(cmd, "--tail %d: want 0 (all that is kept) or more", tail)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := streamContext(cmd.Context(), follow)
			defer cancel()
			stream, err := c.op.TaskLogs(ctx, req)
			if err != nil {
				return c.check(err)
			}
			out := &logWriter{w: e.stdout, prefix: req.Unit == ""}
			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return out.flush()
				}
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						return out.flush() // interrupted: the normal end
					}
					return c.check(err)
				}
				if err := out.write(resp); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "then show new lines until the tasks end")
	cmd.Flags().Int64Var(&tail, "tail", 0, "show only about this many bytes of each task's log's end (0: all that is kept)")
	return cmd
}

// logWriter prints the logs' lines, each with its unit when prefix is
// set. A line cut between two responses is held until its end comes.
type logWriter struct {
	w       io.Writer
	prefix  bool
	partial map[string][]byte // by unit: the start of a line not yet ended
}

func (l *logWriter) write(resp *pb.TaskLogsResponse) error {
	unit := resp.GetUnit()
	if resp.GetDropped() > 0 {
		if err := l.line(unit, fmt.Appendf(nil, "... %d bytes of this task's log dropped (the last 1 MiB is kept) ...", resp.GetDropped())); err != nil {
			return err
		}
	}
	if l.partial == nil {
		l.partial = map[string][]byte{}
	}
	data := append(l.partial[unit], resp.GetData()...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if err := l.line(unit, data[:i]); err != nil {
			return err
		}
		data = data[i+1:]
	}
	l.partial[unit] = bytes.Clone(data)
	return nil
}

func (l *logWriter) line(unit string, text []byte) error {
	var err error
	if l.prefix {
		_, err = fmt.Fprintf(l.w, "%s: %s\n", unit, text)
	} else {
		_, err = fmt.Fprintf(l.w, "%s\n", text)
	}
	return err
}

// flush prints the lines left without their end.
func (l *logWriter) flush() error {
	for unit, rest := range l.partial {
		if len(rest) > 0 {
			if err := l.line(unit, rest); err != nil {
				return err
			}
		}
	}
	return nil
}
