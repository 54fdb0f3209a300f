package main

import (
	"math"
	"testing"
	"time"
)

// TestCountIn: a step's count is the difference of the samples around it,
// shared by time when they span more than the step; samples without the
// counter are passed over.
func TestCountIn(t *testing.T) {
	start := time.Unix(1000, 0)
	var tl timeline
	tl.begin(start)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	nan := math.NaN()
	tl.samples = []counterSample{{at(0), []float64{10, 1}}, {at(250), []float64{30, nan}}, {at(750), []float64{130, 2}}}
	for _, c := range []struct {
		step int
		want float64
		ok   bool
	}{{0, 20, true}, {1, 50, true}, {2, 50, true}, {3, 0, false}} {
		got, ok := tl.countIn(c.step, 0)
		if ok != c.ok || got != c.want {
			t.Errorf("countIn(%d, 0) = %v, %v; want %v, %v", c.step, got, ok, c.want, c.ok)
		}
	}
	// The second counter's sample at 250 ms is missing: its first three
	// steps share the difference of the samples at 0 and 750 ms.
	for step := range 3 {
		if got, ok := tl.countIn(step, 1); !ok || math.Abs(got-1.0/3) > 1e-9 {
			t.Errorf("countIn(%d, 1) = %v, %v; want 1/3, true", step, got, ok)
		}
	}
}
