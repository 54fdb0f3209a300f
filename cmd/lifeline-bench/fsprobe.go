package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The agents make a few directories and files a unit (its data
// directory, its charm's, the journal of its state): tens of thousands a
// run, each an inode to allocate. On ext4 without a journal (this
// harness's VM, docs/PERFORMANCE.md, twelfth round), allocating one
// passes over every inode of its group freed in the last 30 s (five and a
// half minutes while their table block is not yet written back), which a
// destroyed run's units leave by the tens of thousands: a directory then
// took 120–330 µs of CPU to make, against 40–50 µs on a settled disk. So
// the harness measures it before it starts, as it measures raw etcd.

// fsProbeDirs is how many directories mkdirCost makes.
const fsProbeDirs = 300

// mkdirCost returns the CPU a directory takes to make under dir, over
// fsProbeDirs of them in 30 parents. The process must be otherwise idle:
// the CPU is the whole process's.
func mkdirCost(dir string) (time.Duration, error) {
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
	start := currentUsage().cpu
	for i := range fsProbeDirs {
		if err := os.Mkdir(filepath.Join(base, fmt.Sprint(i%30), fmt.Sprint(i)), 0o700); err != nil {
			return 0, err
		}
	}
	return (currentUsage().cpu - start) / fsProbeDirs, nil
}
