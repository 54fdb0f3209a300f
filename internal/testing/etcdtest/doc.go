// Package etcdtest gives each test package one real embedded etcd server
// (unix socket, 10 ms tick, no fsync unless MainWith asks for it, data in a
// temporary directory) and each test its own key namespace on it.
//
// Its client is the member's in-process one (embedetcd.Server.Client),
// unless the test binary runs with -etcdtest.backend=client: then a plain
// clientv3 client over the member's socket (embedetcd.NewClient), the
// client a controller of an external cluster has. Package state's tests
// run with both (make test).
//
// CutProxy stands between a client and a member, and cuts them apart on
// demand: etcd out of reach, as a partition would have it.
//
// Only tests import it; production code never does.
package etcdtest
