package faults

import (
	"bufio"
	"context"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// What the resource attacks share: a controller with the manual provider
// (the agents are the test's own clients, with the credentials real
// agents would have), its /metrics, its memory, another agent calling it
// throughout, and the operator destroying a machine meanwhile.

// memory is the controller's memory at a moment: its resident set, its
// Go heap in use (live and garbage not yet collected), and the heap its
// last collection left live.
type memory struct {
	rss, heap, live int64
}

func (m memory) String() string {
	return fmt.Sprintf("%d MiB resident, %d MiB of heap in use, %d MiB live at the last collection", m.rss>>20, m.heap>>20, m.live>>20)
}

// resourceFixture is a model for a resource attack.
type resourceFixture struct {
	*fixture
	c       *e2etest.Controller
	metrics string // the controller's /metrics address
	op      pb.OperatorServiceClient
}

// newResourceFixture starts a controller with the manual provider, its
// metrics served (and /debug/gc, for collected), and extra flags.
func newResourceFixture(t *testing.T, sz sizes, extra ...string) *resourceFixture {
	t.Helper()
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce(), provider: "manual"})
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port+1))
	c := f.startController(t, append([]string{"--metrics-addr", metrics, "--pprof"}, extra...)...)
	cfg, err := pki.ReadClientConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &resourceFixture{fixture: f, c: c, metrics: metrics, op: pb.NewOperatorServiceClient(conn)}
}

// addMachine adds a manual machine and returns its id and a connection
// with its credential, joined with its join token as its agent joins.
func (f *resourceFixture) addMachine(t *testing.T) (string, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := f.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true})
	if err != nil {
		t.Fatalf("AddMachines: %v", err)
	}
	cfg, err := e2etest.JoinMachine(ctx, resp.JoinTokens[0])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return resp.Machines[0].Id, conn
}

// scrape reads the controller's /metrics.
func (f *resourceFixture) scrape() (string, error) { return e2etest.ScrapeMetrics(f.metrics) }

// metric is one sample's value in a scrape, -1 when absent.
func metric(body, sample string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// memory reads the controller's resident set (/proc) and heap in use
// (/metrics).
func (f *resourceFixture) memory() (memory, error) {
	file, err := os.Open(fmt.Sprintf("/proc/%d/status", f.c.PID()))
	if err != nil {
		return memory{}, err
	}
	defer file.Close()
	var m memory
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				return memory{}, fmt.Errorf("VmRSS %q: %w", kb, err)
			}
			m.rss = n << 10
		}
	}
	body, err := f.scrape()
	if err != nil {
		return memory{}, err
	}
	m.heap = int64(metric(body, "go_memstats_heap_inuse_bytes"))
	m.live = int64(metric(body, "go_gc_heap_live_bytes"))
	if m.heap < 0 || m.live < 0 || m.rss == 0 {
		return memory{}, fmt.Errorf("no resident set, heap in use or live heap: %v", m)
	}
	return m, nil
}

// baseline is the controller's memory at rest, under the load the test
// keeps on it through the attack (another agent's calls, the test's own
// scrapes), each look after the controller collected its garbage and
// gave its free memory back (collect): over a few seconds, the resident
// set the most it reached, the heaps their medians.
func (f *resourceFixture) baseline(t *testing.T, r *run) memory {
	t.Helper()
	start := time.Now()
	var b memory
	var heap, live []int64
	for time.Since(start) < 3*time.Second {
		m, err := f.collected()
		if err != nil {
			t.Fatal(err)
		}
		b.rss = max(b.rss, m.rss)
		heap, live = append(heap, m.heap), append(live, m.live)
		time.Sleep(500 * time.Millisecond)
	}
	slices.Sort(heap)
	slices.Sort(live)
	b.heap, b.live = heap[len(heap)/2], live[len(live)/2]
	r.count("memory: baseline resident (MiB)", int(b.rss>>20))
	r.count("memory: baseline heap in use (MiB)", int(b.heap>>20))
	r.count("memory: baseline live heap (MiB)", int(b.live>>20))
	t.Logf("baseline at rest: %s", b)
	return b
}

// collected is the controller's memory once it collected its garbage and
// returned its free memory to the system (its /debug/gc, served with
// --pprof): what it holds, whenever Go's own collector and scavenger
// would have come to it.
func (f *resourceFixture) collected() (memory, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.metrics+"/debug/gc", nil)
	if err != nil {
		return memory{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return memory{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memory{}, fmt.Errorf("POST /debug/gc: %s", resp.Status)
	}
	return f.memory()
}

// peakWatcher samples the controller's memory every half second until
// stopped, and keeps the most it saw.
type peakWatcher struct {
	stop func() memory
}

func (f *resourceFixture) watchPeak() *peakWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var peak memory
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pause.For(ctx, 500*time.Millisecond) {
			if m, err := f.memory(); err == nil {
				mu.Lock()
				peak.rss, peak.heap, peak.live = max(peak.rss, m.rss), max(peak.heap, m.heap), max(peak.live, m.live)
				mu.Unlock()
			}
		}
	}()
	return &peakWatcher{stop: func() memory {
		cancel()
		<-done
		return peak
	}}
}

