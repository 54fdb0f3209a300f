package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// timelineProbe records each phase's timeline and prints it at the
// phase's end (-timeline). A nil one does nothing.
type timelineProbe struct {
	model *follower
	clock *revClock
	read  func() ([]float64, error)
	stop  func()
}

// newTimelineProbe returns the timeline probe of the model the follower
// f keeps (follow with timeline), the controller ctl's counters sampled
// beside it; nil unless on.
func newTimelineProbe(on bool, f *follower, clock *revClock, ctl *controllerProc) *timelineProbe {
	if !on {
		return nil
	}
	names := sampledMetrics()
	return &timelineProbe{model: f, clock: clock, read: func() ([]float64, error) { return ctl.metrics(names...) }}
}

// begin starts recording a phase that began at start.
func (p *timelineProbe) begin(ctx context.Context, start time.Time) {
	if p == nil {
		return
	}
	p.model.timeline.begin(start)
	p.stop = p.model.timeline.sample(ctx, p.read)
}

// end stops sampling and prints the phase's timeline, under title, to
// standard output.
func (p *timelineProbe) end(title string) {
	if p == nil {
		return
	}
	p.stop()
	p.model.timeline.print(os.Stdout, title, p.clock)
}

// timeline keeps the life changes of units and machines the harness's
// watch saw in a phase, and the scope entries made and removed, by their
// revisions; printed, they are counted in steps of timelineStep from the
// phase's start by when etcd reached their revisions (the revClock's
// time, not the watch's, which can lag by seconds): where a phase's
// seconds went.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	events []timelineEvent
	// samples are the controller's sampledCounters, read every
	// timelineStep of the phase (sample).
	samples []counterSample
}

// counterSample is one reading of the sampledCounters, in their order
// (NaN for one the controller does not serve).
type counterSample struct {
	at     time.Time
	totals []float64
}

// sampledCounters are the controller's counters the timeline reads every
// step, for its last columns: when in a phase the transactions retried
// after a conflict came, and the CPU the controller's garbage collector
// used. Go counts the collector's CPU as each collection ends (the
// runtime's /cpu/classes/gc/total:cpu-seconds), so a collection shows in
// the step where it ended, and its marking ran in the steps before.
var sampledCounters = []struct{ metric, column, about, format string }{
	{"lifeline_etcd_txn_retries_total", "retried", "transactions retried after a conflict", " %8.0f"},
	{"go_cpu_classes_gc_total_cpu_seconds_total", "gc cpu s", "the controller's collector's CPU, as of the collections ended in the step", " %8.2f"},
}

// sampledMetrics are sampledCounters' metric names, in their order.
func sampledMetrics() []string {
	out := make([]string, len(sampledCounters))
	for i, c := range sampledCounters {
		out[i] = c.metric
	}
	return out
}

type timelineEvent struct {
	rev  int64
	kind string
}

const timelineStep = 250 * time.Millisecond

// timelineKinds are the columns printed, in order.
var timelineKinds = []string{"unit alive", "unit dying", "unit dead", "unit removed", "scope in", "scope out", "machine dying", "machine dead", "machine removed"}

func (t *timeline) begin(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start, t.events, t.samples = at, nil, nil
}

// sample starts reading the controller's sampledCounters (read, in one
// scrape of its /metrics) every timelineStep, for the timeline's last
// columns: four scrapes a second. stop ends the reading and waits for it.
func (t *timeline) sample(ctx context.Context, read func() ([]float64, error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(timelineStep)
		defer tick.Stop()
		for {
			if vs, err := read(); err == nil {
				t.mu.Lock()
				t.samples = append(t.samples, counterSample{time.Now(), vs})
				t.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// countIn returns how much the k-th of the sampledCounters grew in the
// step of the timeline's i-th row, by the samples around it, and whether
// there are samples on both sides that have it.
func (t *timeline) countIn(i, k int) (float64, bool) {
	from := t.start.Add(time.Duration(i) * timelineStep)
	to := from.Add(timelineStep)
	var before, after *counterSample
	for j := range t.samples {
		r := &t.samples[j]
		if k >= len(r.totals) || math.IsNaN(r.totals[k]) {
			continue
		}
		if !r.at.After(from) {
			before = r
		}
		if after == nil && !r.at.Before(to) {
			after = r
		}
	}
	if before == nil || after == nil {
		return 0, false
	}
	// The samples bracket the step: share their difference by time.
	span := after.at.Sub(before.at).Seconds()
	return (after.totals[k] - before.totals[k]) * timelineStep.Seconds() / span, true
}

func (t *timeline) add(rev int64, kind string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.start.IsZero() {
		t.events = append(t.events, timelineEvent{rev, kind})
	}
}

// recording reports whether a phase's changes are being kept (begin was
// called: -timeline).
func (t *timeline) recording() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.start.IsZero()
}

// unit keeps a unit's change, u as put (nil when removed).
func (t *timeline) unit(rev int64, u *pb.Unit) {
	if u == nil {
		t.add(rev, "unit removed")
	} else {
		t.add(rev, "unit "+state.LifeName(u.Life))
	}
}

// event keeps one change of a machine or a scope; the follower keeps its
// units' (unit), decoded once for both.
func (t *timeline) event(e state.Event) {
	at := e.ModRevision
	put := e.Type == state.EventPut
	switch {
	case strings.HasPrefix(e.Key, machinesPrefix):
		if !put {
			t.add(at, "machine removed")
			return
		}
		m := &pb.Machine{}
		if proto.Unmarshal(e.Value, m) == nil && m.Life != pb.Life_LIFE_ALIVE {
			t.add(at, "machine "+state.LifeName(m.Life))
		}
	case strings.HasPrefix(e.Key, scopesPrefix):
		if put {
			t.add(at, "scope in")
		} else {
			t.add(at, "scope out")
		}
	}
}

// print writes the counts, a row a step.
func (t *timeline) print(w io.Writer, title string, clock *revClock) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var counts []map[string]int
	for _, e := range t.events {
		at, ok := clock.timeOf(e.rev)
		if !ok || at.Before(t.start) {
			continue
		}
		i := int(at.Sub(t.start) / timelineStep)
		for len(counts) <= i {
			counts = append(counts, map[string]int{})
		}
		counts[i][e.kind]++
	}
	abouts := make([]string, len(sampledCounters))
	for i, c := range sampledCounters {
		abouts[i] = c.column + ": " + c.about
	}
	fmt.Fprintf(w, "timeline, %s (changes by when etcd made them, every %s; %s, by the controller's counts read every step)\n", title, timelineStep, strings.Join(abouts, ", and "))
	fmt.Fprintf(w, "%6s", "s")
	for _, k := range timelineKinds {
		fmt.Fprintf(w, " %8s", strings.Fields(k)[0][:1]+" "+strings.Fields(k)[1])
	}
	for _, c := range sampledCounters {
		fmt.Fprintf(w, " %8s", c.column)
	}
	fmt.Fprintln(w)
	for i, c := range counts {
		fmt.Fprintf(w, "%6.2f", (time.Duration(i) * timelineStep).Seconds())
		for _, k := range timelineKinds {
			fmt.Fprintf(w, " %8d", c[k])
		}
		for k, sc := range sampledCounters {
			if n, ok := t.countIn(i, k); ok {
				fmt.Fprintf(w, sc.format, n)
			} else {
				fmt.Fprintf(w, " %8s", "-")
			}
		}
		fmt.Fprintln(w)
	}
}
