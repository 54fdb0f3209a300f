package unitagent

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/agentwatch"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// modelView is the agent's picture of the model, kept current by watches. It
// may lag, and its parts may be of different moments: every decision taken
// from it is checked again by the controller's rules when acted on.
type modelView struct {
	unit        *pb.Unit // nil until known, or once removed
	unitKnown   bool
	service     *pb.Service
	serviceSeen bool
	// serviceDyingSince is when the agent first saw its service not
	// alive (set by the agent, not the watcher).
	serviceDyingSince time.Time
	// updateStatusAt is when update-status is next due; zero: never (set
	// by the agent, not the watcher).
	updateStatusAt time.Time
	// unitRev is the unit's revisions (nil once removed), revSeen says
	// their watch has answered.
	unitRev     *pb.UnitRevision
	revSeen     bool
	relationIDs map[int64]bool
	relsKnown   bool
	relations   map[int64]*relationView
	resolved    pb.ResolvedMode
	subs        map[string]*pb.Unit // nil value: name known, unit not yet seen
	subsKnown   bool
	// barrier is the revision of the model's latest barrier known (0:
	// none), and synced, in a snapshot, the revision every subject's
	// watch had brought the picture to (0 while one has not answered):
	// the picture holds every change up to the barrier once synced is at
	// or past it.
	barrier, synced int64
	// tasks are the unit's open tasks, operation id → what the agent is
	// to do ("pending", "pausing"...: state.UnitTasks); tasksKnown says
	// their watch has answered.
	tasks      map[int64]string
	tasksKnown bool
	// leader is the service's leader ("" for none) and leaderVersion its
	// leader settings' version (0 for none); leaderKnown and
	// leaderSettingsKnown say their watches have answered.
	leader              string
	leaderVersion       int64
	leaderKnown         bool
	leaderSettingsKnown bool
}

type relationView struct {
	rel     *pb.Relation // nil when removed (or not yet seen)
	known   bool         // the relation's watch has answered
	members map[string]int64
	scoped  bool // the scope's watch has answered
	// apps are the versions of the relation's services' settings
	// (relation-set --app), by service; appsKnown says their watch has
	// answered.
	apps      map[string]int64
	appsKnown bool

	// In the watcher's picture: the members changed since the last
	// snapshot, and whether the scope was listed afresh since.
	changed  map[string]struct{}
	relisted bool
	// In a snapshot: the agent's own copy of the members (members is its
	// map) and the resolver's index of them.
	view *memberView
}

// memberView is the agent's own copy of one relation scope's members,
// brought up to date at each snapshot by the members changed since the
// one before, so that a snapshot costs O(changes), not O(members). Only
// the agent's goroutine (snapshot, and the resolver between snapshots)
// touches it.
type memberView struct {
	members map[string]int64
	// pending holds every member whose hooks may be due: whose local and
	// remote versions may differ (a superset, which the resolver prunes
	// as it looks). It holds every member of both sides once seeded for a
	// local record of the relation; members changed since join it at each
	// snapshot, and a member the agent runs a hook for stays in it until
	// found up to date. That is what lets a decision look at the members
	// not yet up to date instead of at every member (docs/DESIGN.md's hook
	// order is kept: see nextMemberHook).
	pending map[string]struct{}
	seeded  *localRelation // the local record pending was seeded against
}

// snapshotLocked returns a copy of the picture for the agent's goroutine;
// call with the lock held. The relations' members are the agent's own
// views (shared with the previous snapshot's, which must not be used any
// more), brought up to date with the changes since.
func (w *watcher) snapshotLocked() *modelView {
	r := w.r
	c := *r
	c.relationIDs = make(map[int64]bool, len(r.relationIDs))
	for k, v := range r.relationIDs {
		c.relationIDs[k] = v
	}
	c.tasks = make(map[int64]string, len(r.tasks))
	for k, v := range r.tasks {
		c.tasks[k] = v
	}
	c.relations = make(map[int64]*relationView, len(r.relations))
	for id, rr := range r.relations {
		v := w.views[id]
		if v == nil || rr.relisted {
			v = &memberView{members: make(map[string]int64, len(rr.members))}
			for u, ver := range rr.members {
				v.members[u] = ver
			}
			w.views[id] = v
		} else {
			for u := range rr.changed {
				if ver, ok := rr.members[u]; ok {
					v.members[u] = ver
				} else {
					delete(v.members, u)
				}
				if v.pending != nil {
					v.pending[u] = struct{}{}
				}
			}
		}
		if len(rr.changed) > 64 {
			// Ranging over a map costs what it once held: one that held
			// a listing of thousands would cost that at each snapshot.
			rr.changed = make(map[string]struct{})
		} else {
			clear(rr.changed)
		}
		rr.relisted = false
		cr := &relationView{rel: rr.rel, known: rr.known, scoped: rr.scoped, members: v.members, view: v,
			apps: maps.Clone(rr.apps), appsKnown: rr.appsKnown}
		c.relations[id] = cr
	}
	for id := range w.views {
		if _, ok := r.relations[id]; !ok {
			delete(w.views, id)
		}
	}
	c.subs = make(map[string]*pb.Unit, len(r.subs))
	for k, v := range r.subs {
		c.subs[k] = v
	}
	c.synced = w.syncedLocked()
	return &c
}

