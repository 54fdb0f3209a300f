package hostprobe

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"time"
)

// The VM the harness runs on has slower stretches, of ten minutes or
// more, in which every run is slower: the same work takes more CPU
// seconds, and raw etcd falls further than the harness's own work does.
// The kernel shows no steal time then, so the harness measures the machine's
// speed itself, before the run and after it, with two fixed pieces of
// work: one bound by the core (hashing, in cache) and one bound by memory
// (a chase of dependent loads through a table far larger than the
// caches, what looking keys up in etcd's index and the controller's maps
// is made of). Runs are comparable when these agree.

// Speed is the machine's speed, by two fixed pieces of work.
type Speed struct {
	// HashNanosPerKiB is the CPU SHA-256 takes a KiB, in cache.
	HashNanosPerKiB float64 `json:"hash_ns_per_kib"`
	// ChaseNanosPerLoad is the CPU a load dependent on the one before
	// takes, at random in 64 MiB.
	ChaseNanosPerLoad float64 `json:"chase_ns_per_load"`
}

const (
	hashProbeBlock  = 64 << 10 // in cache
	hashProbeRounds = 512      // 32 MiB hashed
	chaseProbeSlots = 16 << 20 // 4-byte slots: 64 MiB
	chaseProbeLoads = 1 << 20
	// speedProbeTries is how many times each is timed: the fastest
	// counts, the others having been disturbed (a tick, a page fault).
	speedProbeTries = 3
)

// MeasureSpeed runs both probes. The process must be otherwise idle: the
// CPU is the whole process's.
func MeasureSpeed() Speed {
	return MeasureSpeedOf(hashProbeRounds, chaseProbeSlots, chaseProbeLoads)
}

// MeasureSpeedOf hashes rounds blocks and makes loads dependent loads
// among slots.
func MeasureSpeedOf(rounds, slots, loads int) Speed {
	block := make([]byte, hashProbeBlock)
	for i := range block {
		block[i] = byte(i)
	}
	hash := fastest(func() {
		for range rounds {
			sum := sha256.Sum256(block)
			block[0] = sum[0]
		}
	})

	// One cycle through every slot (Sattolo's shuffle), so that no load
	// can start before the one it depends on ends.
	next := make([]uint32, slots)
	for i := range next {
		next[i] = uint32(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := len(next) - 1; i > 0; i-- {
		j := r.IntN(i)
		next[i], next[j] = next[j], next[i]
	}
	p := uint32(0)
	chase := fastest(func() {
		for range loads {
			p = next[p]
		}
	})
	runtime.KeepAlive(p) // the chase's result is used

	return Speed{
		HashNanosPerKiB:   float64(hash.Nanoseconds()) / float64(rounds*hashProbeBlock/1024),
		ChaseNanosPerLoad: float64(chase.Nanoseconds()) / float64(loads),
	}
}

// fastest returns the least CPU f took in speedProbeTries runs.
func fastest(f func()) time.Duration {
	var best time.Duration
	for i := range speedProbeTries {
		start := processCPU()
		f()
		if d := processCPU() - start; i == 0 || d < best {
			best = d
		}
	}
	return best
}

func (p Speed) String() string {
	return fmt.Sprintf("SHA-256 %.0f ns a KiB, a dependent load %.0f ns", p.HashNanosPerKiB, p.ChaseNanosPerLoad)
}

// processCPU is the user and system CPU this process has used so far.
func processCPU() time.Duration {
	var self syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &self) != nil {
		return 0
	}
	return time.Duration(self.Utime.Nano() + self.Stime.Nano())
}
