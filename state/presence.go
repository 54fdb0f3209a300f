package state

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
)

// presence/<tag> exists while the agent with that tag is connected: the
// controller serving the agent's presence stream puts it, and deletes it
// when the stream ends. It is bound to an etcd lease the controller keeps
// alive, one for all the presence keys it holds, so that they go on their
// own if the controller dies.
//
// Why one lease and not one an agent: revoking a lease deletes it from
// etcd's backend, and etcd commits its backend at once after any such
// delete, an fsync that holds up applying every other write while it
// runs; deleting a key is an ordinary write. A thousand machines' agents
// going as a destroy ends would make a thousand of those commits.
const presencePrefix = "presence/"

func presenceKey(tag string) string { return presencePrefix + tag }

// PresencePrefix is where the presence keys are, for watching them: the
// key of tag's presence is PresencePrefix+tag, its value the instance of
// the agent holding it ("" for one that names none).
const PresencePrefix = presencePrefix

// Presence is a key held until Close: an agent's presence, or a
// controller's registration (RegisterController).
type Presence struct {
	close func()
	lost  <-chan struct{}
	rev   int64
}

// Revision is the revision at which the key was put.
func (p *Presence) Revision() int64 { return p.rev }

// Close ends the presence at once.
func (p *Presence) Close() { p.close() }

// Lost reports whether the presence lapsed on its own (its lease could not
// be kept alive): the agent should be told to reconnect.
func (p *Presence) Lost() <-chan struct{} { return p.lost }

// Present makes the agent with tag present until the returned Presence is
// closed, or until ttl after this process stops keeping it (a crash).
func (s *State) Present(ctx context.Context, tag string, ttl time.Duration) (*Presence, error) {
	return s.PresentAs(ctx, tag, PresenceClaim{}, ttl)
}

// PresenceClaim names the agent process that claims a presence.
type PresenceClaim struct {
	// Instance is the agent process's: random, new each time it starts.
	// None leaves the presence unfenced.
	Instance string
	// Previous is the instance of the agent that ran before it with the
	// same data directory, if it knows one.
	Previous string
}

// presenceTries bounds PresentAs's attempts when the key changes between
// its read and its write.
const presenceTries = 8

// PresentAs is Present for the agent instance claim names, fenced: the
// key holds the instance, and is taken only when it is absent, holds this
// instance (the agent reconnecting, through this controller or another),
// or holds claim.Previous (the agent restarted, taking over from its own
// previous run at once rather than when that one's presence lapses). Held
// by any other, it is refused (ErrRefused) for as long as that one is
// present: one agent process a machine. The key's read, the decision and
// its write are one transaction (the write compares the key as read).
func (s *State) PresentAs(ctx context.Context, tag string, claim PresenceClaim, ttl time.Duration) (*Presence, error) {
	kind, id, err := names.ParseTag(tag)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	l, err := s.presences.acquire(ctx, s.lease, ttl)
	if err != nil {
		return nil, fmt.Errorf("presence of %s: %w", tag, err)
	}
	key := presenceKey(tag)
	var rev int64
	for try := 0; ; try++ {
		if claim.Instance == "" {
			put, err := s.kv.Put(ctx, key, "", clientv3.WithLease(l.id))
			if err != nil {
				s.presences.release(l)
				return nil, fmt.Errorf("presence of %s: %w", tag, err)
			}
			rev = put.Header.Revision
			break
		}
		got, err := s.kv.Get(ctx, key)
		if err != nil {
			s.presences.release(l)
			return nil, fmt.Errorf("presence of %s: %w", tag, err)
		}
		cond := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(got.Kvs) > 0 {
			held := string(got.Kvs[0].Value)
			if held != claim.Instance && (claim.Previous == "" || held != claim.Previous) {
				s.presences.release(l)
				return nil, refused("presence", "another agent of %s %s is present (instance %q): a second one is refused while it is", kind, id, held)
			}
			cond = clientv3.Compare(clientv3.ModRevision(key), "=", got.Kvs[0].ModRevision)
		}
		resp, err := s.kv.Txn(ctx).If(cond).Then(clientv3.OpPut(key, claim.Instance, clientv3.WithLease(l.id))).Commit()
		if err != nil {
			s.presences.release(l)
			return nil, fmt.Errorf("presence of %s: %w", tag, err)
		}
		if resp.Succeeded {
			rev = resp.Header.Revision
			break
		}
		if try+1 == presenceTries {
			s.presences.release(l)
			return nil, fmt.Errorf("presence of %s: %w", tag, ErrAborted)
		}
	}
	var once sync.Once
	return &Presence{lost: l.done, rev: rev, close: func() {
		once.Do(func() {
			s.deletePresence(key, rev, ttl)
			s.presences.release(l)
		})
	}}, nil
}

