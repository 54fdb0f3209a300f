package faults

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

var (
	fullFlag    = flag.Bool("faults.full", false, "run the scenarios at full size (200 units, 300 units, 60 s of fuzzing), not the short form")
	soakFlag    = flag.Duration("faults.soak", 0, "loop the scenarios for this long (TestSoak); the other tests skip")
	keepFlag    = flag.Bool("faults.keep", false, "keep a failed test's sandbox directory (logs, machines' and units' files); its processes are stopped all the same")
	seedFlag    = flag.Uint64("faults.seed", 0, "the fuzzer's seed, and the one topology the teardown soak then replays (random ones when 0; each run logs its seed)")
	summaryFlag = flag.String("faults.summary", "", "write a JSON summary of every scenario run to this file")
)

// What TestMain builds once for the package.
var (
	bins     e2etest.Binaries
	etcdBin  string
	charmDir string // testdata/charms, absolute
	// demoDir holds copies of the demo charms (examples/charms: kv, app,
	// logger) with their servers built in, for the teardown soak.
	demoDir string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "ll-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bins, err = e2etest.BuildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	if etcdBin, err = e2etest.BuildEtcd(dir); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	demoDir = filepath.Join(dir, "charms")
	if err := e2etest.BuildDemoCharms(demoDir); err != nil {
		fmt.Fprintln(os.Stderr, "faults: the demo charms:", err)
		return 1
	}
	if charmDir, err = filepath.Abs(filepath.Join("testdata", "charms")); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	code := m.Run()
	if *summaryFlag != "" {
		if err := summary.write(*summaryFlag); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			return 1
		}
	}
	return code
}

// testCharm is the path of a test charm (fnode, fsrv, fsub).
func testCharm(name string) string { return filepath.Join(charmDir, name) }

// demoCharm is the path of a built demo charm (kv, app, logger).
func demoCharm(name string) string { return filepath.Join(demoDir, name) }

// sizes are how big the scenarios are.
type sizes struct {
	form string // short or full

	// etcd leader loss: units deployed, then destroyed.
	leaderDeploy, leaderDestroy int

	// machine agents killed: fsrv units, fnode units (each with an fsub
	// beside it), how often an agent is killed, how long the killed agent
	// stays down, and how often hooks fail on purpose.
	chaosServers, chaosClients int
	chaosEvery                 time.Duration
	chaosDownMin, chaosDownMax time.Duration
	chaosFailPercent           int

	// partition: units, how many agents are stopped, and for how long
	// beyond the presence timeout.
	partitionUnits, partitioned int
	partitionFor                time.Duration

	// fuzzing: for how long, from how many clients.
	fuzzFor     time.Duration
	fuzzClients int

	// resource attacks: how long the connection flood lasts and how many
	// connections it holds from each of its addresses; how long the slow
	// readers' agent writes, with how many streams of how many
	// subscriptions.
	floodFor              time.Duration
	floodConns            int
	slowFor               time.Duration
	slowStreams, slowSubs int
	// teardown soak: how many random topologies, and how many units each
	// principal service has at most (2 at least).
	teardownTopologies, teardownUnits int
	// the quota attack: units of the workload, the embedded etcd
	// member's quota, and how long the flood lasts.
	quotaUnits, quotaMiB int
	quotaFor             time.Duration
}

func currentSizes() sizes {
	if *fullFlag {
		return sizes{
			form:         "full",
			leaderDeploy: 200, leaderDestroy: 100,
			chaosServers: 10, chaosClients: 145, chaosEvery: 3 * time.Second,
			chaosDownMin: time.Second, chaosDownMax: 5 * time.Second, chaosFailPercent: 5,
			partitionUnits: 10, partitioned: 3, partitionFor: time.Minute,
			fuzzFor: time.Minute, fuzzClients: 4,
			floodFor: 30 * time.Second, floodConns: 5000,
			slowFor: 30 * time.Second, slowStreams: 200, slowSubs: 400,
			teardownTopologies: 50, teardownUnits: 12,
			quotaUnits: 10, quotaMiB: 64, quotaFor: time.Minute,
		}
	}
	return sizes{
		form:         "short",
		leaderDeploy: 24, leaderDestroy: 12,
		chaosServers: 2, chaosClients: 9, chaosEvery: 2 * time.Second,
		chaosDownMin: 500 * time.Millisecond, chaosDownMax: 2 * time.Second, chaosFailPercent: 5,
		partitionUnits: 3, partitioned: 1, partitionFor: 3 * time.Second,
		fuzzFor: 5 * time.Second, fuzzClients: 2,
		floodFor: 5 * time.Second, floodConns: 400,
		slowFor: 10 * time.Second, slowStreams: 20, slowSubs: 400,
		teardownTopologies: 3, teardownUnits: 4,
		quotaUnits: 2, quotaMiB: 64, quotaFor: 20 * time.Second,
	}
}

