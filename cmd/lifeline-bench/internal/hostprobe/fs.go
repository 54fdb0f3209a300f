package hostprobe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The agents make a few directories and files a unit (its data
// directory, its charm's, the journal of its state): tens of thousands a
// run, each an inode to allocate. On ext4 without a journal (the
// reference machine of docs/PERFORMANCE.md), allocating one
// passes over every inode of its group freed in the last 30 s (five and a
// half minutes while their table block is not yet written back), which a
// destroyed run's units leave by the tens of thousands: a directory then
// took 120–330 µs of CPU to make, against 40–50 µs on a settled disk. So
// the harness measures it before it starts, as it measures raw etcd.

// fsProbeDirs is how many directories MkdirCost makes.
const fsProbeDirs = 300

// MkdirCost returns the CPU a directory takes to make under dir, over
// fsProbeDirs of them in 30 parents. The process must be otherwise idle:
// the CPU is the whole process's.
func MkdirCost(dir string) (time.Duration, error) {
	base, err := os.MkdirTemp(dir, "fs-probe-")
	if err != nil {
		return 0, err
	}
	// Left in place until the run's directory goes: removed now, they
	// would be freed inodes the agents' directories pass over.
	for i := range 30 {
		if err := os.Mkdir(filepath.Join(base, fmt.Sprint(i)), 0o700); err != nil {
			return 0, err
		}
	}
	start := processCPU()
	for i := range fsProbeDirs {
		if err := os.Mkdir(filepath.Join(base, fmt.Sprint(i%30), fmt.Sprint(i)), 0o700); err != nil {
			return 0, err
		}
	}
	return (processCPU() - start) / fsProbeDirs, nil
}

// A run removes its tens of thousands of files at its end, and on ext4
// without a journal the next run's agents, making theirs in the same
// block groups, pay for them for minutes (find_inode_bit passes over
// every inode freed in the last minute, or in the last six while its
// inode table block waits to be written back). So a run that removes its
// directory leaves the time beside it, and the next run in the same
// parent says how long ago that was: runs minutes apart in one directory
// are not comparable with runs on a settled disk.

// removedStampName is the file, in the parent of a run's directory, that
// holds when the last run there removed its directory.
const removedStampName = ".lifeline-bench-removed"

// SettleTime is how long after a removal the disk counts as settled.
const SettleTime = 6 * time.Minute

// RemoveRunDir removes a run's directory and leaves the time beside it.
func RemoveRunDir(dir string) {
	os.RemoveAll(dir)
	stamp := filepath.Join(filepath.Dir(dir), removedStampName)
	_ = os.WriteFile(stamp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
}

// SinceLastRemoval returns how long ago a run removed its directory from
// parent, when the harness left the time there; false when it did not.
func SinceLastRemoval(parent string) (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(parent, removedStampName))
	if err != nil {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return time.Since(t), true
}
