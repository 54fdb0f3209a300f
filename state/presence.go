package state

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/names"
)

// presence/<tag> exists while the agent with that tag is connected: the
// key is bound to an etcd lease that the controller keeps alive for as long
// as the agent's presence stream lives, and that expires on its own if the
// controller dies.
const presencePrefix = "presence/"

func presenceKey(tag string) string { return presencePrefix + tag }

// Presence is an agent's presence key, held until Close.
type Presence struct {
	lease  clientv3.Lease
	id     clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{}
}

// Present makes the agent with tag present until the returned Presence is
// closed, or until ttl after this process stops keeping it (a crash).
func (s *State) Present(ctx context.Context, tag string, ttl time.Duration) (*Presence, error) {
	if _, _, err := names.ParseTag(tag); err != nil {
		return nil, invalidf("%v", err)
	}
	p, err := s.leased(ctx, presenceKey(tag), "", ttl)
	if err != nil {
		return nil, fmt.Errorf("presence of %s: %w", tag, err)
	}
	return p, nil
}

// leased puts key with value bound to a new lease of ttl (at least a
// second) that it keeps alive until the returned Presence is closed.
func (s *State) leased(ctx context.Context, key, value string, ttl time.Duration) (*Presence, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	grant, err := s.lease.Grant(ctx, secs)
	if err != nil {
		return nil, err
	}
	if _, err := s.kv.Put(ctx, key, value, clientv3.WithLease(grant.ID)); err != nil {
		s.lease.Revoke(context.Background(), grant.ID)
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.lease.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		s.lease.Revoke(context.Background(), grant.ID)
		return nil, err
	}
	p := &Presence{lease: s.lease, id: grant.ID, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for range ch { // keepalive answers; the channel closes when it stops
		}
	}()
	return p, nil
}

// Close ends the presence at once.
func (p *Presence) Close() {
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.lease.Revoke(ctx, p.id)
}

// Lost reports whether the presence lapsed on its own (its lease could not
// be kept alive): the agent should be told to reconnect.
func (p *Presence) Lost() <-chan struct{} { return p.done }

// Presences returns the tags of the agents present now.
func (s *State) Presences(ctx context.Context) (map[string]bool, error) {
	kvs, err := s.listAll(ctx, presencePrefix, true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		out[strings.TrimPrefix(string(kv.Key), presencePrefix)] = true
	}
	return out, nil
}
