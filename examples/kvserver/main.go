// Command kv-server is the workload of the kv example charm
// (examples/charms/kv): a small key-value store over HTTP, its data kept in
// one file.
//
//	kv-server -addr 127.1.0.1:7070 -data /path/to/data.json
//	kv-server probe [-timeout 10s] http://127.1.0.1:7070/health
//
// The API:
//
//	GET    /health            "ok"
//	GET    /keys              the keys, one a line
//	GET    /keys/NAME         the value; 404 when absent
//	PUT    /keys/NAME         sets the value to the request body (at most 1 MiB)
//	DELETE /keys/NAME         deletes it; 404 when absent
//	POST   /keys/NAME/incr    adds one to an integer value (absent counts as
//	                          0) at once, answering the new value; 409 when
//	                          the value is not an integer
//
// Every change is saved before it is answered: the whole store is written to
// a temporary file beside the data file, synced and renamed over it, so a
// restarted server finds every change it acknowledged. SIGTERM or SIGINT
// stops the server gracefully.
//
// The probe subcommand gets a URL until it answers 200 OK: the charm's
// start hook uses it to wait for the server, as the machines have no curl.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/lifelinehq/lifeline/examples/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return daemon.ProbeMain(ctx, "kv-server", args[1:], stderr)
	}
	fs := flag.NewFlagSet("kv-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7070", "the address to serve on")
	data := fs.String("data", "", "the data file (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *data == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: kv-server -data FILE [-addr HOST:PORT] | kv-server probe [-timeout D] URL")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With("server", "kv")
	s, err := openStore(*data)
	if err != nil {
		logger.Error("cannot open the data file", "err", err)
		return 1
	}
	if err := daemon.Serve(ctx, logger, *addr, newHandler(s, logger)); err != nil {
		logger.Error("serve", "addr", *addr, "err", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
