// Package bench holds Go benchmarks of the state package's core operations
// (adding units, assigning them, entering a relation's scope, taking a unit
// from alive to removed) beside raw etcd put-if-absent transactions at the
// same concurrency, against one embedded etcd member with fsync on.
// docs/PERFORMANCE.md records their figures and the ratio between them;
// `make bench` runs them.
//
// It has no production code: everything is in its _test.go files, and
// nothing imports it.
package bench
