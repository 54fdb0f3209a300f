package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The controller's memory budget, when --memory-limit is auto: Go's soft
// memory limit (debug.SetMemoryLimit) follows the model, budgetFloor and
// budgetPerUnit for each of its units. With the collector at
// controllerGCPercent alone, the heap grows to four times what was live
// before a collection: at 10,000 units about 150 MiB was live, and the
// controller peaked at 74-91 KiB a unit; but a collection early in a
// destroy sometimes found 180 MiB or more live (a burst of retried
// transactions, the agents' watches all sending), and the peak went past
// the 100 KiB the scale targets allow. At 10,000 units the budget is 864
// MiB: in most runs the heap's goal stays under it, and in the others it
// caps one goal or two of a destroy's three collections. A tighter
// budget (192 MiB and 52 KiB a unit, 700 MiB there) holds the peak near
// 67 KiB a unit but is reached in every run, and costs the destroy CPU.
// The floor is above what a small model needs, and high enough that the
// limit, counted a second behind a deploy, seldom caps a collection's
// goal while units arrive.
const (
	budgetFloor   = 512 << 20
	budgetPerUnit = 36 << 10
	// budgetEvery is how often the model's units are counted again.
	budgetEvery = time.Second
)

// memoryBudget keeps the soft memory limit sized to the model.
type memoryBudget struct {
	floor, perUnit int64
	// units counts the model's units.
	units func(context.Context) (int64, error)
	// live reports the heap the last collection left live.
	live func() int64
	// set sets the limit (debug.SetMemoryLimit).
	set    func(int64) int64
	logger hclog.Logger
	// most is the most units counted yet; last the limit last set.
	most, last int64
}

// limit is the budget for a model of n units whose heap the last
// collection left live bytes: never under twice what is live, so that a
// model that needs more than the budget assumes costs collections as at
// GOGC=100, not a collector that runs without rest.
func (b *memoryBudget) limit(n, live int64) int64 {
	return max(b.floor+n*b.perUnit, 2*live)
}

// update counts the units and sets the limit for the most there have
// been: what a model's units leave behind them (etcd's history of their
// keys until it is compacted, the watch hub's ring, the collector's own
// pace) does not go with them, and a limit that fell as they went made
// the collector run on and on while 10,000 units were destroyed. A
// failed count leaves the limit as it was.
func (b *memoryBudget) update(ctx context.Context) error {
	n, err := b.units(ctx)
	if err != nil {
		return err
	}
	b.most = max(b.most, n)
	l := b.limit(b.most, b.live())
	if l != b.last {
		b.set(l)
		if b.logger != nil && (b.last == 0 || l > b.last*5/4 || l < b.last*4/5) {
			b.logger.Debug("memory limit", "units", n, "limit_mib", l>>20)
		}
		b.last = l
	}
	return nil
}

// run updates the limit every budgetEvery until ctx ends.
func (b *memoryBudget) run(ctx context.Context) error {
	t := time.NewTicker(budgetEvery)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, budgetEvery)
		err := b.update(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && b.logger != nil {
			b.logger.Debug("memory limit not updated", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// liveHeap reads the heap the last collection left live.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// parseMemoryLimit reads --memory-limit: "auto" (the budget, 0 returned),
// "none" (no limit: math.MaxInt64), or a size in bytes with a suffix of
// B, KiB, MiB, GiB or TiB as in GOMEMLIMIT.
func parseMemoryLimit(s string) (int64, error) {
	switch s {
	case "auto":
		return 0, nil
	case "none":
		return math.MaxInt64, nil
	}
	n, err := parseSizeFlag("--memory-limit", s, false)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: want auto, none, or a size such as 2GiB or 512MiB", s)
	}
	return n, nil
}

// freeMemory serves /debug/gc (with --pprof): a POST collects garbage and
// returns the free memory to the system (debug.FreeOSMemory), so that a
// test of what the controller holds after a burst measures that, not when
// Go's background scavenger gets to it.
func freeMemory(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST collects garbage and returns free memory to the system", http.StatusMethodNotAllowed)
		return
	}
	debug.FreeOSMemory()
	fmt.Fprintf(w, "live heap %d bytes\n", liveHeap())
}
