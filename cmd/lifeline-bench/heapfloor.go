package main

import "runtime"

// agentHeapGoal is the heap a machine agent in a process of its own
// reaches before it first collects garbage: Go's least heap goal, 4 MiB at
// the default GOGC. An agent of ten units holds about a fifth of a MiB
// live, so each would collect seldom, if ever, in a run.
const agentHeapGoal = 4 << 20

// heapFloor makes this process, which runs the agents of n machines, collect
// garbage about as seldom as n processes of one agent each would, rather
// than whenever its heap doubles: with 1,000 machines' agents in it, the
// process held about 220 MiB live and collected every 220 MiB allocated,
// where each agent on a host of its own would have collected at 4 MiB, a
// thousand times the process's whole heap between them. It allocates a
// ballast of n*agentHeapGoal/2 bytes that it never touches: the collector
// counts it as live (the heap goal is twice what is live) but has nothing
// in it to scan, and the kernel gives it no memory until it is written,
// which it never is. Keep the returned function's closure alive (call it
// when the agents stop) so the ballast stays.
func heapFloor(n int) (release func()) {
	ballast := make([]byte, n*agentHeapGoal/2)
	return func() { runtime.KeepAlive(ballast) }
}
