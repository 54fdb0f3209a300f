package main_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

var lifelined string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ll-bin-")
	if err != nil {
		panic(err)
	}
	if lifelined, err = e2etest.BuildLifelined(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestControllerOnExternalEtcd runs the controller against an etcd it does
// not embed: the model lands in that etcd, under the namespace.
func TestControllerOnExternalEtcd(t *testing.T) {
	dir, etcd := testEtcd(t, "ll-ext-")
	metricsAddr, cfg := startController(t, dir, "--etcd-endpoints", etcd.Endpoint(), "--namespace", "/ext/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := operator(t, cfg)
	if _, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1}, waitForReady()...); err != nil {
		t.Fatalf("AddMachines: %v", err)
	}
	c, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, "/ext/machines/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "/ext/machines/0" {
		t.Errorf("the external etcd holds %v, want /ext/machines/0", resp.Kvs)
	}
	// The metrics operators rely on: API calls by method and code (the
	// standard gRPC server metrics), etcd
	// transaction retries, entities by kind and life.
	body := getMetrics(t, metricsAddr)
	if strings.Contains(body, "etcd_disk_wal_fsync_duration_seconds") {
		t.Errorf("/metrics has an embedded etcd's metrics, with no embedded etcd")
	}
	for _, want := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="AddMachines",grpc_service="lifeline.v1.OperatorService",grpc_type="unary"} 1`,
		`grpc_server_handling_seconds_count{grpc_method="AddMachines",grpc_service="lifeline.v1.OperatorService",grpc_type="unary"} 1`,
		"lifeline_etcd_txn_retries_total ",
		"lifeline_etcd_busy_retries_total 0",
		`lifeline_entities{kind="machine",life="alive"} 1`,
		"go_cpu_classes_gc_total_cpu_seconds_total ", // the scale harness's timeline reads it
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ctl", "etcd")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the controller made an etcd data directory of its own (%v)", err)
	}
}

// TestControllerServesEtcdMetrics: with etcd embedded, /metrics serves
// etcd's own metrics beside the controller's, its disk's among them.
func TestControllerServesEtcdMetrics(t *testing.T) {
	dir := t.TempDir()
	metricsAddr, _ := startController(t, dir)
	body := getMetrics(t, metricsAddr)
	for _, want := range []string{
		"etcd_disk_wal_fsync_duration_seconds_count ",
		"etcd_disk_backend_commit_duration_seconds_count ",
		"etcd_server_proposals_pending ",
		"lifeline_etcd_txns_total ",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// startController starts lifelined controller in dir, with no machine
// agents (they would outlive the test), and the extra flags; it returns
// the address of its /metrics and its client config once written. The
// controller is stopped when the test ends, its log shown if it failed.
func startController(t *testing.T, dir string, extra ...string) (metricsAddr string, cfg pki.ClientConfig) {
	t.Helper()
	return startControllerLimited(t, dir, 0, extra...)
}

// startControllerLimited is startController with the process's limit on
// open descriptors (soft and hard) set to nofile; the test's own when 0.
func startControllerLimited(t *testing.T, dir string, nofile int, extra ...string) (metricsAddr string, cfg pki.ClientConfig) {
	t.Helper()
	metricsAddr, cfg, _ = startStoppable(t, dir, nofile, extra...)
	return metricsAddr, cfg
}

// startStoppable is startControllerLimited that also returns a function
// that stops the controller (at once, or when the test ends) and returns
// its log so far.
func startStoppable(t *testing.T, dir string, nofile int, extra ...string) (metricsAddr string, cfg pki.ClientConfig, stop func() string) {
	t.Helper()
	cfgPath := filepath.Join(dir, "client.json")
	metricsAddr = freeAddr(t)
	args := append([]string{"controller", "--data-dir", filepath.Join(dir, "ctl"), "--api-addr", freeAddr(t),
		"--metrics-addr", metricsAddr, "--client-config", cfgPath, "--provider", "manual"}, extra...)
	cmd := exec.Command(lifelined, args...)
	if nofile > 0 {
		// The shell sets the limit and becomes lifelined.
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), lifelined}, args...)...)
	}
	var logs syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	e2etest.StartChild(t, cmd)
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		})
		return logs.String()
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("controller log:\n%s", logs.String())
		}
	})
	poll.UntilSays(t, "the client config", func() (bool, string) {
		var err error
		cfg, err = pki.ReadClientConfig(cfgPath)
		return err == nil, fmt.Sprint(err)
	})
	return metricsAddr, cfg, stop
}

// getMetrics returns the text of /metrics at addr.
func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s: %v", resp.Status, err)
	}
	return string(body)
}

func TestControllerUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"controller"},
		{"controller", "--data-dir", "/tmp/x", "--etcd-cacert", "ca.pem"},
		{"controller", "--data-dir", "/tmp/x", "--provider", "cloud"},
		{"controller", "--data-dir", "/tmp/x", "--api-addr", "nonsense"},
		{"controller", "--data-dir", "/tmp/x", "--log-level", "loud"},
		{"controller", "--data-dir", "/tmp/x", "--memory-limit", "2G"},
		{"controller", "--data-dir", "/tmp/x", "--local-network", "10.1"},
		{"controller", "--data-dir", "/tmp/x", "--local-network", "127.0"},
		{"controller", "--data-dir", "/tmp/x", "--provider", "manual", "--local-network", "127.2"},
		{"controller", "--data-dir", "/tmp/x", "--provider", "manual", "--local-agent-arg=--metrics-addr=:0"},
		{"controller", "--data-dir", "/tmp/x", "--local-agent-arg", "metrics"},
		{"controller", "--data-dir", "/tmp/x", "--etcd-quota-bytes", "2G"},
		{"controller", "--data-dir", "/tmp/x", "--etcd-quota-bytes", "512KiB"},
		{"controller", "--data-dir", "/tmp/x", "--etcd-quota-bytes", "1GiB", "--etcd-endpoints", "http://127.0.0.1:2379"},
		{"controller", "--data-dir", "/tmp/x", "--etcd-history-revisions", "-1"},
		{"controller", "--data-dir", "/tmp/x", "--agent-writes-per-second", "-1"},
		{"controller", "--data-dir", "/tmp/x", "--agent-write-burst", "0"},
		{"controller", "--data-dir", "/tmp/x", "--agent-write-bytes-per-minute", "lots"},
		{"controller", "--data-dir", "/tmp/x", "--charm-store-limit", "-5"},
		{"controller", "--data-dir", "/tmp/x", "--rollout-gate", "orly"},
		{"controller", "--data-dir", "/tmp/x", "--rollout-gate", "Orly=/bin/true"},
		{"controller", "--data-dir", "/tmp/x", "--rollout-gate", "orly=http://gate.example"},
		{"controller", "--data-dir", "/tmp/x", "--rollout-gate", "orly=/bin/true", "--rollout-gate", "orly=/bin/false"},
		{"controller", "--data-dir", "/tmp/x", "--revision-history", "0"},
		{"controller", "--data-dir", "/tmp/x", "--status-cache-idle", "0s"},
		{"controller", "--no-such-flag"},
	} {
		out, err := exec.Command(lifelined, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("lifelined %v = %v (%s), want exit 2", args, err, out)
		}
		if strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
			t.Errorf("lifelined %v said %q, want one line", args, out)
		}
	}
}

// TestControllerKeepsItsLocalNetwork: a controller whose machines
// directory records one loopback network refuses another, in a line, and
// changes nothing.
func TestControllerKeepsItsLocalNetwork(t *testing.T) {
	dir := t.TempDir()
	machines := filepath.Join(dir, "machines")
	if err := os.MkdirAll(machines, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(machines, "network"), []byte("127.5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lifelined, "controller", "--data-dir", dir, "--local-network", "127.6").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("lifelined with --local-network 127.6 on 127.5's machines = %v (%s), want exit 1", err, out)
	}
	if strings.Count(strings.TrimSpace(string(out)), "\n") > 0 || !strings.Contains(string(out), "network 127.5") {
		t.Errorf("lifelined said %q, want one line naming the machines' network", out)
	}
	if data, _ := os.ReadFile(filepath.Join(machines, "network")); string(data) != "127.5\n" {
		t.Errorf("the network file holds %q after the refusal, want it as it was", data)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
		t.Error("etcd's directory was made: the refusal came after the controller started")
	}
}

// testEtcd starts an etcd of the test's own in a new directory (not the
// test's TempDir: a unix socket's path must stay short) and returns the
// directory and the server. Both go at the test's end, after the
// controllers it starts (cleanups run last first), which need etcd to stop.
func testEtcd(t *testing.T, prefix string) (string, *embedetcd.Server) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	etcd, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	return dir, etcd
}
