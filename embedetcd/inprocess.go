package embedetcd

import (
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
)

// inProcessClient is a client of the member whose reads and transactions
// call the member's request handler directly, as etcd's v3client does: no
// socket, no HTTP/2 framing and no protobuf encoding between the
// controller and its own member. That is where a controller's calls to
// etcd go (a third of its CPU at 10,000 units went to the transport).
//
// Its watches and leases go through the socket. etcd's in-process adapter
// for streams joins client and server with unbuffered channels: when the
// client sends a watch request while the server is sending it events, both
// can wait for each other for good. At 10,000 units the watch hub's watch
// stopped that way and no machine agent heard that its machine was dying
// (TestInProcessClientWatchesChurn). In process, too, every watcher of a
// key would be handed the same event in memory, which the namespace
// wrapper package state uses rewrites in place; over the socket each
// watcher decodes its own.
func inProcessClient(s *Server) (*clientv3.Client, error) {
	c, err := NewClient(clientv3.Config{Endpoints: []string{s.endpoint}})
	if err != nil {
		return nil, err
	}
	c.KV = clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(s.etcd.Server)), c)
	return c, nil
}
