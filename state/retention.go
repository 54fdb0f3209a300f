package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// AuditRetention bounds the audit log: entries older than MaxAge go, and
// the oldest beyond MaxEntries.
type AuditRetention struct {
	MaxAge     time.Duration
	MaxEntries int64
}

// DefaultAuditRetention keeps 90 days of entries, and a million at most
// (some 300 MB of etcd's space at the size of a typical entry).
var DefaultAuditRetention = AuditRetention{MaxAge: 90 * 24 * time.Hour, MaxEntries: 1_000_000}

// Validate reports a retention that would keep nothing.
func (r AuditRetention) Validate() error {
	if r.MaxAge <= 0 || r.MaxEntries <= 0 {
		return fmt.Errorf("audit retention %s and %d entries: both must be positive", r.MaxAge, r.MaxEntries)
	}
	return nil
}

// prunePage is how many entries one transaction of the pruner deletes at
// most: one range deletion, whatever the log holds.
const prunePage = 1000

// PruneAudit deletes the entries beyond ret, oldest first, at most
// prunePage a transaction, and returns how many it deleted. It only ever
// deletes the oldest entries, so those left stay numbered without gaps;
// two pruners at once delete the same ones.
func (s *State) PruneAudit(ctx context.Context, ret AuditRetention) (int64, error) {
	if err := ret.Validate(); err != nil {
		return 0, err
	}
	var total int64
	for {
		var n int
		var done bool
		err := s.apply(ctx, "prune the audit log", func(ctx context.Context) (*change, error) {
			r, err := s.read(ctx, get(seqAudit), getPrefix(auditPrefix, prunePage))
			if err != nil {
				return nil, err
			}
			last, _, err := seqValue(r.one(0))
			if err != nil {
				return nil, err
			}
			kvs := r.all(1)
			if len(kvs) == 0 {
				done = true
				return nil, errNothingToDo
			}
			first, err := parseAuditKey(string(kvs[0].Key))
			if err != nil {
				return nil, err
			}
			n = 0
			if over := last - first + 1 - ret.MaxEntries; over > 0 {
				n = int(min(over, int64(len(kvs))))
			}
			cutoff := s.now().Add(-ret.MaxAge).UnixNano()
			for i := n; i < len(kvs); i++ {
				e, err := decode[pb.AuditEntry](kvs[i])
				if err != nil {
					return nil, err
				}
				if e.v.UnixNano >= cutoff {
					break
				}
				n = i + 1
			}
			done = n < len(kvs)
			if n == 0 {
				return nil, errNothingToDo
			}
			c := &change{}
			c.delRange(string(kvs[0].Key), string(kvs[n-1].Key)+"\x00")
			return c, nil
		})
		if err != nil {
			return total, err
		}
		total += int64(n)
		if done {
			return total, nil
		}
	}
}

// PruneRegistrations removes the registrations that expired, with their
// users, who never registered: a user added is one who registers in time.
// It returns how many it removed.
func (s *State) PruneRegistrations(ctx context.Context) (int, error) {
	kvs, err := s.listAll(ctx, registrationsPrefix, false)
	if err != nil {
		return 0, err
	}
	now := s.now().UnixNano()
	removed := 0
	var errs []error
	for _, kv := range kvs {
		reg, err := decode[pb.Registration](kv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if reg.v.ExpiresUnixNano > now {
			continue
		}
		name := reg.key[len(registrationsPrefix):]
		err = s.apply(ctx, "remove the expired registration of "+name, func(ctx context.Context) (*change, error) {
			r, err := s.read(ctx, get(reg.key), get(UserKey(name)))
			if err != nil {
				return nil, err
			}
			if r.one(0) == nil || r.one(0).ModRevision != reg.mod {
				return nil, errNothingToDo // used, or replaced
			}
			u, err := decode[pb.User](r.one(1))
			if err != nil {
				return nil, err
			}
			c := &change{}
			c.ifMod(reg.key, reg.mod)
			c.del(reg.key)
			if u != nil && !u.v.Registered {
				c.ifMod(u.key, u.mod)
				c.del(u.key)
			}
			return c, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("registration of %s: %w", name, err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// Pruner keeps the records that expire in bounds: the audit log within its
// retention, and registrations that were not used in time. The leader
// controller runs it; two at once delete the same records.
type Pruner struct {
	st       *State
	ret      AuditRetention
	interval time.Duration
	logger   hclog.Logger
}

// NewPruner returns a pruner of st's records that prunes every interval
// (a minute when zero).
func NewPruner(st *State, ret AuditRetention, interval time.Duration) (*Pruner, error) {
	if err := ret.Validate(); err != nil {
		return nil, err
	}
	if interval == 0 {
		interval = time.Minute
	}
	return &Pruner{st: st, ret: ret, interval: interval, logger: st.cfg.Logger.Named("pruner")}, nil
}

// Run prunes until ctx ends.
func (p *Pruner) Run(ctx context.Context) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		if n, err := p.st.PruneAudit(ctx, p.ret); err != nil && ctx.Err() == nil {
			p.logger.Warn("pruning the audit log failed", "error", err)
		} else if n > 0 {
			p.logger.Info("pruned the audit log", "entries", n)
		}
		if n, err := p.st.PruneRegistrations(ctx); err != nil && ctx.Err() == nil {
			p.logger.Warn("pruning registrations failed", "error", err)
		} else if n > 0 {
			p.logger.Info("removed users whose registration expired", "users", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
