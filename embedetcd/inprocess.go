package embedetcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// inProcessClient is a client that calls the member's request handlers
// directly (etcd's v3client): no socket, no HTTP/2 framing and no
// protobuf encoding between the controller and its own member.
//
// Its watches copy each event before handing it on. In process, every
// watcher of a key receives the same event in memory, and the namespace
// wrapper (clientv3/namespace, as package state uses it) strips its prefix
// from the event's key in place: without the copy a second watcher of the
// key would see it stripped twice.
func inProcessClient(s *Server) *clientv3.Client {
	c := v3client.New(s.etcd.Server)
	c.Watcher = copyingWatcher{c.Watcher}
	return c
}

type copyingWatcher struct{ clientv3.Watcher }

func (w copyingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for resp := range in {
			evs := make([]*clientv3.Event, len(resp.Events))
			for i, ev := range resp.Events {
				cp := *ev
				if ev.Kv != nil {
					kv := *ev.Kv
					cp.Kv = &kv
				}
				if ev.PrevKv != nil {
					kv := *ev.PrevKv
					cp.PrevKv = &kv
				}
				evs[i] = &cp
			}
			resp.Events = evs
			select {
			case out <- resp:
			case <-ctx.Done():
				// The watcher closes in once ctx ends; drain it until then.
			}
		}
	}()
	return out
}
