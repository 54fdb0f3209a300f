package e2etest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
)

// EtcdConfig says how to run an etcd cluster.
type EtcdConfig struct {
	// Binary is the etcd server (BuildEtcd).
	Binary string
	// Members is the cluster's size; 3 when zero.
	Members int
	// HeartbeatMs and ElectionMs are etcd's --heartbeat-interval and
	// --election-timeout; 50 and 500 when zero (a tenth of a second and a
	// second by etcd's defaults), so that a lost leader is replaced within
	// about a second.
	HeartbeatMs, ElectionMs int
	// NoFsync trades durability for speed (--unsafe-no-fsync).
	NoFsync bool
}

// EtcdCluster is a real etcd cluster: each member a process of its own
// (the etcd server of tools/etcd) on loopback, serving clients and peers
// over TLS and requiring client certificates of both.
type EtcdCluster struct {
	Dir     string
	Members []*EtcdMember
	TLS     EtcdTLS
}

// EtcdMember is one member's process.
type EtcdMember struct {
	Name      string
	ClientURL string
	PeerURL   string
	// Dir holds its data (data/) and its log (etcd.log).
	Dir  string
	bin  string
	args []string
	// starter starts the member's process, so that it dies with the
	// test binary (starter.go).
	starter *starter

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartEtcd starts an etcd cluster under the sandbox (in Dir/etcd) and
// waits until it has a leader; the sandbox stops it once its controllers
// and machines are stopped.
func (s *Sandbox) StartEtcd(t testing.TB, cfg EtcdConfig) *EtcdCluster {
	t.Helper()
	c, err := startEtcd(t, filepath.Join(s.Dir, "etcd"), cfg, s.starter)
	if c != nil {
		s.OnStop(c.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startEtcd(t testing.TB, dir string, cfg EtcdConfig, st *starter) (*EtcdCluster, error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.HeartbeatMs == 0 {
		cfg.HeartbeatMs = 50
	}
	if cfg.ElectionMs == 0 {
		cfg.ElectionMs = 500
	}
	files, err := writeEtcdTLS(filepath.Join(dir, "tls"))
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	c := &EtcdCluster{Dir: dir, TLS: files}
	ports := FreeLoopbackPorts(t, 2*cfg.Members)
	var initial []string
	for i := range cfg.Members {
		m := &EtcdMember{
			Name:      "m" + strconv.Itoa(i),
			ClientURL: "https://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "https://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			Dir:       filepath.Join(dir, "m"+strconv.Itoa(i)),
			bin:       cfg.Binary,
			starter:   st,
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", filepath.Join(m.Dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "lifeline-test",
			"--cert-file", files.MemberCert, "--key-file", files.MemberKey,
			"--trusted-ca-file", files.CACert, "--client-cert-auth",
			"--peer-cert-file", files.MemberCert, "--peer-key-file", files.MemberKey,
			"--peer-trusted-ca-file", files.CACert, "--peer-client-cert-auth",
			"--heartbeat-interval", strconv.Itoa(cfg.HeartbeatMs),
			"--election-timeout", strconv.Itoa(cfg.ElectionMs),
			"--log-level", "warn",
		}
		if cfg.NoFsync {
			m.args = append(m.args, "--unsafe-no-fsync")
		}
		if err := m.Start(); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WaitLeader(ctx, nil); err != nil {
		return c, fmt.Errorf("the etcd cluster has no leader: %w\n%s", err, c.LogTails(20))
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *EtcdCluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// ControllerFlags are the flags of a controller using the cluster, its
// model under namespace.
func (c *EtcdCluster) ControllerFlags(namespace string) []string {
	return []string{
		"--etcd-endpoints", strings.Join(c.Endpoints(), ","),
		"--etcd-cacert", c.TLS.CACert, "--etcd-cert", c.TLS.ClientCert, "--etcd-key", c.TLS.ClientKey,
		"--namespace", namespace,
	}
}

// Client returns a client of the whole cluster, with the client
// certificate; the caller closes it.
func (c *EtcdCluster) Client() (*clientv3.Client, error) {
	tlsCfg, err := (transport.TLSInfo{TrustedCAFile: c.TLS.CACert, CertFile: c.TLS.ClientCert, KeyFile: c.TLS.ClientKey}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return embedetcd.NewClient(clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg})
}

// Leader returns the member that leads, as the running members say; an
// error when they do not agree on one.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdMember, error) {
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var leader uint64
	byID := map[uint64]*EtcdMember{}
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", m.Name, err)
		}
		byID[st.Header.MemberId] = m
		switch {
		case st.Leader == 0:
			return nil, fmt.Errorf("%s knows no leader", m.Name)
		case leader != 0 && st.Leader != leader:
			return nil, fmt.Errorf("members disagree on the leader: %x and %x", leader, st.Leader)
		}
		leader = st.Leader
	}
	if m := byID[leader]; m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("leader %x is not a running member", leader)
}

// WaitLeader waits until the running members agree on a leader other than
// not (nil for any), and returns it.
func (c *EtcdCluster) WaitLeader(ctx context.Context, not *EtcdMember) (*EtcdMember, error) {
	for {
		m, err := c.Leader(ctx)
		if err == nil && m != not {
			return m, nil
		}
		if err == nil {
			err = fmt.Errorf("%s still leads", m.Name)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every member: SIGTERM, then SIGKILL after 10 seconds.
func (c *EtcdCluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// LogTails returns the last n lines of each member's log.
func (c *EtcdCluster) LogTails(n int) string {
	var b strings.Builder
	for _, m := range c.Members {
		data, _ := os.ReadFile(filepath.Join(m.Dir, "etcd.log"))
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "the end of %s's log:\n%s\n", m.Name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Start starts the member's process (again, after Kill), with the same
// command line: a member with data rejoins its cluster.
func (m *EtcdMember) Start() error {
	if m.Running() {
		return fmt.Errorf("etcd member %s runs already", m.Name)
	}
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "etcd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(m.bin, m.args...)
	cmd.Dir = m.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := m.starter.start(cmd); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// Running says whether the member's process runs.
func (m *EtcdMember) Running() bool {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill kills the member with SIGKILL and waits until it has exited.
func (m *EtcdMember) Kill() error {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return errors.New("etcd member " + m.Name + " never started")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && m.Running() {
		return err
	}
	<-done
	return nil
}

func (m *EtcdMember) stop() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}
