package etcdtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
)

// backendFlag picks the client Client hands out. A test binary that
// imports etcdtest takes it as -etcdtest.backend; the Makefile runs
// package state's tests a second time with "client".
var backendFlag = flag.String("etcdtest.backend", Inprocess,
	`the client tests get: "inprocess", the member's in-process client (embedetcd.Server.Client), as a controller with its own member uses; or "client", a plain clientv3 client over the member's socket (embedetcd.NewClient), as a controller of an external cluster uses`)

// The backends -etcdtest.backend names.
const (
	// Inprocess is embedetcd's in-process client: reads served from the
	// member's store, writes handed to its request handler.
	Inprocess = "inprocess"
	// Plain is a plain clientv3 client over the member's unix socket.
	Plain = "client"
)

// Backend returns the backend the test binary runs with
// (-etcdtest.backend).
func Backend() string { return *backendFlag }

// The one server of this test binary, started by Main or MainWith.
var (
	mu     sync.Mutex
	server *embedetcd.Server
	client *clientv3.Client
	nextNS atomic.Int64
)

// Options say how MainWith runs the package's etcd server.
type Options struct {
	// Fsync has etcd sync its write-ahead log and backend to disk, as a
	// production member does. Tests leave it off for speed; benchmarks turn
	// it on so that their figures mean something.
	Fsync bool
}

// Main starts the package's etcd server without fsync, runs the tests and
// stops the server. Call it from TestMain:
//
//	func TestMain(m *testing.M) { etcdtest.Main(m) }
func Main(m *testing.M) {
	MainWith(m, Options{})
}

// MainWith is Main with options:
//
//	func TestMain(m *testing.M) { etcdtest.MainWith(m, etcdtest.Options{Fsync: true}) }
func MainWith(m *testing.M, opts Options) {
	os.Exit(run(m, opts))
}

// Run is MainWith that returns the exit code instead of exiting, for a
// TestMain with its own cleanup to do:
//
//	code := etcdtest.Run(m, etcdtest.Options{})
//	os.RemoveAll(dir)
//	os.Exit(code)
func Run(m *testing.M, opts Options) int { return run(m, opts) }

func run(m *testing.M, opts Options) int {
	// The backend is a flag; TestMain runs before m.Run parses them.
	if !flag.Parsed() {
		flag.Parse()
	}
	dir, err := os.MkdirTemp("", "lifeline-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	s, err := embedetcd.Start(embedetcd.Config{
		Dir:                 dir,
		TickMs:              10,
		NoFsync:             !opts.Fsync,
		CompactionRetention: "0",
		// etcd logs benign errors at start and stop; a test sees real
		// trouble through its client.
		Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		return 1
	}
	defer s.Close()
	var c *clientv3.Client
	switch b := Backend(); b {
	case Inprocess:
		c, err = s.Client()
	case Plain:
		c, err = embedetcd.NewClient(clientv3.Config{Endpoints: []string{s.Endpoint()}})
	default:
		err = fmt.Errorf("-etcdtest.backend %q: want %q or %q", b, Inprocess, Plain)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		return 1
	}
	defer c.Close()
	mu.Lock()
	server, client = s, c
	mu.Unlock()
	return m.Run()
}

// Client returns the package server's shared client: the member's
// in-process client, or a plain one over its socket when the test binary
// runs with -etcdtest.backend=client. Tests must confine themselves to
// their own Namespace.
func Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if client == nil {
		tb.Fatal("etcdtest: no server; call etcdtest.Main or MainWith from TestMain")
	}
	return client
}

// Server returns the package's embedded server.
func Server(tb testing.TB) *embedetcd.Server {
	tb.Helper()
	Client(tb)
	return server
}

// Namespace returns a key prefix that no other test uses, such as
// "/t/TestRuleM2_destroy/7/".
func Namespace(tb testing.TB) string {
	name := strings.ReplaceAll(tb.Name(), "/", "_")
	return fmt.Sprintf("/t/%s/%d/", name, nextNS.Add(1))
}

// Context returns a context that ends with the test or after a minute.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// TempDir returns a short temporary directory, for unix sockets whose paths
// must stay under 108 bytes (testing.T.TempDir paths can be long).
func TempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "ll-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Clean(dir)
}
