package main

import (
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
	t.start, t.events = at, nil
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
	fmt.Fprintf(w, "timeline, %s (changes by when etcd made them, every %s)\n", title, timelineStep)
	fmt.Fprintf(w, "%6s", "s")
	for _, k := range timelineKinds {
		fmt.Fprintf(w, " %8s", strings.Fields(k)[0][:1]+" "+strings.Fields(k)[1])
	}
	fmt.Fprintln(w)
	for i, c := range counts {
		fmt.Fprintf(w, "%6.2f", (time.Duration(i) * timelineStep).Seconds())
		for _, k := range timelineKinds {
			fmt.Fprintf(w, " %8d", c[k])
		}
		fmt.Fprintln(w)
	}
}
