// Command kv-server is the workload of the kv example charm
// (examples/charms/kv): a small key-value store over HTTP, its data kept in
// one file.
//
//	kv-server -addr 127.1.0.1:7070 -data /path/to/data.json
//	kv-server probe [-timeout 10s] http://127.1.0.1:7070/health
//	kv-server get [-timeout 10s] http://127.1.0.1:7070/keys
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
// The get subcommand gets a URL once and prints the body of its 200 OK
// answer: the charm's keys action lists the keys with it.
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
	"time"

	"github.com/lifelinehq/lifeline/examples/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return daemon.ProbeMain(ctx, "kv-server", args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "get" {
		return getMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("kv-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7070", "the address to serve on")
	data := fs.String("data", "", "the data file (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *data == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: kv-server -data FILE [-addr HOST:PORT] | kv-server probe|get [-timeout D] URL")
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

// getMain is the get subcommand: args are "[-timeout D] URL". It prints the
// body of URL's 200 OK answer (at most 1 MiB) and returns 0; 1 when the
// request fails or answers anything else, 2 for bad arguments.
func getMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kv-server get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "how long the request may take")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: kv-server get [-timeout D] URL")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	body, err := get(ctx, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "kv-server get: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(body); err != nil {
		fmt.Fprintf(stderr, "kv-server get: %v\n", err)
		return 1
	}
	return 0
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return body, nil
}
