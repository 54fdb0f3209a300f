package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long Serve lets requests in flight finish once
// told to stop.
const ShutdownGrace = 5 * time.Second

// Serve serves h on addr ("127.1.0.1:7070") until ctx ends, then shuts the
// server down gracefully. It returns once the listener is closed and the
// requests in flight have finished (or ShutdownGrace has passed).
func Serve(ctx context.Context, logger *slog.Logger, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.Info("serving", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down", "reason", context.Cause(ctx))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// Probe gets url until it answers 200 OK or timeout passes, trying every
// 100 ms (each try bounded by a second). It returns nil once answered, or
// an error naming the last failure.
func Probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		err := probeOnce(ctx, client, url)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			// A try cut short by the timeout says less than the one before.
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within %s: %w", url, timeout, last)
		case <-tick.C:
		}
	}
}

func probeOnce(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

// ProbeMain is the servers' probe subcommand: args are "[-timeout D] URL"
// (the arguments after "probe"). It returns the exit status: 0 once URL
// answers 200 OK, 1 when it did not in time, 2 for bad arguments.
func ProbeMain(ctx context.Context, name string, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(name+" probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "how long to keep trying")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s probe [-timeout D] URL\n\nGets URL until it answers 200 OK; exits 1 if it does not within the timeout.\n\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	if err := Probe(ctx, fs.Arg(0), *timeout); err != nil {
		fmt.Fprintf(stderr, "%s probe: %v\n", name, err)
		return 1
	}
	return 0
}
