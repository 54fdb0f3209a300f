// Package e2etest runs the real binaries for end-to-end tests: it builds
// ctl and lifelined (and the demo charms, and the etcd server of
// tools/etcd), gives each test a sandbox (a short temporary directory with
// its client config, its controllers and their local machines, and a
// teardown that stops everything started there and fails the test if any
// process outlives it; if the test binary dies first, the processes it
// started there die with it (their parent-death signal: starter.go), and a
// reaper process ends what those started in turn; StartChild does the
// same for a test's own processes outside a sandbox), runs ctl and decodes
// its status, finds the processes of machines and units, and runs a real
// etcd cluster as separate processes over TLS; JoinMachine joins a manual
// machine as its agent would, for tests that call as the machine.
//
// Only tests import it (e2e, faults); production code never does.
package e2etest
