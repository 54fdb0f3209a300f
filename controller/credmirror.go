package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// credMirror is the controller's copy of every stored credential hash,
// kept current by one stream of the watch hub, so that a call carrying a
// valid credential costs no etcd read: at 10,000 units that read was the
// largest single item of the controller's CPU (7–8%).
//
// It only ever says "this hash is stored for tag". A tag it lacks, or a
// secret that does not verify against its hash, is looked up in etcd as
// before, so a credential just issued works at once. The price, chosen
// deliberately: a revoked or replaced credential still authenticates
// until the hub's watch brings its deletion or replacement, milliseconds
// after the commit (seconds under heavy load). Until its first listing,
// and after the hub stops, it knows nothing and every call reads etcd.
type credMirror struct {
	hub    *watchhub.Hub
	logger hclog.Logger

	mu     sync.RWMutex
	ready  bool
	hashes map[string]string // by tag
}

func newCredMirror(hub *watchhub.Hub, logger hclog.Logger) *credMirror {
	return &credMirror{hub: hub, logger: logger}
}

// lookup returns the hash stored for tag, if the mirror holds one.
func (m *credMirror) lookup(tag string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ready {
		return "", false
	}
	h, ok := m.hashes[tag]
	return h, ok
}

// run follows the credentials until ctx ends or the hub stops.
func (m *credMirror) run(ctx context.Context) {
	followPrefix(ctx, m.hub, state.CredentialsPrefix, "credential mirror", "every call reads them", m.logger, m.apply, m.forget)
}

// followPrefix gives apply every batch of the hub's changes under prefix
// until ctx ends or the hub stops, and calls forget when a listing fails
// (the stream lists again; meanwhile the copy knows nothing) and at the
// end. what names the copy in the log, and without says what its users
// do without it.
func followPrefix(ctx context.Context, hub *watchhub.Hub, prefix, what, without string, logger hclog.Logger, apply func(state.WatchBatch), forget func()) {
	defer forget()
	s, err := hub.Watch(ctx, prefix, 0)
	if err != nil {
		logger.Warn(what+": cannot watch its keys; "+without, "error", err)
		return
	}
	defer s.Close()
	for {
		b, err := s.Next(ctx)
		if errors.Is(err, watchhub.ErrClosed) || ctx.Err() != nil {
			return
		}
		if err != nil {
			forget()
			logger.Debug(what+": listing failed; retrying", "error", err)
			if !pause.For(ctx, time.Second) {
				return
			}
			continue
		}
		apply(b)
	}
}

func (m *credMirror) apply(b state.WatchBatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.Reset {
		m.hashes = make(map[string]string, len(b.Events))
		m.ready = true
	}
	if !m.ready {
		return
	}
	for _, e := range b.Events {
		tag := strings.TrimPrefix(e.Key, state.CredentialsPrefix)
		if e.Type == state.EventDelete {
			delete(m.hashes, tag)
		} else {
			m.hashes[tag] = string(e.Value)
		}
	}
}

// forget empties the mirror until its next listing.
func (m *credMirror) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready, m.hashes = false, nil
}