// monitorCoalesce is the fixture's coalesce option for the sizes: none for
// the short form, whose models the monitor checks at every revision.
func (sz sizes) monitorCoalesce() time.Duration {
	if strings.HasSuffix(sz.form, "full") {
		return 5 * time.Millisecond
	}
	return 0
}

// skipWhenSoaking skips a scenario's own test while TestSoak loops it.
func skipWhenSoaking(t *testing.T) {
	if *soakFlag > 0 {
		t.Skip("-faults.soak: TestSoak runs the scenarios")
	}
}

// run is what one run of a scenario injected, how long recovery took, and
// what was checked after; the summary holds every run.
type run struct {
	Scenario string  `json:"scenario"`
	Form     string  `json:"form"`
	Started  string  `json:"started"`
	Seconds  float64 `json:"seconds"`
	Passed   bool    `json:"passed"`
	// Size describes the workload (units, machines, clients).
	Size map[string]int `json:"size"`
	// Injected counts the faults by kind.
	Injected map[string]int `json:"injected"`
	// Recovery lists, per measure, the seconds each recovery took; the
	// summary shows them as Stats.
	Recovery map[string][]float64 `json:"-"`
	Stats    map[string]stats     `json:"recovery_seconds"`
	// Counts are other figures (hook failures seen, RPCs sent...).
	Counts  map[string]int `json:"counts"`
	Checked []string       `json:"checked"`

	t     testing.TB
	mu    sync.Mutex
	start time.Time
}

// newRun starts the record of one run of a scenario; it goes into the
// summary when the test ends.
func newRun(t testing.TB, scenario string, sz sizes) *run {
	r := &run{
		Scenario: scenario, Form: sz.form, Started: time.Now().UTC().Format(time.RFC3339),
		Size: map[string]int{}, Injected: map[string]int{}, Recovery: map[string][]float64{}, Counts: map[string]int{},
		t: t, start: time.Now(),
	}
	t.Cleanup(func() {
		r.mu.Lock()
		r.Seconds = time.Since(r.start).Round(time.Second).Seconds()
		r.Passed = !t.Failed()
		r.mu.Unlock()
		t.Logf("summary: %s", r.line())
		summary.add(r)
	})
	return r
}

func (r *run) size(what string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Size[what] = n
}

func (r *run) inject(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Injected[what]++
}

func (r *run) count(what string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Counts[what] += n
}

// recovered records how long a recovery took, and logs it.
func (r *run) recovered(what string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Recovery[what] = append(r.Recovery[what], d.Seconds())
	r.t.Logf("recovery: %s: %s", what, d.Round(10*time.Millisecond))
}

// sample records how long one of many recoveries took, without logging it.
func (r *run) sample(what string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Recovery[what] = append(r.Recovery[what], d.Seconds())
}

// checked records a check that passed, once however often it passed (the
// teardown soak checks each topology the same ways).
func (r *run) checked(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.Checked, what) {
		r.Checked = append(r.Checked, what)
	}
}

func (r *run) line() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Stats = map[string]stats{}
	for what, v := range r.Recovery {
		r.Stats[what] = newStats(v)
	}
	data, _ := json.Marshal(r)
	return string(data)
}

// stats summarise the seconds recoveries took.
type stats struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	Max    float64 `json:"max"`
}

func newStats(v []float64) stats {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	round := func(x float64) float64 { return float64(int(x*100+0.5)) / 100 }
	at := func(q float64) float64 { return round(s[min(len(s)-1, int(q*float64(len(s))))]) }
	return stats{N: len(s), Min: round(s[0]), Median: at(0.5), P90: at(0.9), Max: round(s[len(s)-1])}
}

// summary collects the runs of the whole test binary.
var summary runs

type runs struct {
	mu   sync.Mutex
	list []*run
}

func (s *runs) add(r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, r)
}

func (s *runs) write(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sort.SliceStable(s.list, func(i, j int) bool { return s.list[i].Scenario < s.list[j].Scenario })
	data, err := json.MarshalIndent(s.list, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
