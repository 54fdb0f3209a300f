package main

import (
	"context"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// revClock tells when etcd reached a revision, from etcd's current
// revision read every revClockEvery. The harness's watch of the model can
// lag far behind etcd when the hooks starve the harness's process of CPU
// (90 s was seen); a change's revision, timed by the clock, says when it
// happened within revClockEvery, however late the watch saw it.
type revClock struct {
	mu      sync.Mutex
	samples []revSample
}

type revSample struct {
	at  time.Time
	rev int64
}

// revClockEvery is how often the clock reads etcd's revision. A revision
// is timed by the first reading at or past it, so a time is late by half
// of this on average: at 100 ms, a twentieth of a second in every destroy
// of about four seconds. Fifty reads a
// second are little beside the thousands of transactions a second a run
// makes.
const revClockEvery = 20 * time.Millisecond

// startRevClock reads etcd's revision until ctx ends. A read of one absent
// key costs etcd next to nothing.
func startRevClock(ctx context.Context, c *clientv3.Client) *revClock {
	rc := &revClock{}
	go func() {
		t := time.NewTicker(revClockEvery)
		defer t.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := c.Get(rctx, "lifeline-bench-clock", clientv3.WithSerializable())
			cancel()
			if err == nil {
				rc.mu.Lock()
				rc.samples = append(rc.samples, revSample{at: time.Now(), rev: resp.Header.Revision})
				rc.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return rc
}

// timeOf returns when etcd was first seen at rev or later, and false when
// it has not been yet.
func (rc *revClock) timeOf(rev int64) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	i := sort.Search(len(rc.samples), func(i int) bool { return rc.samples[i].rev >= rev })
	if i == len(rc.samples) {
		return time.Time{}, false
	}
	return rc.samples[i].at, true
}

// seen, called when the harness's watch has just seen revision rev,
// returns when etcd reached rev (waiting for the clock to see it, which
// it has or will within revClockEvery) and how long the watch took to see
// it.
func (rc *revClock) seen(ctx context.Context, rev int64) (time.Time, time.Duration) {
	now := time.Now()
	for {
		if at, ok := rc.timeOf(rev); ok {
			return at, max(0, now.Sub(at))
		}
		select {
		case <-ctx.Done():
			return now, 0
		case <-time.After(revClockEvery):
		}
	}
}