// syncedLocked is the revision every subject's watch has brought the
// picture to: the lowest, 0 while one has not answered. Call with the
// lock held.
func (w *watcher) syncedLocked() int64 {
	low := int64(-1)
	for key := range w.subject {
		if rev := w.revs[key]; low < 0 || rev < low {
			low = rev
		}
	}
	return max(low, 0)
}

// watcher keeps the model view current: a watch per subject, each
// resuming from the last revision it saw after a lost connection, all on
// the agent's one watch stream (its Mux, or its machine agent's), and all
// applied in one goroutine (agentwatch.Group) when the Follower allows.
type watcher struct {
	follow agentwatch.Follower
	group  *agentwatch.Group // nil: a goroutine a subject
	unit   string
	logger hclog.Logger

	mu      sync.Mutex
	r       *modelView
	views   map[int64]*memberView // the agent's copies of the scopes
	changed chan struct{}         // signalled, without blocking, on every change
	subject map[string]context.CancelFunc
	// revs are the revisions each subject's watch has brought the
	// picture to, by key: a change, a listing, or only progress (the
	// controller brings every watch to each barrier).
	revs map[string]int64
	ctx  context.Context
	wg   sync.WaitGroup
}

func newWatcher(ctx context.Context, follow agentwatch.Follower, unit string, logger hclog.Logger) *watcher {
	w := &watcher{
		follow: follow, unit: unit, logger: logger, ctx: ctx,
		r:       &modelView{relationIDs: map[int64]bool{}, relations: map[int64]*relationView{}, subs: map[string]*pb.Unit{}, tasks: map[int64]string{}},
		changed: make(chan struct{}, 1), subject: map[string]context.CancelFunc{},
		views: map[int64]*memberView{}, revs: map[string]int64{},
	}
	if g, ok := follow.(agentwatch.Grouper); ok {
		w.group = g.NewGroup()
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.group.Run(ctx)
		}()
	}
	w.start("unit", &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: unit}}, w.onUnit)
	w.start("subordinates", &pb.WatchSubject{Subject: &pb.WatchSubject_UnitSubordinates{UnitSubordinates: unit}}, w.onSubordinates)
	w.start("barrier", &pb.WatchSubject{Subject: &pb.WatchSubject_Barrier{Barrier: true}}, w.onBarrier)
	w.start("tasks", &pb.WatchSubject{Subject: &pb.WatchSubject_UnitTasks{UnitTasks: unit}}, w.onTasks)
	w.start("revision", &pb.WatchSubject{Subject: &pb.WatchSubject_UnitRevision{UnitRevision: unit}}, w.onRevision)
	return w
}

// snapshot returns a copy of the picture for the agent's goroutine, the
// only one that may call it: the relations' members in it are valid until
// the next call.
func (w *watcher) snapshot() *modelView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snapshotLocked()
}

