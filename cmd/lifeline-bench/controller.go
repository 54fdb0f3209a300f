package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// controllerProc is the controller under measurement, a process of its own.
type controllerProc struct {
	cmd         *exec.Cmd
	dataDir     string
	configPath  string
	metricsAddr string
	cfg         pki.ClientConfig
	conn        *grpc.ClientConn
	op          pb.OperatorServiceClient
	done        chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startController runs lifelined controller with embedded etcd (fsync on)
// and the manual provider, and waits until it answers.
func startController(ctx context.Context, lifelined, dir string) (*controllerProc, error) {
	api, err := freeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c := &controllerProc{dataDir: filepath.Join(dir, "controller"), configPath: filepath.Join(dir, "client.json"), metricsAddr: metrics, done: make(chan struct{})}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return nil, err
	}
	// The dashboard's address is given: its default, the API's port + 2,
	// may be taken.
	dash, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(lifelined, "controller", "--data-dir", c.dataDir, "--api-addr", api, "--metrics-addr", metrics,
		"--dashboard-addr", dash, "--client-config", c.configPath, "--provider", "manual", "--log-level", "warn", "--pprof")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { c.cmd.Wait(); logf.Close(); close(c.done) }()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-c.done:
			return nil, fmt.Errorf("the controller exited at start: see %s", filepath.Join(dir, "controller.log"))
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		default:
		}
		if cfg, err := pki.ReadClientConfig(c.configPath); err == nil {
			c.cfg = cfg
			break
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the controller wrote no client config within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.conn, err = apiclient.Dial(apiclient.FromClientConfig(c.cfg)); err != nil {
		c.stop()
		return nil, err
	}
	c.op = pb.NewOperatorServiceClient(c.conn)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.op.Status(sctx, &pb.StatusRequest{}, grpc.WaitForReady(true)); err != nil {
		c.stop()
		return nil, fmt.Errorf("the controller does not answer: %w", err)
	}
	return c, nil
}

// etcdEndpoint is the controller's embedded etcd's socket.
func (c *controllerProc) etcdEndpoint() string {
	return "unix://" + filepath.Join(c.dataDir, "etcd", "etcd.sock")
}

func (c *controllerProc) stop() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.cmd.Process != nil {
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
}

// scrape calls line with each line of the controller's /metrics, until
// it says it has seen enough.
func (c *controllerProc) scrape(line func(string) (done bool, err error)) error {
	resp, err := http.Get("http://" + c.metricsAddr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if done, err := line(sc.Text()); done || err != nil {
			return err
		}
	}
	return sc.Err()
}

