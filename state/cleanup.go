package state

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Cleanup item kinds as they appear in keys: cleanups/<kind>/<target>.
// Keys are deterministic, so asking twice writes one item.
const (
	cleanupServiceDying = "service-dying"
	cleanupUnitDying    = "unit-dying"
	cleanupForceUnit    = "force-unit"
	cleanupForceMachine = "force-machine"
	cleanupUnitTasks    = "unit-tasks"
)

func cleanupKindKey(k pb.CleanupKind) string {
	switch k {
	case pb.CleanupKind_CLEANUP_KIND_SERVICE_DYING:
		return cleanupServiceDying
	case pb.CleanupKind_CLEANUP_KIND_UNIT_DYING:
		return cleanupUnitDying
	case pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT:
		return cleanupForceUnit
	case pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE:
		return cleanupForceMachine
	case pb.CleanupKind_CLEANUP_KIND_UNIT_TASKS:
		return cleanupUnitTasks
	}
	return "unknown"
}

// forceItem adds to c the writing of a forced-removal item due after
// maxWait, unless one already exists that is due no later. It reports
// whether it wrote.
func (s *State) forceItem(c *change, existing *mvccpb.KeyValue, kind pb.CleanupKind, target string, maxWait time.Duration) bool {
	due := s.now().Add(maxWait).UnixNano()
	key := cleanupKey(cleanupKindKey(kind), target)
	old, err := decode[pb.Cleanup](existing)
	if err == nil && old != nil {
		if old.v.NotBeforeUnixNano <= due {
			return false
		}
		c.ifMod(key, old.mod)
	} else {
		c.ifMod(key, 0)
	}
	c.put(key, &pb.Cleanup{Kind: kind, Target: target, NotBeforeUnixNano: due})
	return true
}

// dyingPerTxn bounds a batch of units set dying together: four operations
// a unit.
const dyingPerTxn = 15

// dyingInFlight is how many batches setUnitsDying has in flight at once.
// One at a time, a service of 10,000 units took its 667 batches a read and
// a transaction each, queued behind its departing units' own calls, and
// most of the units waited their turn to start going.
const dyingInFlight = 8

// setUnitsDying sets those of the named units that are still alive dying,
// in small batches, a few at once, ahead of the writes queued for the
// State's slots (which soon are those units' own departures). An
// unassigned principal, which no agent will ever run, is removed instead.
func (s *State) setUnitsDying(ctx context.Context, units []string) error {
	ctx = WithPriority(ctx)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	turns := make(chan struct{}, dyingInFlight)
	for len(units) > 0 {
		batch := units[:min(len(units), dyingPerTxn)]
		units = units[len(batch):]
		select {
		case turns <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-turns }()
			if err := s.setBatchDying(ctx, batch); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// setBatchDying is setUnitsDying of one batch.
func (s *State) setBatchDying(ctx context.Context, batch []string) error {
	var unassigned []string
	err := s.apply(ctx, "set units dying", func(ctx context.Context) (*change, error) {
		unassigned = unassigned[:0]
		gets := make([]getOp, 0, 2*len(batch))
		for _, n := range batch {
			gets = append(gets, get(UnitKey(n)), getKeys(subordinatesPrefix(n), 1))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		for i, n := range batch {
			u, err := decode[pb.Unit](r.one(2 * i))
			if err != nil {
				return nil, err
			}
			if u == nil || u.v.Life != pb.Life_LIFE_ALIVE {
				continue
			}
			if u.v.MachineId == "" && u.v.Principal == "" {
				unassigned = append(unassigned, n)
				continue
			}
			unitDyingOps(c, u, r.one(2*i+1))
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		return c, nil
	})
	if err != nil {
		return err
	}
	for _, n := range unassigned {
		if err := s.DestroyUnit(ctx, n, DestroyOptions{}); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// forceUnit does a unit agent's whole job on its behalf: it sets the unit
// dying, forces its subordinates out, takes it out of every relation scope,
// sets it dead and removes it. Every step is a transaction of its own that
// checks its rule, so a crash between any two loses nothing and a rerun
// picks up where the last one stopped.
func (s *State) forceUnit(ctx context.Context, name string) error {
	u, err := s.unit(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.v.Life == pb.Life_LIFE_ALIVE {
		if err := s.DestroyUnit(ctx, name, DestroyOptions{}); err != nil {
			return ignoreNotFound(err)
		}
	}
	subs, err := s.Subordinates(ctx, name)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if err := s.forceUnit(ctx, sub); err != nil {
			return err
		}
	}
	scopes, err := s.UnitScopes(ctx, name)
	if err != nil {
		return err
	}
	for _, id := range scopes {
		if err := s.LeaveScope(ctx, id, name); err != nil {
			return err
		}
	}
	if err := s.EnsureUnitDead(ctx, name); err != nil {
		return ignoreNotFound(err)
	}
	return ignoreNotFound(s.RemoveUnit(ctx, name))
}

func ignoreNotFound(err error) error {
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