func (w *watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// wait stops every watch.
func (w *watcher) wait() { w.wg.Wait() }

// start runs a watch of subject under key, unless one runs already. apply
// is called, under the lock, with each response.
func (w *watcher) start(key string, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.startLocked(key, subject, apply)
}

// startLocked is start with the lock held.
func (w *watcher) startLocked(key string, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
	if _, ok := w.subject[key]; ok {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.subject[key] = cancel
	if w.group != nil {
		w.group.Start(ctx, subject, w.applier(ctx, key, apply), w.logger.With("watch", key))
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.follow.Follow(ctx, subject, w.applier(ctx, key, apply), w.logger.With("watch", key))
	}()
}

// watchResolved starts the watch of the unit's resolved mark, or stops
// it. Only a unit in an error state, or waiting to run a failed hook
// again, acts on the mark, so the agent watches it only then: a unit
// whose hooks never fail never subscribes it (one subscription in eight,
// 10,000 at 10,000 units). Stopped, the mark is forgotten: the next
// failure starts from the mark its watch lists then.
func (w *watcher) watchResolved(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, running := w.subject["resolved"]
	switch {
	case on && !running:
		w.startLocked("resolved", &pb.WatchSubject{Subject: &pb.WatchSubject_Resolved{Resolved: w.unit}}, w.onResolved)
	case !on && running:
		w.stop("resolved")
		w.r.resolved = pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED
	}
}

// stop ends the watch under key; call with the lock held. No response of
// it is applied after.
func (w *watcher) stop(key string) {
	if cancel, ok := w.subject[key]; ok {
		cancel()
		delete(w.subject, key)
		delete(w.revs, key)
	}
}

// applier returns what applies a response of the watch ctx stops, under
// key: apply, under the lock, unless the watch was stopped, and the
// revision it brings the subject to.
func (w *watcher) applier(ctx context.Context, key string, apply func(*pb.WatchResponse)) func(*pb.WatchResponse) {
	return func(resp *pb.WatchResponse) {
		w.mu.Lock()
		if ctx.Err() != nil {
			// Stopped while this response was on its way: the picture
			// no longer follows the subject.
			w.mu.Unlock()
			return
		}
		apply(resp)
		w.revs[key] = resp.Revision
		w.mu.Unlock()
		w.notify()
	}
}

func (w *watcher) onUnit(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.unit = nil
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			w.r.unit = nil
		} else if u := ch.GetUnit(); u != nil {
			w.r.unit = u
		}
	}
	w.r.unitKnown = true
	if u := w.r.unit; u != nil {
		w.startLocked("service", &pb.WatchSubject{Subject: &pb.WatchSubject_Service{Service: u.Service}}, w.onService)
		w.startLocked("relations", &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceRelations{ServiceRelations: u.Service}}, w.onRelations)
		w.startLocked("leadership", &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceLeadership{ServiceLeadership: u.Service}}, w.onLeadership)
		w.startLocked("leader-settings", &pb.WatchSubject{Subject: &pb.WatchSubject_LeaderSettings{LeaderSettings: u.Service}}, w.onLeaderSettings)
	}
}

// onLeadership follows the service's leader: the one key under its
// leadership prefix, whose change's id is the leader's name.
func (w *watcher) onLeadership(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.leader = ""
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			if w.r.leader == ch.Id {
				w.r.leader = ""
			}
		} else {
			w.r.leader = ch.Id
		}
	}
	w.r.leaderKnown = true
}

// onLeaderSettings follows the version of the service's leader settings.
func (w *watcher) onLeaderSettings(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.leaderVersion = 0
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			w.r.leaderVersion = 0
		} else {
			w.r.leaderVersion = ch.Version
		}
	}
	w.r.leaderSettingsKnown = true
}

func (w *watcher) onService(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.service = nil
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			w.r.service = nil
		} else if s := ch.GetService(); s != nil {
			w.r.service = s
		}
	}
	w.r.serviceSeen = true
}

// onRevision follows the unit's revisions: the one it runs and the one
// it is to run.
func (w *watcher) onRevision(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.unitRev = nil
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			w.r.unitRev = nil
		} else if ur := ch.GetUnitRevision(); ur != nil {
			w.r.unitRev = ur
		}
	}
	w.r.revSeen = true
}

// onBarrier follows the model's barrier: its version is its revision.
func (w *watcher) onBarrier(resp *pb.WatchResponse) {
	for _, ch := range resp.Changes {
		if !ch.Removed {
			w.r.barrier = max(w.r.barrier, ch.Version)
		}
	}
}

func (w *watcher) onTasks(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.tasks = map[int64]string{}
	}
	for _, ch := range resp.Changes {
		id, err := strconv.ParseInt(ch.Id, 10, 64)
		if err != nil {
			continue
		}
		if ch.Removed {
			delete(w.r.tasks, id)
		} else {
			w.r.tasks[id] = ch.GetTask()
		}
	}
	w.r.tasksKnown = true
}

func (w *watcher) onResolved(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.resolved = pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			w.r.resolved = pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED
		} else {
			w.r.resolved = ch.GetResolved().GetMode()
		}
	}
}

