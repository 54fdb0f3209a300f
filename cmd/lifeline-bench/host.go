package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/lifelinehq/lifeline/cmd/lifeline-bench/internal/hostprobe"
)

// probeHost measures the host before anything starts, into res: the
// filesystem of the run's directory dir (refused when it keeps its files
// in memory, unless allowMemoryFS), the CPU a directory takes to make
// there, how long ago the run before removed its files beside it, and
// the machine's speed (internal/hostprobe).
func probeHost(dir string, allowMemoryFS bool, res *results) error {
	fsName, inMemory, err := hostprobe.Filesystem(dir)
	if err != nil {
		return fmt.Errorf("filesystem of %s: %w", dir, err)
	}
	if inMemory && !allowMemoryFS {
		return fmt.Errorf("%s is on %s, where fsync returns at once: etcd would pay nothing for its disk and the figures would not be a disk's; give -dir on a disk (or TMPDIR), or -allow-memory-fs to measure anyway", dir, fsName)
	}
	res.Filesystem = fsName
	cost, err := hostprobe.MkdirCost(dir)
	if err != nil {
		return fmt.Errorf("filesystem probe: %w", err)
	}
	res.FSMkdirMicroseconds = float64(cost) / float64(time.Microsecond)
	say("a directory takes %.0f µs of CPU to make in %s, on %s (recently freed inodes slow it: docs/PERFORMANCE.md)", res.FSMkdirMicroseconds, dir, fsName)
	if inMemory {
		say("WARNING: %s keeps its files in memory and fsync there returns at once: these figures are not a disk's (-allow-memory-fs)", fsName)
	}
	if ago, ok := hostprobe.SinceLastRemoval(filepath.Dir(dir)); ok {
		res.PreviousRunRemovedSecondsAgo = ago.Seconds()
		if ago < hostprobe.SettleTime {
			say("WARNING: a run removed its files from %s %s ago: the agents' directories made now pay for them (on ext4 without a journal, for up to %s): these figures are not a settled disk's", filepath.Dir(dir), ago.Round(time.Second), hostprobe.SettleTime)
		}
	}
	res.SpeedBefore = hostprobe.MeasureSpeed()
	say("the machine's speed: %s (internal/hostprobe)", res.SpeedBefore)
	return nil
}
