package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Cleaner works off cleanup items: it carries destroy-service and forced
// removals through to the end in bounded steps, as a backstop for agents
// that are absent. Every step is idempotent and an item is deleted only
// once its work is done, so a Cleaner may crash anywhere and a new one
// resumes. Two Cleaners running at once are safe, merely wasteful.
type Cleaner struct {
	st     *State
	logger hclog.Logger
	poll   time.Duration
}

// NewCleaner returns a cleaner of st's items that, besides reacting to new
// items, looks again every poll interval (5 s when zero).
func NewCleaner(st *State, poll time.Duration) *Cleaner {
	if poll == 0 {
		poll = 5 * time.Second
	}
	return &Cleaner{st: st, logger: st.cfg.Logger.Named("cleaner"), poll: poll}
}

// Run works items until ctx ends.
func (c *Cleaner) Run(ctx context.Context) error {
	events := c.st.Watch(ctx, cleanupsPrefix, 0)
	for {
		next, err := c.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			c.logger.Warn("cleanup pass failed", "error", err)
		}
		wait := c.poll
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-events:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// Pass works every item once, deleting those that are done. It returns
// when the earliest item that is waiting for its time falls due (zero when
// none waits). A failing item is logged and left for the next pass.
func (c *Cleaner) Pass(ctx context.Context) (time.Time, error) {
	kvs, err := c.st.listAll(ctx, cleanupsPrefix, false)
	if err != nil {
		return time.Time{}, err
	}
	var next time.Time
	var errs []error
	for _, kv := range kvs {
		item, err := decode[pb.Cleanup](kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		due, err := c.work(ctx, item.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: %w", item.key, err))
			continue
		}
		if !due.IsZero() {
			if next.IsZero() || due.Before(next) {
				next = due
			}
			continue
		}
		// Done. Delete the item unless it changed meanwhile (a second
		// --force with a shorter wait): then it is worked again.
		d := &change{}
		d.ifMod(item.key, item.mod)
		d.del(item.key)
		if _, err := c.st.commit(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return next, errors.Join(errs...)
}

// work does an item's work. It returns a zero time when the work is done,
// or the time at which the item wants working again.
func (c *Cleaner) work(ctx context.Context, item *pb.Cleanup) (time.Time, error) {
	st := c.st
	due := time.Unix(0, item.NotBeforeUnixNano)
	waiting := st.now().Before(due)
	switch item.Kind {
	case pb.CleanupKind_CLEANUP_KIND_SERVICE_DYING:
		return time.Time{}, st.cleanService(ctx, item.Target)
	case pb.CleanupKind_CLEANUP_KIND_UNIT_DYING:
		subs, err := st.Subordinates(ctx, item.Target)
		if err != nil {
			return time.Time{}, err
		}
		return time.Time{}, st.setUnitsDying(ctx, subs)
	case pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT:
		if waiting {
			return due, nil
		}
		c.logger.Info("forcing unit out", "unit", item.Target)
		return time.Time{}, st.forceUnit(ctx, item.Target)
	case pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE:
		return st.forceMachine(ctx, item.Target, waiting, due)
	case pb.CleanupKind_CLEANUP_KIND_UNIT_TASKS:
		return time.Time{}, st.stopUnitTasks(ctx, item.Target)
	}
	return time.Time{}, fmt.Errorf("unknown cleanup kind %v", item.Kind)
}

// cleanService sets a dying service's alive units dying (each agent would
// do it for its own unit) and its relations dying.
func (s *State) cleanService(ctx context.Context, name string) error {
	if _, err := s.service(ctx, name); err != nil {
		return ignoreNotFound(err)
	}
	kvs, err := s.listAll(ctx, ServiceUnitsPrefix(name), true)
	if err != nil {
		return err
	}
	units := make([]string, len(kvs))
	for i, kv := range kvs {
		units[i] = lastTwo(string(kv.Key))
	}
	if err := s.setUnitsDying(ctx, units); err != nil {
		return err
	}
	rels, err := s.ServiceRelations(ctx, name)
	if err != nil {
		return err
	}
	for _, id := range rels {
		if err := s.destroyRelation(ctx, id, true); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// forceMachine sets a forced machine's units dying at once and, once the
// wait is over, forces them out and sets the machine dead for the
// provisioner.
func (s *State) forceMachine(ctx context.Context, id string, waiting bool, due time.Time) (time.Time, error) {
	m, err := s.machine(ctx, id)
	if err != nil {
		return time.Time{}, ignoreNotFound(err)
	}
	if m.v.Life == pb.Life_LIFE_DEAD {
		return time.Time{}, nil
	}
	alive, err := s.listAll(ctx, machineAlivePrefix(id), true)
	if err != nil {
		return time.Time{}, err
	}
	if err := s.setUnitsDying(ctx, keySuffixes(alive, machineAlivePrefix(id))); err != nil {
		return time.Time{}, err
	}
	if waiting {
		return due, nil
	}
	units, err := s.MachinePrincipals(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	for _, u := range units {
		if err := s.forceUnit(ctx, u); err != nil {
			return time.Time{}, err
		}
	}
	return time.Time{}, ignoreNotFound(s.EnsureMachineDead(ctx, id))
}