// waitModelCache waits, a minute at most, until the controller holds the
// decoded model its whole-model status is answered from, which the first
// such call starts it keeping.
func (c *controllerProc) waitModelCache(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := c.metric("lifeline_model_cache_ready")
		if err != nil {
			return err
		}
		if v == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller's decoded model not ready a minute after the first status")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metric returns the value of a metric line from the controller's
// /metrics, such as "lifeline_etcd_txns_total".
func (c *controllerProc) metric(name string) (float64, error) {
	vs, err := c.metrics(name)
	if err == nil && math.IsNaN(vs[0]) {
		err = fmt.Errorf("/metrics has no %s", name)
	}
	return vs[0], err
}

// metrics returns the values of metric lines from one scrape of the
// controller's /metrics, in the order of names: NaN for one it has not.
func (c *controllerProc) metrics(names ...string) ([]float64, error) {
	vs := make([]float64, len(names))
	for i := range vs {
		vs[i] = math.NaN()
	}
	left := len(names)
	err := c.scrape(func(line string) (bool, error) {
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			return false, nil
		}
		i := slices.Index(names, name)
		if i < 0 || !math.IsNaN(vs[i]) {
			return false, nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		vs[i] = v
		left--
		return left == 0, err
	})
	return vs, err
}

// counters are the controller's counters the harness reads at each
// phase's start and end: API calls by method name ("SetUnitStatus"),
// whatever their codes, and transactions retried by the state operation
// that retried them.
// counters are what the harness reads from the controller's /metrics at
// the start and end of each phase: API calls by method, transactions
// retried by operation, and the watch hub's listings, all of them and
// those read together.
type counters struct {
	calls, retries map[string]float64
	// failed counts the calls that did not succeed, by method and code
	// ("LeaveScope Unavailable").
	failed map[string]float64
	// buckets are the unary calls' duration histograms: by method, the
	// calls that took at most each bound ("le"), in seconds.
	buckets            map[string]map[float64]float64
	listings, together float64
	// gcs counts the controller's garbage collections.
	gcs float64
	// disk are etcd's own histograms of its disk writes, by
	// diskHistograms' names for them: the same form as buckets.
	disk map[string]map[float64]float64
	// diskSeconds are those histograms' sums.
	diskSeconds map[string]float64
}

// diskHistograms are the embedded etcd's histograms of its disk writes
// that the harness reads, by its names for them: a backend commit (of its
// database, every 100 ms, which holds up applying entries while it runs)
// and a WAL fsync (of the log, before entries are committed).
var diskHistograms = map[string]string{
	"etcd_disk_backend_commit_duration_seconds": "backend commits",
	"etcd_disk_wal_fsync_duration_seconds":      "WAL fsyncs",
}

// counters reads them all from one scrape of /metrics.
func (c *controllerProc) counters() (counters, error) {
	out := counters{failed: map[string]float64{}, buckets: map[string]map[float64]float64{},
		disk: map[string]map[float64]float64{}, diskSeconds: map[string]float64{}}
	byName := map[string]struct {
		label string
		out   map[string]float64
	}{
		"grpc_server_handled_total":                    {"grpc_method", map[string]float64{}},
		"lifeline_etcd_txn_retries_by_operation_total": {"operation", map[string]float64{}},
	}
	unlabelled := map[string]*float64{
		"lifeline_watch_listings_total":          &out.listings,
		"lifeline_watch_listings_together_total": &out.together,
		"go_gc_duration_seconds_count":           &out.gcs,
	}
	err := c.scrape(func(line string) (bool, error) {
		if name, value, ok := strings.Cut(line, " "); ok && unlabelled[name] != nil {
			n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			*unlabelled[name] = n
			return false, err
		}
		name, labels, ok := strings.Cut(line, "{")
		if ok && name == "grpc_server_handling_seconds_bucket" && strings.Contains(labels, `grpc_type="unary"`) {
			return false, addBucket(out.buckets, "", labels)
		}
		if h, ok := strings.CutSuffix(name, "_bucket"); ok && diskHistograms[h] != "" {
			return false, addBucket(out.disk, diskHistograms[h], labels)
		}
		if h, value, ok := strings.Cut(line, "_sum "); ok && diskHistograms[h] != "" {
			n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			out.diskSeconds[diskHistograms[h]] = n
			return false, err
		}
		m, known := byName[name]
		if !ok || !known {
			return false, nil
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			return false, nil
		}
		_, v, ok := strings.Cut(labels, m.label+`="`)
		if !ok {
			return false, nil
		}
		v, _, _ = strings.Cut(v, `"`)
		v = v[strings.LastIndexByte(v, '/')+1:] // a method's short name
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		m.out[v] += n
		if _, code, ok := strings.Cut(labels, `grpc_code="`); ok && name == "grpc_server_handled_total" {
			if code, _, _ = strings.Cut(code, `"`); code != "OK" {
				out.failed[v+" "+code] += n
			}
		}
		return false, err
	})
	out.calls = byName["grpc_server_handled_total"].out
	out.retries = byName["lifeline_etcd_txn_retries_by_operation_total"].out
	return out, err
}

// addBucket records in buckets one bucket of a duration histogram from
// its line after the metric's name: `grpc_method="M",le="0.004"} 12`, under
// its method, or under name when it has none.
func addBucket(buckets map[string]map[float64]float64, name, line string) error {
	labels, value, ok := strings.Cut(line, "} ")
	if !ok {
		return nil
	}
	method, le := name, ""
	for _, l := range strings.Split(labels, ",") {
		k, v, _ := strings.Cut(l, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "grpc_method":
			method = v
		case "le":
			le = v
		}
	}
	bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as infinity
	if err != nil {
		return err
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil {
		return err
	}
	if buckets[method] == nil {
		buckets[method] = map[float64]float64{}
	}
	buckets[method][bound] = n
	return nil
}

// slowest returns, for each method called between two readings, the
// bound in seconds that 99% of those calls took at most: the least bucket
// bound holding 99% of them; -1 past the last bound, which JSON can
// carry where it cannot carry infinity.
func slowest(before, after counters) map[string]float64 {
	return p99s(before.buckets, after.buckets)
}

// p99s returns, for each histogram of after, the bound that 99% of what it
// counted since before took at most (-1: beyond the largest).
func p99s(before, after map[string]map[float64]float64) map[string]float64 {
	out := map[string]float64{}
	for method, b := range after {
		bounds := slices.Sorted(maps.Keys(b))
		total := b[math.Inf(1)] - before[method][math.Inf(1)]
		if total <= 0 {
			continue
		}
		for _, le := range bounds {
			if b[le]-before[method][le] >= 0.99*total {
				out[method] = le
				if math.IsInf(le, 1) {
					out[method] = -1
				}
				break
			}
		}
	}
	return out
}

// perUnit returns the calls made between two readings, per unit.
func perUnit(before, after map[string]float64, units int) map[string]float64 {
	out := map[string]float64{}
	for m, v := range after {
		if d := v - before[m]; d > 0 {
			out[m] = d / float64(units)
		}
	}
	return out
}

// procUsage returns a process's peak resident memory and CPU time so far.
func procUsage(pid int) (rss int64, cpu time.Duration, err error) {
	u, err := procCPU(pid)
	return peakRSS(pid), u.cpu, err
}

// currentRSS returns a process's resident memory now.
func currentRSS(pid int) int64 { return procField(pid, "status", "VmRSS") }

// peakRSS returns a process's peak resident memory so far.
func peakRSS(pid int) int64 { return procField(pid, "status", "VmHWM") }

// diskWrites says, for each of etcd's disk histograms, how many writes
// there were between two readings, how long they took in all and the
// bound 99% of them took at most.
func diskWrites(before, after counters) map[string]diskFigures {
	out := map[string]diskFigures{}
	p99 := p99s(before.disk, after.disk)
	for name, b := range after.disk {
		out[name] = diskFigures{
			Count:      b[math.Inf(1)] - before.disk[name][math.Inf(1)],
			Seconds:    after.diskSeconds[name] - before.diskSeconds[name],
			P99Seconds: p99[name],
		}
	}
	return out
}

// upload packs and uploads a charm.
func upload(ctx context.Context, op pb.OperatorServiceClient, dir string) (*pb.Charm, error) {
	var buf bytes.Buffer
	info, err := charm.Pack(dir, &buf)
	if err != nil {
		return nil, err
	}
	stream, err := op.UploadCharm(ctx)
	if err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: &pb.UploadCharmHeader{Size: int64(len(data)), Sha256: info.SHA256}}}); err != nil {
		return nil, err
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data[off:min(off+1<<20, len(data))]}}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", dir, err)
	}
	return resp.Charm, nil
}
