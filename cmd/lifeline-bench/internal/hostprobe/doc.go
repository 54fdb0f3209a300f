// Package hostprobe measures the host lifeline-bench runs on, apart from
// Lifeline: the kind of filesystem of the run's directory (Filesystem),
// the CPU a directory takes to make there (MkdirCost), how long ago the
// run before removed its files beside it (RemoveRunDir, SinceLastRemoval),
// and the machine's speed by two fixed pieces of work (MeasureSpeed). The
// harness records them beside its figures, so that runs on a slower
// stretch of the machine or an unsettled disk can be told apart
// (docs/PERFORMANCE.md). It knows nothing of Lifeline and starts no
// goroutines; every probe uses this process's CPU, which must be
// otherwise idle.
package hostprobe
