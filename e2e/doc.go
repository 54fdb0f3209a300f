// Package e2e holds the end-to-end tests: the real ctl and lifelined binaries, the local provider, the demo charms.
//
// Most tests wait on hooks, agents and timeouts rather than the CPU, and
// run in parallel (TestMain sets how many at once): each has a sandbox of
// its own (e2etest.Sandbox: its directory, its controllers' ports, its
// loopback network for the local machines and the manual ones it starts).
// The few that hold a short timeout against a loaded machine, watch for
// a moment in a busy loop, or kill a leading controller mid-rollout stay
// serial and say so. The tests that put controllers on an etcd of their
// own run its member as a process (startOnEtcd), not in the test binary.
package e2e
