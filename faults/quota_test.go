package faults

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/state"
)

// TestQuotaAttack is the quota attack: one unit's agent, with its real
// credential, rewriting its relation settings with 60 KiB values from 16
// goroutines as fast as the controller answers, which filled the embedded
// etcd member's 2 GiB quota in 80 s and froze the model for good. Here
// the member has a small quota, so that the flood would fill it within
// the scenario many times over. During the flood another unit's agent
// keeps calling (its calls' p99 recorded), and the operator destroys a
// unit of the workload, which its real agent sees through and which goes.
// After it, the controller's memory returns within twice what it was
// before, the database is below its quota with no alarm, and the model's
// invariants hold.
func TestQuotaAttack(t *testing.T) {
	skipWhenSoaking(t)
	runQuotaAttack(t, currentSizes())
}

func runQuotaAttack(t *testing.T, sz sizes) {
	r := newRun(t, "one unit's credential floods etcd with its settings (the quota attack)", sz)
	r.size("units of the workload", sz.quotaUnits)
	r.size("etcd quota (MiB)", sz.quotaMiB)
	r.size("flood (s)", int(sz.quotaFor.Seconds()))
	f, c, metrics := newEmbeddedFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce()},
		"--etcd-quota-bytes", strconv.Itoa(sz.quotaMiB)+"MiB")
	rf := &resourceFixture{fixture: f, c: c, metrics: metrics}
	quota := float64(sz.quotaMiB << 20)

	f.OK(t, "deploy", testCharm("fsrv"))
	f.OK(t, "deploy", testCharm("fnode"), "-n", strconv.Itoa(sz.quotaUnits))
	f.OK(t, "add-relation", "fnode", "fsrv")
	want := map[string]string{"fnode": "db: 1", "fsrv": "db: " + strconv.Itoa(sz.quotaUnits)}
	f.waitModel(t, "the workload running, related", 10*time.Minute, func(doc *e2etest.StatusDoc) bool {
		return len(doc.Units()) == sz.quotaUnits+1 && convergedFor(doc, func(name string, u e2etest.UnitDoc) bool {
			svc, _, _ := strings.Cut(name, "/")
			return u.Message == want[svc]
		})
	})
	m := e2etest.AddManualUnits(t, f.Config, 2)

	// Another agent calls throughout, from before the baseline until
	// the controller's memory has returned: its status reports move the
	// model on after the flood, as the workload would.
	pctx, stopProbes := context.WithCancel(context.Background())
	defer stopProbes()
	var probes e2etest.Latencies
	probed := make(chan struct{})
	go func() { defer close(probed); m.Probe(pctx, m.Units[1], 100*time.Millisecond, &probes) }()
	base := rf.baseline(t, r)
	peak := rf.watchPeak()

	ctx, cancel := context.WithTimeout(context.Background(), sz.quotaFor)
	defer cancel()
	flood := make(chan e2etest.FloodResult, 1)
	go func() { flood <- m.FloodSettings(ctx, m.Units[0], 16, 60<<10, 1<<30, 1<<30) }()
	r.inject("a unit's agent flooding its settings (16 writers, 60 KiB a write)")

	// The operator destroys a unit of the workload during the flood.
	time.Sleep(sz.quotaFor / 4)
	destroyed := time.Now()
	f.OK(t, "destroy-unit", "fnode/0")
	f.waitModel(t, "fnode/0 gone during the flood", sz.quotaFor, func(doc *e2etest.StatusDoc) bool {
		_, ok := doc.Unit("fnode/0")
		return !ok
	})
	r.recovered("destroy-unit during the flood: from the command to the unit gone", time.Since(destroyed))
	res := <-flood
	// A machine slow enough that the flood has not written past its
	// budget yet: it goes on until refused, four times as long at most.
	for extra := 0; res.Refused == 0 && extra < 3; extra++ {
		ectx, ecancel := context.WithTimeout(context.Background(), sz.quotaFor)
		res = res.Add(m.FloodSettings(ectx, m.Units[0], 16, 60<<10, 1<<30, 1<<30))
		ecancel()
	}
	t.Logf("flood: %v", res)
	r.count("flood: calls", res.Calls)
	r.count("flood: calls done", res.OK)
	r.count("flood: calls refused (ResourceExhausted)", res.Refused)
	if res.Refused == 0 || !strings.Contains(res.Refusal, "is over its budget of") {
		t.Errorf("the flood was never refused for its credential's budget: %v", res)
	}
	if len(res.Other) > 0 {
		t.Errorf("the flood's calls had answers other than OK, ResourceExhausted and Aborted: %v", res)
	}
	if !t.Failed() {
		r.checked(fmt.Sprintf("the flood refused for its budget (%q); the operator's destroy-unit went through during it", res.Refusal))
	}

	size, alarm := storage(t, rf)
	r.count("etcd database after the flood (KiB)", int(size)>>10)
	if alarm != 0 || size >= quota-quota/10 {
		t.Errorf("after the flood etcd's database is %.0f bytes of %.0f, NOSPACE alarm %v: want below the quota's reserve, no alarm", size, quota, alarm)
	} else {
		r.checked("etcd's database below its quota's reserve, no NOSPACE alarm")
	}
	rf.checkMemoryReturns(t, r, base, peak.stop(), "quota attack")

	stopProbes()
	<-probed
	n, p50, p99, worst, fails := probes.Summary()
	t.Logf("the other agent, from before the flood until memory returned: %d probes (a read and a status report each), p50 %s, p99 %s, max %s, %d failed",
		n, p50, p99, worst, len(fails))
	r.count("the other agent: probes", n)
	r.count("the other agent: probe p50 (ms)", int(p50.Milliseconds()))
	r.count("the other agent: probe p99 (ms)", int(p99.Milliseconds()))
	r.count("the other agent: probe max (ms)", int(worst.Milliseconds()))
	if n == 0 || len(fails) > 0 {
		t.Errorf("the other agent's probes: %d made, %d failed (%v)", n, len(fails), fails)
	} else {
		r.checked(fmt.Sprintf("the other agent's calls all answered (p99 %s)", p99.Round(time.Millisecond)))
	}
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// newEmbeddedFixture is newFixture with no etcd cluster: it starts one
// controller whose etcd is its embedded member, with /metrics served
// (the address returned) and extra flags, and reads the model through the
// member's socket in the controller's data directory.
func newEmbeddedFixture(t *testing.T, opts fixtureOptions, extra ...string) (*fixture, *e2etest.Controller, string) {
	t.Helper()
	if opts.provider == "" {
		opts.provider = "local"
	}
	if opts.presence == 0 {
		opts.presence = 5 * time.Second
	}
	s := e2etest.NewSandbox(t, bins)
	s.KeepOnFailure = *keepFlag
	f := &fixture{Sandbox: s, opts: opts}
	metrics := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port+1))
	c := f.StartController(t, append([]string{"--provider", opts.provider, "--presence-timeout", opts.presence.String(),
		"--metrics-addr", metrics, "--pprof"}, extra...)...)
	client, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(c.DataDir, "etcd", "etcd.sock")}})
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(func() { client.Close() })
	f.client = client
	if f.st, err = state.New(client, state.Config{Namespace: namespace}); err != nil {
		t.Fatal(err)
	}
	if opts.monitor {
		f.mon = statetest.StartWith(t, f.st, statetest.Options{CoalesceWithin: opts.coalesce})
		s.OnStop(f.mon.Halt)
	}
	return f, c, metrics
}

// storage reads etcd's database size and NOSPACE alarm from the
// controller's /metrics.
func storage(t *testing.T, f *resourceFixture) (size, alarm float64) {
	t.Helper()
	page, err := f.scrape()
	if err != nil {
		t.Fatal(err)
	}
	size, alarm = metric(page, "lifeline_etcd_db_size_bytes"), metric(page, "lifeline_etcd_nospace_alarm")
	if size < 0 || alarm < 0 {
		t.Fatalf("no lifeline_etcd_db_size_bytes (%v) or lifeline_etcd_nospace_alarm (%v) on /metrics", size, alarm)
	}
	return size, alarm
}
