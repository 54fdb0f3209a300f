package embedetcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// smallQuota is the members' quota here: a few hundred rewrites of a large
// value fill it.
const smallQuota = 16 << 20

// startSmall starts a member with smallQuota in a directory of its own and
// a client of it; both stop with the test.
func startSmall(t *testing.T, dir string) (*embedetcd.Server, *clientv3.Client) {
	t.Helper()
	if dir == "" {
		d, err := os.MkdirTemp("", "ll-space-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	s, err := embedetcd.Start(embedetcd.Config{Dir: dir, NoFsync: true, QuotaBytes: smallQuota, CompactionRetention: "0"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s, c
}

// fill rewrites one key with 64 KiB values until the member refuses a
// write for want of space, and returns how many it took; at most max.
func fill(t *testing.T, c *clientv3.Client, max int) (int, error) {
	t.Helper()
	v := strings.Repeat("x", 64<<10)
	for i := range max {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, "history", v)
		cancel()
		if err != nil {
			return i, err
		}
	}
	return max, nil
}

// keep runs Keep until the test ends.
func keep(t *testing.T, s *embedetcd.Server, cfg embedetcd.SpaceConfig) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Keep(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitSpace polls the member's space until cond holds.
func waitSpace(t *testing.T, s *embedetcd.Server, what string, cond func(embedetcd.Space) bool) embedetcd.Space {
	t.Helper()
	var sp embedetcd.Space
	poll.UntilSays(t, what, func() (bool, string) {
		sp = s.Space()
		return cond(sp), fmt.Sprintf("space %+v", sp)
	})
	return sp
}

// TestKeepCompactsAndDefragments has a writer rewrite one key with large
// values, as one agent rewriting its settings would, past what the quota
// holds: Keep compacts the history and defragments the file as it goes,
// so that no write is refused and the file stays below the quota.
func TestKeepCompactsAndDefragments(t *testing.T) {
	s, c := startSmall(t, "")
	keep(t, s, embedetcd.SpaceConfig{History: 10, Interval: 20 * time.Millisecond})
	// Four quotas' worth, paced so that Keep looks between writes.
	v := strings.Repeat("x", 64<<10)
	for i := range 4 * smallQuota / (64 << 10) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, "history", v)
		cancel()
		if err != nil {
			t.Fatalf("write %d of a key Keep compacts = %v, want it done", i, err)
		}
		if i%8 == 7 {
			time.Sleep(25 * time.Millisecond)
		}
	}
	sp := s.Space()
	if sp.NoSpace || sp.Size >= smallQuota {
		t.Errorf("space after writing four quotas' worth: %+v, want below the quota", sp)
	}
}

// TestSpaceWakesKeep has a writer that asks Space before each write, as
// the controller does, rewrite one key with large values as fast as the
// member takes them, four quotas' worth, with Keep's ticks ten seconds
// apart: without a wake that takes four ticks, forty seconds. The
// writer's asks wake Keep (at most every tenth of the interval) once the
// database is half full, so compaction keeps pace with the writes: none
// is refused, and the file comes back below the quota.
func TestSpaceWakesKeep(t *testing.T) {
	s, c := startSmall(t, "")
	keep(t, s, embedetcd.SpaceConfig{History: 10, Interval: 10 * time.Second})
	v := strings.Repeat("x", 64<<10)
	start := time.Now()
	for written := 0; written < 4*smallQuota; {
		if time.Since(start) > 25*time.Second {
			t.Fatalf("wrote %d of %d bytes in %v: Keep did not wake before its ticks", written, 4*smallQuota, time.Since(start))
		}
		if sp := s.Space(); sp.Tight {
			time.Sleep(5 * time.Millisecond) // what the controller refuses
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Put(ctx, "history", v)
		cancel()
		if err != nil {
			t.Fatalf("write at %d bytes with Space asked first = %v, want it done", written, err)
		}
		written += len(v)
	}
	// etcd counts a write in the file's size once its batch commits, so
	// the last writes may show a moment after the loop.
	waitSpace(t, s, "the space below the quota", func(sp embedetcd.Space) bool { return !sp.NoSpace && sp.Size < smallQuota })
}

// TestKeepLeavesTheFloor checks that compaction never passes the floor,
// whatever the history it may drop: the watch hub's own watch must not
// find its changes compacted away.
func TestKeepLeavesTheFloor(t *testing.T) {
	s, c := startSmall(t, "")
	ctx := context.Background()
	var floor int64
	for i := range 50 {
		resp, err := c.Put(ctx, "k", "v")
		if err != nil {
			t.Fatal(err)
		}
		if i == 25 {
			floor = resp.Header.Revision
		}
	}
	keep(t, s, embedetcd.SpaceConfig{Floor: func() int64 { return floor }, History: 1, Interval: 10 * time.Millisecond})
	// Compacted to floor−1 and no further: a read at floor works, one
	// at floor−2 does not.
	poll.UntilSays(t, "the history before the floor compacted", func() (bool, string) {
		_, err := c.Get(ctx, "k", clientv3.WithRev(floor-2))
		return errors.Is(err, rpctypes.ErrCompacted), fmt.Sprintf("a read at %d = %v", floor-2, err)
	})
	time.Sleep(100 * time.Millisecond) // several more looks
	if _, err := c.Get(ctx, "k", clientv3.WithRev(floor)); err != nil {
		t.Errorf("a read at the floor %d = %v, want it answered: compaction passed the floor", floor, err)
	}
}

// TestKeepRecoversFromNoSpace fills a member until it raises its NOSPACE
// alarm and refuses writes, then restarts it, as a controller restarted on
// it would: Keep compacts, defragments and disarms the alarm, after which
// the member takes writes again.
func TestKeepRecoversFromNoSpace(t *testing.T) {
	dir, err := os.MkdirTemp("", "ll-space-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	func() {
		s, c := startSmall(t, dir)
		n, err := fill(t, c, 4*smallQuota/(64<<10))
		if !errors.Is(err, rpctypes.ErrNoSpace) {
			t.Fatalf("after %d writes of 64 KiB into a %d MiB quota: %v, want %v", n, smallQuota>>20, err, rpctypes.ErrNoSpace)
		}
		if sp := s.Space(); !sp.NoSpace || !sp.Tight {
			t.Fatalf("space of a full member = %+v, want its NOSPACE alarm and tight", sp)
		}
		c.Close()
		s.Close()
	}()

	s, c := startSmall(t, dir)
	if sp := s.Space(); !sp.NoSpace {
		t.Fatalf("space of the full member started again = %+v, want its NOSPACE alarm", sp)
	}
	if _, err := c.Put(context.Background(), "k", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write to the full member = %v, want %v", err, rpctypes.ErrNoSpace)
	}
	keep(t, s, embedetcd.SpaceConfig{Interval: 20 * time.Millisecond})
	sp := waitSpace(t, s, "the alarm disarmed", func(sp embedetcd.Space) bool { return !sp.NoSpace })
	if sp.Tight || sp.Size >= smallQuota/2 {
		t.Errorf("space once disarmed = %+v, want the history compacted and defragmented away", sp)
	}
	if _, err := c.Put(context.Background(), "k", "v"); err != nil {
		t.Errorf("a write once the alarm is disarmed = %v, want it done", err)
	}
}
