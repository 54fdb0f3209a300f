package state

import (
	"context"
	"sync"
)

// keyLocks serializes, within this process, the writers of a key that
// every caller of an operation writes (an id sequence): they queue here
// rather than collide in etcd, fail their comparisons and back off, which
// at a few dozen concurrent callers costs more than the transactions. The
// comparisons stay: writers in other processes (another controller) are
// still caught by them.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch    chan struct{} // holds a token while the key is locked
	users int           // holders and waiters, to forget idle keys
}

// lock locks key until the returned function is called, or fails when ctx
// ends first.
func (k *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.users++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
