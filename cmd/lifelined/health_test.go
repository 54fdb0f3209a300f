package main_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// get returns the status and body of an HTTP GET.
func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The controller's health: /healthz while it serves; /readyz and the
// gRPC health service ready while etcd answers and a leader is elected,
// not while etcd is unreachable, and ready again once it is back; its
// build in lifeline_build_info and in Version.
func TestHealthAndReadiness(t *testing.T) {
	dir, etcd := testEtcd(t, "ll-health-")
	proxy := etcdtest.NewCutProxy(t, etcd.Endpoint())
	metricsAddr, cfg := startController(t, dir, "--etcd-endpoints", proxy.Endpoint(), "--namespace", "/health/")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if code, body, err := get("http://" + metricsAddr + "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, %v; want 200 ok", code, body, err)
	}
	readyz := func(want int, says string) func() (bool, string) {
		return func() (bool, string) {
			code, body, err := get("http://" + metricsAddr + "/readyz")
			return code == want && strings.HasPrefix(body, says), fmt.Sprintf("%d %q %v", code, body, err)
		}
	}
	poll.UntilSays(t, "/readyz to answer 200 ok", readyz(http.StatusOK, "ok\n"))

	// The health service, without a credential.
	conn, err := apiclient.Dial(apiclient.Config{Addresses: cfg.Controllers, CACert: []byte(cfg.CACert)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	serving := func(want healthpb.HealthCheckResponse_ServingStatus) func() (bool, string) {
		return func() (bool, string) {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err == nil && resp.Status == want, fmt.Sprintf("%v, %v", resp, err)
		}
	}
	poll.UntilSays(t, "the health service to say SERVING", serving(healthpb.HealthCheckResponse_SERVING))

	// What the binary is, on /metrics and through Version.
	body := getMetrics(t, metricsAddr)
	want := fmt.Sprintf(`lifeline_build_info{commit=%q,go_version=%q,version=%q} 1`, e2etest.StampCommit, runtime.Version(), e2etest.StampVersion)
	if !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Metric == "lifeline_build_info" {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	v, err := dialOnly(t, cfg, cfg.Controllers[0]).Version(ctx, &pb.VersionRequest{})
	if err != nil || v.Version != e2etest.StampVersion || v.Commit != e2etest.StampCommit || v.BuildDate != e2etest.StampDate {
		t.Errorf("Version = %v, %v; want %s %s %s", v, err, e2etest.StampVersion, e2etest.StampCommit, e2etest.StampDate)
	}

	// etcd unreachable: not ready, saying why; the process still serves.
	proxy.Cut(true)
	poll.UntilSays(t, "/readyz to answer 503 while etcd is unreachable", readyz(http.StatusServiceUnavailable, "not ready: etcd did not answer a read within 2s"))
	poll.UntilSays(t, "the health service to say NOT_SERVING", serving(healthpb.HealthCheckResponse_NOT_SERVING))
	if code, _, err := get("http://" + metricsAddr + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with etcd unreachable = %d, %v; want 200", code, err)
	}
	proxy.Cut(false)
	poll.UntilSays(t, "/readyz to answer 200 once etcd is back", readyz(http.StatusOK, "ok\n"))
	poll.UntilSays(t, "the health service to say SERVING again", serving(healthpb.HealthCheckResponse_SERVING))
}

// lifelined --version prints what the build stamped.
func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(lifelined, "--version").Output()
	want := fmt.Sprintf("lifelined %s (commit %s, built %s, %s %s/%s)\n", e2etest.StampVersion, e2etest.StampCommit[:12], e2etest.StampDate,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if err != nil || string(out) != want {
		t.Errorf("lifelined --version = %q, %v; want %q", out, err, want)
	}
}

// TestControllerTellsSystemd: under a systemd unit of Type=notify
// ($NOTIFY_SOCKET set), the controller says READY=1 once it is first
// ready, and STOPPING=1 as it stops.
func TestControllerTellsSystemd(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	_, _, stop := startStoppable(t, dir, 0)
	read := func(want string) {
		t.Helper()
		buf := make([]byte, 256)
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("systemd's socket got %q, %v; want %s", buf[:n], err, want)
		}
	}
	read("READY=1")
	stop()
	read("STOPPING=1")
}
