package main

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/grpclog"
)

// newLogger builds the process's one logger.
func newLogger(name, level string, out io.Writer) (hclog.Logger, error) {
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return nil, usageError{fmt.Errorf("unknown log level %q: use trace, debug, info, warn or error", level)}
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lvl, Output: out}), nil
}

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
