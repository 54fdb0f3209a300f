package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Config says how to run the embedded server.
type Config struct {
	// Dir holds the member's data and its client socket.
	Dir string
	// Logger receives etcd's log lines; warnings and errors by default.
	Logger hclog.Logger
	// TickMs is the raft heartbeat interval; 100 when zero.
	TickMs uint
	// NoFsync trades durability for speed. Tests only.
	NoFsync bool
	// CompactionRetention is how much history etcd keeps for watches to
	// resume from, as etcd's periodic auto-compaction understands it ("1h");
	// empty means 1h, "0" keeps everything.
	CompactionRetention string
	// StartTimeout bounds the wait for the server to become ready; 1 minute
	// when zero.
	StartTimeout time.Duration
	// QuotaBytes is the size of the database past which the member
	// refuses writes (etcd's --quota-backend-bytes): etcd's 2 GiB when
	// zero. Keep looks after it.
	QuotaBytes int64
}

// Validate reports a configuration the server cannot start with.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("embedded etcd needs a data directory")
	}
	// A unix socket path is limited to 107 bytes on Linux.
	if n := len(c.socketPath()); n > 107 {
		return fmt.Errorf("data directory %q is too long for etcd's socket (%d bytes, at most 107)", c.Dir, n)
	}
	return nil
}

func (c Config) socketPath() string {
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		abs = c.Dir
	}
	return filepath.Join(abs, "etcd.sock")
}

// Server is a running embedded etcd member.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
	closing  *atomic.Bool
	readers  readers // the in-process clients' reads (directReads)
	// quota is the member's quota (space.go).
	quota int64
	// pressed wakes Keep before its next tick when a caller of Space
	// finds the database half full or tight (space.go).
	pressed chan struct{}
}

// Start starts the member and waits until it serves clients.
func Start(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create etcd data directory: %w", err)
	}
	sock := cfg.socketPath()
	// A socket left by a crashed process would make the listen fail.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale etcd socket: %w", err)
	}

	ec := embed.NewConfig()
	ec.Name = "lifeline"
	ec.Dir = filepath.Join(cfg.Dir, "member-data")
	// Clients reach the member only through a socket in the data directory.
	// etcd insists that advertised URLs look like host:port, so the client
	// URL it advertises is a placeholder nobody dials, and the peer
	// listener (unused by a single member) takes an ephemeral loopback port.
	ec.ListenClientUrls = []url.URL{{Scheme: "unix", Path: sock}}
	ec.AdvertiseClientUrls = []url.URL{{Scheme: "unix", Host: "localhost:0"}}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	ec.ListenPeerUrls = []url.URL{peer}
	ec.AdvertisePeerUrls = []url.URL{peer}
	ec.InitialCluster = ec.Name + "=" + peer.String()
	ec.InitialClusterToken = "lifeline"
	if cfg.TickMs != 0 {
		ec.TickMs = cfg.TickMs
		ec.ElectionMs = 10 * cfg.TickMs
	}
	ec.UnsafeNoFsync = cfg.NoFsync
	// The raft log entries kept in memory after each compaction of it, for
	// a slow follower to catch up from: this member never has one. etcd
	// compacts the log every 100 entries applied and copies what it keeps
	// each time, 5,000 entries by default: a twelfth of what the controller
	// allocated deploying 10,000 units went to those copies.
	ec.SnapshotCatchUpEntries = 100
	ec.QuotaBackendBytes = quotaOf(cfg.QuotaBytes)
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = cfg.CompactionRetention
	if ec.AutoCompactionRetention == "" {
		ec.AutoCompactionRetention = "1h"
	}
	closing := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(newZapCore(cfg.Logger, closing)))
	ec.LogLevel = "warn"
	// Left unset, every request counts as slow and is logged as a warning.
	ec.WarningUnaryRequestDuration = 300 * time.Millisecond

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after %s", timeout)
	}
	return &Server{etcd: e, endpoint: "unix://" + sock, closing: closing, quota: quotaOf(cfg.QuotaBytes), pressed: make(chan struct{}, 1)}, nil
}

// Endpoint is the URL clients use to reach the member.
func (s *Server) Endpoint() string { return s.endpoint }

// Err reports a failure of the running server; it is closed when the server
// stops.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Client returns a new client of the member whose reads and transactions
// call it in this process, without the socket (its watches and leases use
// the socket); the caller closes it. Other processes reach the member
// through Endpoint.
func (s *Server) Client() (*clientv3.Client, error) {
	return inProcessClient(s)
}

// Close stops the member: it stops serving clients, then stops raft and
// closes the backend, in etcd's documented order. Closing again does
// nothing.
func (s *Server) Close() {
	if s.closing.Swap(true) {
		return // closed already
	}
	s.stopReads()
	s.etcd.Close()
}

// NewClient makes an etcd client that logs nothing through zap and does not
// block on connecting; the first request waits for the connection. It has
// at most maxCallsInFlight unary calls in flight; more wait their turn.
func NewClient(cfg clientv3.Config) (*clientv3.Client, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithChainUnaryInterceptor(limitCalls(maxCallsInFlight)))
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return c, nil
}

// Ping checks that the cluster answers a linearizable read.
func Ping(ctx context.Context, c *clientv3.Client) error {
	_, err := c.Get(ctx, "lifeline-ping", clientv3.WithCountOnly())
	return err
}
