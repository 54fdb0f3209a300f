// Package poll is how tests wait for what the code under test brings
// about in its own time: a watch delivering, an agent reporting, a process
// starting. There is one way to wait, and its bound is generous: a test
// says what should happen, not how fast (speed is measured by the
// benchmarks), and a loaded 2-core machine running the race detector is
// slow.
package poll
