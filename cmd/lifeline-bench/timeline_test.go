package main

import (
	"testing"
	"time"
)

// TestRetriesIn: a step's retries are the difference of the samples
// around it, shared by time when they span more than the step.
func TestRetriesIn(t *testing.T) {
	start := time.Unix(1000, 0)
	var tl timeline
	tl.begin(start)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	tl.retries = []retrySample{{at(0), 10}, {at(250), 30}, {at(750), 130}}
	for _, c := range []struct {
		step int
		want float64
		ok   bool
	}{{0, 20, true}, {1, 50, true}, {2, 50, true}, {3, 0, false}} {
		got, ok := tl.retriesIn(c.step)
		if ok != c.ok || got != c.want {
			t.Errorf("retriesIn(%d) = %v, %v; want %v, %v", c.step, got, ok, c.want, c.ok)
		}
	}
}
