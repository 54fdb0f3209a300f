// Command app-server is the workload of the app example charm
// (examples/charms/app): a web page with a counter kept in a kv unit
// (examples/kvserver).
//
//	app-server -addr 127.1.0.2:8080 -unit app/0 -kv-file /path/to/kv-address
//	app-server probe [-timeout 10s] http://127.1.0.2:8080/health
//
// GET / increments the counter (POST /keys/counter/incr on kv) and answers
// one line of text:
//
//	app/0 says: this page was seen 3 times (counter kept in kv at 127.1.0.1:7070)
//
// ("1 time" the first time). Without a kv address it answers 503 "waiting
// for kv"; when kv fails, 502. GET /health answers "ok" either way.
//
// The kv address, "HOST:PORT" on one line, is read from the -kv-file on
// every request: the charm's relation hooks write it (or remove it), and
// the server follows without a restart. SIGTERM or SIGINT stops the server
// gracefully.
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
	"net/http"
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
		return daemon.ProbeMain(ctx, "app-server", args[1:], stderr)
	}
	fs := flag.NewFlagSet("app-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "the address to serve on")
	unit := fs.String("unit", "app", "the unit's name, shown on the page")
	kvFile := fs.String("kv-file", "", `the file holding the kv unit's "HOST:PORT" (required)`)
	key := fs.String("key", "counter", "the counter's key in kv")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kvFile == "" || *key == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: app-server -kv-file FILE [-addr HOST:PORT] [-unit NAME] [-key KEY] | app-server probe [-timeout D] URL")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With("server", "app")
	a := &app{unit: *unit, kvFile: *kvFile, key: *key, client: &http.Client{}, logger: logger}
	if err := daemon.Serve(ctx, logger, *addr, a.handler()); err != nil {
		logger.Error("serve", "addr", *addr, "err", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
