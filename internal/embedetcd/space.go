package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
)

// etcd keeps every version of every key until a compaction, in a database
// file whose size its quota bounds (2 GiB by default). Past the quota it
// raises its NOSPACE alarm and refuses every write that puts a key, and
// stays so, across restarts, until someone compacts, defragments (only
// that gives the file's free pages back) and disarms the alarm. Writers
// fast enough fill it between two of etcd's own hourly compactions. Keep
// looks after the member's space itself:
//
//   - it compacts every Interval to History revisions before Floor (the
//     watch hub's revision: the hub's own watch must never find its
//     changes compacted away; a stream resuming from further back lists
//     again), and to Floor itself once the database holds half its quota;
//   - it defragments when the free pages are large: an eighth of the
//     quota, or a quarter of the file once it is half the quota;
//   - it says the space is tight once the file is within a tenth of the
//     quota (Space.Tight), for the controller to take only writes that
//     shrink the model, keeping that tenth for them;
//   - under the NOSPACE alarm it compacts and defragments, and disarms
//     the alarm once the file is a twentieth below the quota: the
//     controller, the space still tight, takes only the writes that
//     shrink the model, and they fit.
//
// Writers can fill the quota's worth of history within one Interval, and
// etcd counts a write in the file's size only once its batch commits, so
// the reserve alone does not stop them: a caller of Space that finds the
// database half full or tight wakes Keep at once (at most every
// Interval/10), and compaction keeps pace with the writes.
//
// Under the alarm with nothing left to free for stuckSteps looks, the
// model's own keys fill the quota, and Keep says so once.

// DefaultHistory is how many revisions Keep keeps for watches to resume
// from when SpaceConfig says none: more than the watch hub's ring holds
// (65,536 changes, each in a revision of its own at most), so that a
// stream resuming from past the ring mostly finds its changes in etcd.
const DefaultHistory = 100_000

// SpaceConfig says how Keep looks after the member's space.
type SpaceConfig struct {
	// Floor returns the revision compaction leaves: none at or after it
	// is compacted away. Zero (or nil) means the member's own.
	Floor func() int64
	// History is how many revisions before Floor compaction keeps;
	// DefaultHistory when zero, none when negative.
	History int64
	// Interval is how often Keep looks; a second when zero.
	Interval time.Duration
	Logger   hclog.Logger
}

// Space is the member's database space as Keep last saw it.
type Space struct {
	// Size is the database file's size, which the quota bounds, InUse
	// what its live pages hold, and Quota the size past which the member
	// refuses writes.
	Size, InUse, Quota int64
	// NoSpace says the member's NOSPACE alarm is raised.
	NoSpace bool
	// Tight says the file is within a tenth of the quota.
	Tight bool
}

// tight says whether a file of size bytes is within the quota's reserve.
func tight(size, quota int64) bool { return size >= quota-quota/10 }

// Space returns the member's space now: cheap enough for a caller to ask
// before each write it would refuse when the space is tight. Once the
// database is half full it wakes Keep.
func (s *Server) Space() Space {
	sp := s.look()
	if sp.Tight || sp.InUse >= sp.Quota/2 {
		select {
		case s.pressed <- struct{}{}:
		default:
		}
	}
	return sp
}

// look reads the member's space now.
func (s *Server) look() Space {
	srv := s.etcd.Server
	be := srv.Backend()
	sp := Space{Size: be.Size(), InUse: be.SizeInUse(), Quota: s.quota}
	for _, a := range srv.Alarms() {
		if a.Alarm == pb.AlarmType_NOSPACE {
			sp.NoSpace = true
		}
	}
	sp.Tight = tight(sp.Size, sp.Quota)
	return sp
}

// Keep looks after the member's space every cfg.Interval until ctx ends;
// it returns nil then. A step that fails is logged and tried again at the
// next look.
func (s *Server) Keep(ctx context.Context, cfg SpaceConfig) error {
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	k := &keeper{s: s, cfg: cfg}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		k.step(ctx)
		gap := time.NewTimer(cfg.Interval / 10)
		select {
		case <-ctx.Done():
			gap.Stop()
			return nil
		case <-t.C:
			gap.Stop()
		case <-gap.C:
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			case <-s.pressed:
			}
		}
	}
}

type keeper struct {
	s   *Server
	cfg SpaceConfig
	// was is the space the last step ended with, for logging changes.
	was Space
	// stuck counts the steps in a row that found the alarm raised or the
	// space tight and could free nothing; at stuckSteps it defragments
	// and, under the alarm, logs that the model fills the quota, once.
	stuck int
}

