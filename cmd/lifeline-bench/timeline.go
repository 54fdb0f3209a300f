package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

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
	// retries are the controller's count of transactions retried after a
	// conflict, read every timelineStep of the phase (sampleRetries).
	retries []retrySample
}

type retrySample struct {
	at    time.Time
	total float64
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
	t.start, t.events, t.retries = at, nil, nil
}

// sampleRetries starts reading the controller's count of retried
// transactions (read) every timelineStep, for the timeline's last column:
// when in a phase the retries came. A read costs the controller a scrape
// of its /metrics, four a second. stop ends the reading and waits for it.
func (t *timeline) sampleRetries(ctx context.Context, read func() (float64, error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(timelineStep)
		defer tick.Stop()
		for {
			if v, err := read(); err == nil {
				t.mu.Lock()
				t.retries = append(t.retries, retrySample{time.Now(), v})
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

// retriesIn returns the retries in the step of the timeline's i-th row,
// by the samples around it, and whether there are samples on both sides.
func (t *timeline) retriesIn(i int) (float64, bool) {
	from := t.start.Add(time.Duration(i) * timelineStep)
	to := from.Add(timelineStep)
	var before, after *retrySample
	for j := range t.retries {
		r := &t.retries[j]
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
	return (after.total - before.total) * timelineStep.Seconds() / span, true
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
	fmt.Fprintf(w, "timeline, %s (changes by when etcd made them, every %s; retried: transactions retried after a conflict, by the controller's count read every step)\n", title, timelineStep)
	fmt.Fprintf(w, "%6s", "s")
	for _, k := range timelineKinds {
		fmt.Fprintf(w, " %8s", strings.Fields(k)[0][:1]+" "+strings.Fields(k)[1])
	}
	fmt.Fprintf(w, " %8s\n", "retried")
	for i, c := range counts {
		fmt.Fprintf(w, "%6.2f", (time.Duration(i) * timelineStep).Seconds())
		for _, k := range timelineKinds {
			fmt.Fprintf(w, " %8d", c[k])
		}
		if n, ok := t.retriesIn(i); ok {
			fmt.Fprintf(w, " %8.0f\n", n)
		} else {
			fmt.Fprintf(w, " %8s\n", "-")
		}
	}
}
