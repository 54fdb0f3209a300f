// Package etcdtest gives each test package one real embedded etcd server
// (unix socket, 10 ms tick, no fsync unless MainWith asks for it, data in a
// temporary directory) and each test its own key namespace on it.
//
// Only tests import it; production code never does.
package etcdtest