// checkMemoryReturns waits until the controller's resident set and the
// heap its last collection left live, each look after a collection
// (collected), are both within twice the baseline, and records how long
// that took. (The heap in use is not compared: at GOGC=300 it holds up
// to four times what is live, attack or not.)
func (f *resourceFixture) checkMemoryReturns(t *testing.T, r *run, base memory, peak memory, attack string) {
	t.Helper()
	r.count("memory: peak resident during the attack (MiB)", int(peak.rss>>20))
	r.count("memory: peak heap in use during the attack (MiB)", int(peak.heap>>20))
	r.count("memory: peak live heap during the attack (MiB)", int(peak.live>>20))
	t.Logf("peak during the attack: %s", peak)
	left := time.Now()
	var last memory
	logged := time.Now()
	poll.Within(t, "the controller's memory within twice its baseline", 8*time.Minute, func() (bool, string) {
		m, err := f.collected()
		if err != nil {
			return false, err.Error()
		}
		last = m
		if time.Since(logged) >= 30*time.Second {
			t.Logf("%s after the attacker left: %s", time.Since(left).Round(time.Second), m)
			logged = time.Now()
		}
		return m.rss <= 2*base.rss && m.live <= 2*base.live, fmt.Sprintf("%s, baseline %s", m, base)
	})
	r.recovered(attack+": from the attacker leaving to memory within twice its baseline", time.Since(left))
	r.count("memory: resident once returned (MiB)", int(last.rss>>20))
	r.count("memory: live heap once returned (MiB)", int(last.live>>20))
	t.Logf("%s after the attacker left: %s", time.Since(left).Round(time.Second), last)
	r.checked(fmt.Sprintf("memory returned within twice its baseline (%s; baseline %s)", last, base))
}

// agentCalls is another agent calling the controller over its own
// connection while an attack runs, recording how long each call took.
type agentCalls struct {
	stop func() (latencies []time.Duration, failures int)
}

func (f *resourceFixture) startAgentCalls(machine string, conn *grpc.ClientConn) *agentCalls {
	agent := pb.NewAgentServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	var lat []time.Duration
	failures := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pause.For(ctx, 20*time.Millisecond) {
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			start := time.Now()
			_, err := agent.GetMachine(cctx, &pb.GetMachineRequest{Machine: machine})
			ccancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				failures++
			default:
				lat = append(lat, time.Since(start))
			}
		}
	}()
	return &agentCalls{stop: func() ([]time.Duration, int) {
		cancel()
		<-done
		return lat, failures
	}}
}

// checkAgentCalls records the other agent's calls during the attack: they
// all answered, and their latency (p99 among the counts, in ms).
func checkAgentCalls(t *testing.T, r *run, a *agentCalls, attack string) {
	t.Helper()
	lat, failures := a.stop()
	if len(lat) == 0 || failures > 0 {
		t.Errorf("during the %s, another agent's calls: %d answered, %d failed; want every one answered", attack, len(lat), failures)
		return
	}
	slices.Sort(lat)
	p99 := lat[min(len(lat)-1, len(lat)*99/100)]
	for _, d := range lat {
		r.sample(attack+": another agent's GetMachine", d)
	}
	r.count(attack+": another agent's calls answered", len(lat))
	r.count(attack+": another agent's calls, p99 (ms)", int(p99.Milliseconds()))
	t.Logf("another agent's calls during the %s: %d, p99 %s, max %s", attack, len(lat), p99, lat[len(lat)-1])
	r.checked(fmt.Sprintf("another agent's calls answered throughout the %s (p99 %s)", attack, p99.Round(time.Millisecond)))
}

// operatorDestroys has the operator destroy a machine with ctl, on a new
// connection, while the attack runs.
func (f *resourceFixture) operatorDestroys(t *testing.T, r *run, machine, attack string) {
	t.Helper()
	start := time.Now()
	res := f.Ctl("destroy-machine", machine)
	if res.Code != 0 {
		t.Errorf("during the %s, the operator's destroy-machine: %v", attack, res)
		return
	}
	r.recovered(attack+": the operator's ctl destroy-machine", time.Since(start))
	doc, err := f.TryStatus()
	if err != nil {
		t.Errorf("during the %s, the operator's status: %v", attack, err)
		return
	}
	if m, ok := doc.Machines[machine]; ok && m.Life == "alive" {
		t.Errorf("machine %s = %+v after destroy-machine, want dying or gone", machine, m)
		return
	}
	r.checked("the operator destroyed a machine with ctl during the " + attack)
}
