// Package cputime reads the CPU time the process has used, for
// benchmarks that report it beside the wall time: on a loaded machine
// the wall time counts the waits for a core.
package cputime