// presenceDeleteTimeout bounds each try of deletePresence (a test's
// State may take less: State.presenceDeleteTimeout).
const presenceDeleteTimeout = 5 * time.Second

// deletePresence deletes the presence key as a presence put it, at rev
// (the agent may be present through another controller since, which put
// it again). A delete that fails (etcd out of reach) is tried again, for
// up to ttl: the lease is shared with this controller's other presences,
// which keep it alive, so a key left behind would say the agent is
// present for as long as any other agent is. It gives up at once when the
// client is closed.
func (s *State) deletePresence(key string, rev int64, ttl time.Duration) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(ttl))
	backoff.Retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(s.presenceDeleteTimeout, presenceDeleteTimeout))
		defer cancel()
		_, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled) {
			return backoff.Permanent(err)
		}
		return err
	}, bo)
}

// presenceLeases are the leases a State holds its agents' presence keys
// on: one for each ttl asked for (a controller asks for one), granted when
// the first presence comes and revoked when the last goes.
type presenceLeases struct {
	mu     sync.Mutex
	leases map[time.Duration]*presenceLease
}

type presenceLease struct {
	lease  clientv3.Lease
	id     clientv3.LeaseID
	ttl    time.Duration
	users  int
	cancel context.CancelFunc
	// done is closed once the lease is no longer kept alive: revoked
	// with its last user gone, or lapsed.
	done chan struct{}
}

// acquire returns the lease for ttl, granting it if there is none or the
// one there lapsed, with one more user.
func (p *presenceLeases) acquire(ctx context.Context, lease clientv3.Lease, ttl time.Duration) (*presenceLease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.leases[ttl]; l != nil {
		l.users++
		return l, nil
	}
	var l *presenceLease
	l, err := keptLease(ctx, lease, ttl, func() {
		// Revoked, or lapsed: the next presence gets a new lease.
		p.mu.Lock()
		if p.leases[ttl] == l {
			delete(p.leases, ttl)
		}
		p.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	l.users = 1
	if p.leases == nil {
		p.leases = map[time.Duration]*presenceLease{}
	}
	p.leases[ttl] = l
	return l, nil
}

// release drops a user of l, and revokes it once it has none.
func (p *presenceLeases) release(l *presenceLease) {
	p.mu.Lock()
	l.users--
	last := l.users == 0
	if last && p.leases[l.ttl] == l {
		delete(p.leases, l.ttl)
	}
	p.mu.Unlock()
	if last {
		l.end()
	}
}

// keptLease grants a lease of ttl (at least a second) and keeps it alive
// until end; once it is no longer kept alive (ended, or lapsed), it calls
// ended, then closes done.
func keptLease(ctx context.Context, lease clientv3.Lease, ttl time.Duration, ended func()) (*presenceLease, error) {
	grant, err := lease.Grant(ctx, max(int64(ttl/time.Second), 1))
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := lease.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		lease.Revoke(context.Background(), grant.ID)
		return nil, err
	}
	l := &presenceLease{lease: lease, id: grant.ID, ttl: ttl, cancel: cancel, done: make(chan struct{})}
	go func() {
		for range ch { // keepalive answers; the channel closes when it stops
		}
		if ended != nil {
			ended()
		}
		close(l.done)
	}()
	return l, nil
}

// end stops keeping l alive and revokes it.
func (l *presenceLease) end() {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.lease.Revoke(ctx, l.id)
}

// leased puts key with value bound to a new lease of ttl (at least a
// second) that it keeps alive until the returned Presence is closed.
func (s *State) leased(ctx context.Context, key, value string, ttl time.Duration) (*Presence, error) {
	l, err := keptLease(ctx, s.lease, ttl, nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.kv.Put(ctx, key, value, clientv3.WithLease(l.id)); err != nil {
		l.end()
		return nil, err
	}
	var once sync.Once
	return &Presence{lost: l.done, close: func() { once.Do(l.end) }}, nil
}

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