// step is one look: compact, defragment, disarm as the space needs, and
// publish what it sees.
func (k *keeper) step(ctx context.Context) {
	sp := k.s.look()
	k.report(sp)
	pressed := sp.NoSpace || sp.Tight || sp.InUse >= sp.Quota/2
	compacted, err := k.compact(ctx, pressed)
	if err != nil && ctx.Err() == nil {
		k.cfg.Logger.Warn("cannot compact etcd's history", "error", err)
	}
	sp = k.s.look()
	free := sp.Size - sp.InUse
	defrag := free >= sp.Quota/8 || (sp.Size >= sp.Quota/2 && free >= sp.Size/4)
	full := sp.NoSpace || sp.Tight
	if full && !compacted && !defrag && err == nil {
		k.stuck++
	} else {
		k.stuck = 0
	}
	// etcd counts the pages a compaction freed as free only from a later
	// write, which the alarm refuses, and which the controller holds back
	// while the space is tight (whether the compaction's own commit counts
	// them races with its readers): with the alarm raised or the space
	// tight, a compaction is followed by a defragmentation, which counts
	// afresh, and so is the stuckSteps-th look in a row that found nothing
	// to do.
	if full && (compacted || k.stuck == stuckSteps) {
		defrag = true
	}
	if defrag {
		start := time.Now()
		if err := k.s.etcd.Server.Defragment(); err != nil {
			k.cfg.Logger.Warn("cannot defragment etcd's database", "error", err)
		} else {
			after := k.s.look()
			k.cfg.Logger.Info("defragmented etcd's database", "before", sizeOf(sp.Size), "after", sizeOf(after.Size),
				"in_use", sizeOf(after.InUse), "took", time.Since(start).Round(time.Millisecond))
			sp = after
		}
	}
	if sp.NoSpace && sp.Size < sp.Quota-sp.Quota/20 {
		if err := k.disarm(ctx); err != nil {
			if ctx.Err() == nil {
				k.cfg.Logger.Warn("cannot disarm etcd's NOSPACE alarm", "error", err)
			}
		} else {
			k.cfg.Logger.Info("disarmed etcd's NOSPACE alarm: compaction and defragmentation freed space", "size", sizeOf(sp.Size), "quota", sizeOf(sp.Quota))
			sp = k.s.look()
		}
	} else if sp.NoSpace && k.stuck == stuckSteps {
		k.cfg.Logger.Warn("etcd's database is full and compaction frees nothing more: the model's own keys fill the quota; remove some of it or restart with a larger --etcd-quota-bytes",
			"size", sizeOf(sp.Size), "in_use", sizeOf(sp.InUse), "quota", sizeOf(sp.Quota))
	}
	k.report(sp)
}

// compact compacts the history to History revisions before the floor,
// or to the floor when pressed for space, when that moves it on by a
// tenth of History at least (or at all, pressed).
func (k *keeper) compact(ctx context.Context, pressed bool) (bool, error) {
	kv := k.s.etcd.Server.KV()
	rev, first := kv.Rev(), kv.FirstRev()
	floor := rev
	if k.cfg.Floor != nil {
		if f := k.cfg.Floor(); f > 0 && f < floor {
			floor = f
		}
	}
	history := max(k.cfg.History, 0)
	target := floor - history
	step := max(history/10, 1)
	if pressed {
		target, step = floor, 1
	}
	if target < first+step {
		return false, nil
	}
	// Physical: the call returns once etcd has deleted the old revisions
	// and committed, so that the space they held shows free at once
	// (without a later write, etcd would not count it free).
	if pressed {
		k.cfg.Logger.Info("compacting etcd's history to free space", "revision", target, "current", rev, "was", first)
	}
	cctx, cancel := context.WithTimeout(ctx, compactTimeout)
	defer cancel()
	_, err := k.s.etcd.Server.Compact(cctx, &pb.CompactionRequest{Revision: target, Physical: true})
	if errors.Is(err, mvcc.ErrCompacted) {
		return false, nil // someone compacted further meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("compact to revision %d: %w", target, err)
	}
	if pressed {
		k.cfg.Logger.Info("compacted etcd's history", "revision", target)
	} else {
		k.cfg.Logger.Debug("compacted etcd's history", "revision", target, "current", rev)
	}
	return true, nil
}

// stuckSteps is how many steps in a row under the alarm, freeing
// nothing, make the model's own keys the cause.
const stuckSteps = 5

// compactTimeout bounds one compaction's call until it is applied (not
// its physical part, which etcd waits for without a bound).
const compactTimeout = 30 * time.Second

// disarm disarms the member's NOSPACE alarm.
func (k *keeper) disarm(ctx context.Context) error {
	srv := k.s.etcd.Server
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := srv.Alarm(actx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: uint64(srv.MemberID()), Alarm: pb.AlarmType_NOSPACE})
	return err
}

// report logs the space's changes of state.
func (k *keeper) report(sp Space) {
	was := k.was
	k.was = sp
	switch {
	case sp.NoSpace && !was.NoSpace:
		k.cfg.Logger.Error("etcd's database is full (its NOSPACE alarm): it refuses every write that adds to the model until compaction and defragmentation free space",
			"size", sizeOf(sp.Size), "in_use", sizeOf(sp.InUse), "quota", sizeOf(sp.Quota))
	case sp.Tight && !was.Tight:
		k.cfg.Logger.Warn("etcd's database is near its quota: writes that add to the model are refused until compaction frees space",
			"size", sizeOf(sp.Size), "in_use", sizeOf(sp.InUse), "quota", sizeOf(sp.Quota))
	case !sp.Tight && !sp.NoSpace && (was.Tight || was.NoSpace):
		k.cfg.Logger.Info("etcd's database has space again: every write is taken", "size", sizeOf(sp.Size), "in_use", sizeOf(sp.InUse), "quota", sizeOf(sp.Quota))
	}
}

func sizeOf(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// quotaOf is the quota a member runs with given its configuration's.
func quotaOf(configured int64) int64 {
	if configured <= 0 {
		return defaultQuota
	}
	return configured
}

// defaultQuota is etcd's own default quota (storage.DefaultQuotaBytes).
const defaultQuota = 2 << 30
