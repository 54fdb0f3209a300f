// Package faults is the fault suite: end-to-end tests that inject faults
// into real processes (the ctl and lifelined binaries, a 3-member etcd
// cluster of separate processes over TLS with client certificates, machine
// agents of the local provider) and check that the model converges and
// that nothing is lost or duplicated:
//
//   - the etcd leader killed (SIGKILL) during a deploy and during a destroy;
//   - machine agents killed (SIGKILL) every few seconds and restarted as
//     systemd would, during a deploy, relate and destroy workload, with
//     hooks also failing on purpose;
//   - machine agents partitioned from the controller (SIGSTOP) and healed
//     (SIGCONT);
//   - a client sending random well-formed requests to every
//     OperatorService RPC;
//   - of two controllers sharing the model, the one running the singleton
//     workers killed (SIGKILL): the other leads within 15 s, the agents
//     reconnect to it, and the model keeps working;
//   - resource attacks: a flood of idle connections without a credential,
//     and one machine credential's watch streams never read while its
//     unit rewrites large settings: another agent's calls keep answering,
//     the operator can destroy, and the controller's memory returns
//     within twice its baseline;
//   - the teardown soak: random topologies of the demo charms (kv, app
//     and the logger subordinate, 2 to 4 services, related at random)
//     destroyed in random orders (relations, units, services, machines,
//     some forced, some while still deploying), each to an empty model
//     with no unit in error and no process of a removed unit left on its
//     host. Each topology comes from a seed, logged; -faults.seed replays
//     one.
//
// After each, the model's invariants are checked (state.CheckInvariants on
// a snapshot, and statetest.Monitor at every committed revision), through
// an etcd client of the test's own.
//
// By default (go test ./..., make test) the scenarios run once at a small
// size (the teardown soak: 3 topologies of up to 4 units a service). make
// test-faults runs them at full size (-faults.full; the teardown soak: 50
// topologies of up to 12 units a service), and
// make test-faults SOAK=30m loops them for that long (-faults.soak).
// -faults.summary FILE writes what was injected, the recovery times and
// what was checked as JSON; docs/RELIABILITY.md records the figures.
//
// Nothing here is imported.
package faults
