package modelcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// Config configures a Cache.
type Config struct {
	// Hub is the controller's watch hub, which the cache follows; its
	// caller runs it.
	Hub    *watchhub.Hub
	Logger hclog.Logger
	// Idle is how long the cache is kept after the last Model call; 5
	// minutes when zero.
	Idle time.Duration
	// Wait bounds how long Model waits for the cache to reach the
	// revision asked for; 2 s when zero.
	Wait time.Duration
	// Progress asks etcd to report the current revision to the hub's
	// watch (state.State.RequestProgress), when a caller waits for a
	// revision the hub has not handed out: a write outside the model's
	// namespace moves etcd's revision without a change the hub sees.
	// None when nil: such a caller waits for the next change, or its
	// Wait.
	Progress func(context.Context) error
	// Budget bounds the bytes of changes the hub holds for the cache's
	// streams (watchhub.Budget); past it the keeper is cut, and lists
	// again when next wanted. 64 MiB when zero.
	Budget int64
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case c.Hub == nil:
		return errors.New("modelcache: no watch hub")
	case c.Idle < 0 || c.Wait < 0 || c.Budget < 0:
		return errors.New("modelcache: negative bound")
	}
	return nil
}

// Why Model cannot answer; the caller reads etcd instead.
var (
	// ErrNotRunning: Run is not running (or ended: the hub stopped).
	ErrNotRunning = errors.New("model cache not running")
	// ErrStarting: the keeper is starting, or listing the model.
	ErrStarting = errors.New("model cache starting")
	// ErrBehind: the cache did not reach the revision asked for within
	// Config.Wait.
	ErrBehind = errors.New("model cache behind")
)

// Stats are the cache's state and counts so far.
type Stats struct {
	// Keeping says a keeper runs (or was asked to start), Ready that it
	// holds the model, at Revision.
	Keeping, Ready bool
	Revision       int64
	// Starts counts the keepers started, IdleStops those stopped for
	// want of calls, Failures those that ended on an error (a budget
	// cut, a read that failed, a value that does not decode).
	Starts, IdleStops, Failures int64
	// Served counts the models Model returned, Behind the calls that
	// gave up waiting (ErrBehind).
	Served, Behind int64
}

// Cache keeps the model decoded from the watch hub's changes while it is
// wanted. Run runs it; Model asks it.
type Cache struct {
	cfg Config
	// wanted tells Run to start a keeper; poke wakes the keeper (a
	// stream has news, a caller waits, a budget was cut).
	wanted chan struct{}
	poke   chan struct{}

	mu sync.Mutex
	// running says Run runs, keeping that a keeper runs or is wanted.
	running, keeping bool
	// b is the keeper's model at rev, nil until its first cut; snap the
	// latest Model made of it.
	b    *state.ModelBuilder
	rev  int64
	snap *state.Model
	// kept is what a caller made of snap (Keep), dropped when snap
	// changes.
	kept any
	// waitFor is the latest revision a caller waited for; moved is closed
	// (and replaced) whenever rev moves or the keeper stops.
	waitFor int64
	moved   chan struct{}
	// used is when Model was last called.
	used  time.Time
	stats Stats
}

// New returns a Cache; Run runs it.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Idle == 0 {
		cfg.Idle = 5 * time.Minute
	}
	if cfg.Wait == 0 {
		cfg.Wait = 2 * time.Second
	}
	if cfg.Budget == 0 {
		cfg.Budget = 64 << 20
	}
	return &Cache{cfg: cfg, wanted: make(chan struct{}, 1), poke: make(chan struct{}, 1), moved: make(chan struct{})}, nil
}

// Stats returns the cache's state and counts.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Keeping, s.Ready, s.Revision = c.keeping, c.b != nil, c.rev
	return s
}

// Run starts a keeper whenever Model wants one, and waits for it to end
// (idle, or on an error), until ctx ends or the hub stops. Model answers
// only while Run runs.
func (c *Cache) Run(ctx context.Context) {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.Hub.Done():
			return
		case <-c.wanted:
		}
		err := c.keep(ctx)
		c.stop(err)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-c.cfg.Hub.Done():
			return
		default:
		}
		if err != nil && !errors.Is(err, errIdle) {
			c.cfg.Logger.Debug("model cache stopped; status reads etcd until it lists again", "error", err)
			// The next call starts it again, not at once: what cut it may
			// still be going on.
			if !pause.For(ctx, time.Second) {
				return
			}
		}
	}
}

// stop records that the keeper ended: its model is dropped.
func (c *Cache) stop(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, errIdle):
		c.stats.IdleStops++
	case err != nil && !errors.Is(err, context.Canceled):
		c.stats.Failures++
	}
	c.keeping, c.b, c.snap, c.kept, c.rev, c.waitFor = false, nil, nil, nil, 0, 0
	close(c.moved)
	c.moved = make(chan struct{})
}

// errIdle ends a keeper no call asked for within Config.Idle.
var errIdle = errors.New("idle")

// Model returns the model at a revision at or past rev, from the cache,
// waiting up to Config.Wait for it to get there; or says why it cannot
// (ErrNotRunning, ErrStarting, ErrBehind, ctx's error). The first call
// starts a keeper, and answers ErrStarting until it has listed the
// model. The model returned is shared: read it only.
func (c *Cache) Model(ctx context.Context, rev int64) (*state.Model, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running {
		return nil, ErrNotRunning
	}
	c.used = time.Now()
	if !c.keeping {
		c.keeping = true
		c.stats.Starts++
		select {
		case c.wanted <- struct{}{}:
		default:
		}
		return nil, ErrStarting
	}
	var timeout <-chan time.Time
	for c.b == nil || c.rev < rev {
		if c.b == nil {
			return nil, ErrStarting
		}
		if timeout == nil {
			t := time.NewTimer(c.cfg.Wait)
			defer t.Stop()
			timeout = t.C
		}
		c.waitFor = max(c.waitFor, rev)
		moved := c.moved
		c.mu.Unlock()
		c.wake()
		var err error
		select {
		case <-moved:
		case <-timeout:
			err = ErrBehind
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		if err == ErrBehind {
			c.stats.Behind++
			return nil, fmt.Errorf("%w: at revision %d after %s, revision %d asked for", ErrBehind, c.rev, c.cfg.Wait, rev)
		}
		if err != nil {
			return nil, err
		}
	}
	if c.snap == nil || c.snap.Revision != c.rev {
		if c.b.Changed() {
			c.kept = nil
		}
		c.snap = c.b.Model(c.rev)
	}
	c.stats.Served++
	return c.snap, nil
}

// Keep keeps v beside m while m is the model the cache hands out, for
// Kept: what a caller makes of a model (the controller's status of it)
// is made once while the model does not change, and dropped with it. A
// model the cache hands out at a later revision with nothing changed
// (the revision moved by writes elsewhere) keeps it: v must not depend
// on the model's revision. A model the cache no longer hands out (or
// never did) keeps nothing.
func (c *Cache) Keep(m *state.Model, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m != nil && m == c.snap {
		c.kept = v
	}
}

// Kept returns what Keep kept beside m, while m is the model the cache
// hands out; nil otherwise.
func (c *Cache) Kept(m *state.Model) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m == nil || m != c.snap {
		return nil
	}
	return c.kept
}

// wake wakes the keeper. The hub calls it with its lock held: it returns
// at once.
func (c *Cache) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// idle says whether no call asked for the model within Config.Idle.
func (c *Cache) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.used) > c.cfg.Idle
}