func (w *watcher) onRelations(resp *pb.WatchResponse) {
	if resp.Relisted {
		w.r.relationIDs = map[int64]bool{}
	}
	for _, ch := range resp.Changes {
		id, err := strconv.ParseInt(ch.Id, 10, 64)
		if err != nil {
			continue
		}
		if ch.Removed {
			delete(w.r.relationIDs, id)
		} else {
			w.r.relationIDs[id] = true
		}
	}
	w.r.relsKnown = true
	for id := range w.r.relationIDs {
		w.watchRelation(id)
	}
}

// watchRelation starts the watches of one relation and its scope; call
// with the lock held. They run until the agent forgets the relation.
func (w *watcher) watchRelation(id int64) {
	if _, ok := w.r.relations[id]; !ok {
		w.r.relations[id] = &relationView{members: map[string]int64{}, changed: map[string]struct{}{}}
	}
	key := strconv.FormatInt(id, 10)
	rr := w.r.relations[id]
	w.startLocked("relation/"+key, &pb.WatchSubject{Subject: &pb.WatchSubject_Relation{Relation: id}}, func(resp *pb.WatchResponse) {
		if resp.Relisted {
			rr.rel = nil
		}
		for _, ch := range resp.Changes {
			if ch.Removed {
				rr.rel = nil
			} else if rel := ch.GetRelation(); rel != nil {
				rr.rel = rel
			}
		}
		rr.known = true
	})
	w.startLocked("scope/"+key, &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: id}}, rr.applyScope)
	w.startLocked("apps/"+key, &pb.WatchSubject{Subject: &pb.WatchSubject_RelationAppSettings{RelationAppSettings: id}}, rr.applyApps)
}

// applyApps applies a response of the watch of the relation's services'
// settings.
func (rr *relationView) applyApps(resp *pb.WatchResponse) {
	if resp.Relisted || rr.apps == nil {
		rr.apps = map[string]int64{}
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			delete(rr.apps, ch.Id)
		} else {
			rr.apps[ch.Id] = ch.Version
		}
	}
	rr.appsKnown = true
}

// applyScope applies a response of the relation scope's watch.
func (rr *relationView) applyScope(resp *pb.WatchResponse) {
	if resp.Relisted {
		rr.members = map[string]int64{}
		rr.relisted = true
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			delete(rr.members, ch.Id)
		} else {
			rr.members[ch.Id] = ch.Version
		}
		rr.changed[ch.Id] = struct{}{}
	}
	rr.scoped = true
}

// forgetRelations stops the watches of the relations gone from the
// service's that the unit has no record of (never took part in): nothing
// is left to do in them, and a watch of a relation removed would be
// refused once its stream breaks, and never bring the picture to the
// next barrier.
func (w *watcher) forgetRelations(r *modelView, l *localState) {
	if !r.relsKnown {
		return
	}
	for id := range r.relations {
		if !r.relationIDs[id] && l.Relations[id] == nil {
			w.forgetRelation(id)
		}
	}
}

// forgetRelation stops a relation's watches once the unit is done with it.
func (w *watcher) forgetRelation(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.r.relationIDs[id] {
		return // still the service's: keep watching
	}
	key := strconv.FormatInt(id, 10)
	w.stop("relation/" + key)
	w.stop("scope/" + key)
	w.stop("apps/" + key)
	delete(w.r.relations, id)
}

func (w *watcher) onSubordinates(resp *pb.WatchResponse) {
	if resp.Relisted {
		for name := range w.r.subs {
			w.stop("sub/" + name)
		}
		w.r.subs = map[string]*pb.Unit{}
	}
	for _, ch := range resp.Changes {
		if ch.Removed {
			delete(w.r.subs, ch.Id)
			w.stop("sub/" + ch.Id)
			continue
		}
		if _, ok := w.r.subs[ch.Id]; !ok {
			w.r.subs[ch.Id] = nil
			name := ch.Id
			w.startLocked("sub/"+name, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: name}}, func(resp *pb.WatchResponse) {
				for _, ch := range resp.Changes {
					if _, ok := w.r.subs[name]; !ok {
						return // gone meanwhile
					}
					if !ch.Removed && ch.GetUnit() != nil {
						w.r.subs[name] = ch.GetUnit()
					}
				}
			})
		}
	}
	w.r.subsKnown = true
}
