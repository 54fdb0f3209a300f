// Command etcd is the etcd server (go.etcd.io/etcd/server/v3's etcdmain) at
// the version the main module's etcd client and embedded server use. The
// fault tests (package faults, through e2etest) build it to run a real etcd
// cluster as separate processes; nothing else uses it.
//
// It owns only that build: no code of its own but the call to etcdmain. It
// is a module of its own so that the etcd server's extra dependencies stay
// out of the main module's go.mod and go.sum.
package main
