// Package embedetcd starts the single-member etcd server that a controller
// runs in its data directory when no external cluster is given, and that the
// tests run in a temporary directory.
//
// It owns the server's configuration, the client that calls the member in
// the same process (Server.Client: reads answered from the member's store,
// writes through its request handler and raft), the client of a member or
// cluster over a connection (NewClient), the bridge from etcd's zap
// logger into hclog, and the member's database space (Server.Keep and
// Space: compaction to a bounded history, defragmentation, and recovery
// from the NOSPACE alarm, within the member's quota). It decides no key to
// read or write: that is package state's job. State's etcd seam
// (state/internal/etcdkv) builds its requests itself and finds the member's
// handler through the in-process client's KV (its Remote method), without
// importing this package.
package embedetcd
