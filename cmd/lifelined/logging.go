package main

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/grpclog"
	"gopkg.in/natefinch/lumberjack.v2"
)

// logFlags say where a daemon's log lines go and how they are written.
type logFlags struct {
	level string
	// format is text (hclog's key=value lines) or json (one object a
	// line, for a collector).
	format string
	// file is where the lines go instead of stderr; it rotates once it
	// holds maxSizeMiB, keeping backups old files.
	file       string
	maxSizeMiB int
	backups    int
}

// The rotation's defaults: at most 600 MiB of logs on the host.
const (
	defaultLogMaxSizeMiB = 100
	defaultLogBackups    = 5
)

func (f *logFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.level, "log-level", "info", "trace, debug, info, warn or error")
	fl.StringVar(&f.format, "log-format", "text", "text (key=value) or json (one object a line)")
	fl.StringVar(&f.file, "log-file", "", "write the log to this file instead of stderr, rotated by size")
	fl.IntVar(&f.maxSizeMiB, "log-max-size", defaultLogMaxSizeMiB, "with --log-file: the size in MiB at which the file is rotated")
	fl.IntVar(&f.backups, "log-backups", defaultLogBackups, "with --log-file: how many rotated files are kept (the oldest removed)")
}

// check reports flags newLogger would refuse, before anything starts.
func (f logFlags) check() error {
	if hclog.LevelFromString(f.level) == hclog.NoLevel {
		return usageError{fmt.Errorf("unknown log level %q: use trace, debug, info, warn or error", f.level)}
	}
	if f.format != "text" && f.format != "json" {
		return usageError{fmt.Errorf("unknown log format %q: use text or json", f.format)}
	}
	if f.maxSizeMiB < 1 {
		return usageError{fmt.Errorf("--log-max-size %d: want 1 MiB or more", f.maxSizeMiB)}
	}
	if f.backups < 0 {
		return usageError{fmt.Errorf("--log-backups %d: want 0 or more", f.backups)}
	}
	return nil
}

// newLogger builds the process's one logger, writing to stderr or to the
// rotated file, and the Closer that closes the file (a no-op for stderr).
// It intercepts: sinks registered on it (the lines shipped to the
// controller, the controller's ring) see every line its sub-loggers log.
func newLogger(name string, f logFlags) (hclog.InterceptLogger, io.Closer, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	var out io.WriteCloser = nopCloser{os.Stderr}
	if f.file != "" {
		// lumberjack rotates by size and prunes old files, and is kept up
		// (etcd depends on it already); it opens the file at the first
		// write and keeps it open.
		out = &lumberjack.Logger{Filename: f.file, MaxSize: f.maxSizeMiB, MaxBackups: f.backups}
	}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name: name, Level: hclog.LevelFromString(f.level), Output: out, JSONFormat: f.format == "json",
	})
	return l, out, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// quietGRPC routes grpc-go's own log lines into the logger, a level lower
// than grpc-go gives them: its warnings are mostly connection churn that an
// operator reads better from our own messages.
func quietGRPC(l hclog.Logger) {
	grpclog.SetLoggerV2(&grpcLogger{l: l.Named("grpc")})
}

type grpcLogger struct{ l hclog.Logger }

func (g *grpcLogger) Info(args ...any)                    { g.l.Trace(fmt.Sprint(args...)) }
func (g *grpcLogger) Infoln(args ...any)                  { g.l.Trace(fmt.Sprint(args...)) }
func (g *grpcLogger) Infof(format string, args ...any)    { g.l.Trace(fmt.Sprintf(format, args...)) }
func (g *grpcLogger) Warning(args ...any)                 { g.l.Debug(fmt.Sprint(args...)) }
func (g *grpcLogger) Warningln(args ...any)               { g.l.Debug(fmt.Sprint(args...)) }
func (g *grpcLogger) Warningf(format string, args ...any) { g.l.Debug(fmt.Sprintf(format, args...)) }
func (g *grpcLogger) Error(args ...any)                   { g.l.Warn(fmt.Sprint(args...)) }
func (g *grpcLogger) Errorln(args ...any)                 { g.l.Warn(fmt.Sprint(args...)) }
func (g *grpcLogger) Errorf(format string, args ...any)   { g.l.Warn(fmt.Sprintf(format, args...)) }
func (g *grpcLogger) Fatal(args ...any)                   { g.l.Error(fmt.Sprint(args...)); os.Exit(1) }
func (g *grpcLogger) Fatalln(args ...any)                 { g.l.Error(fmt.Sprint(args...)); os.Exit(1) }
func (g *grpcLogger) Fatalf(format string, args ...any) {
	g.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
func (g *grpcLogger) V(l int) bool { return l <= 0 && g.l.IsTrace() }
