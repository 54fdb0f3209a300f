package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/controller/gate"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// rolloutTerm is what the rollout worker keeps in memory for one term as
// leader. None of it is in etcd: a new leader starts with none, so a
// unit's min-healthy clock starts again, and a unit in back-off is asked
// again at once.
type rolloutTerm struct {
	w    *RolloutWorker
	pic  *rolloutPicture
	news chan struct{} // a gate answered
	asks sync.WaitGroup

	mu sync.Mutex
	// healthy is when each unit holding a permit for its service's
	// target was first seen done (running it, agent idle, workload
	// neither error nor blocked since its permit), continuously since.
	healthy map[string]sinceTarget
	// backoff holds the units a gate denied or did not answer.
	backoff map[string]*unitBackoff
	// asking, allowed and granted hold, by unit, the target a gate is
	// being asked about, the gate allowed and awaits a grant, and a
	// grant was made for that the picture does not show yet: each
	// counts against max-parallel until the picture shows the permit.
	asking  map[string]int64
	allowed map[string]int64
	// allowedAt is when each allowed unit was allowed: an allow older
	// than allowFresh (the rollout paused meanwhile) is asked again.
	allowedAt map[string]time.Time
	granted   map[string]int64
	// inflight counts the gate asks running.
	inflight int
	// failing holds the target of each service whose rollout this term
	// failed, until the picture shows the rollout moved on.
	failing map[string]int64
	// changes caches the changes of each service's target, for the
	// gate's question.
	changes map[string]targetChanges
}

// allowFresh is how long a gate's allow stands without a grant: one
// that waited longer (its rollout paused, or no room came) is asked
// again.
const allowFresh = 30 * time.Second

type sinceTarget struct {
	target int64
	since  time.Time
}

type unitBackoff struct {
	target int64
	delay  time.Duration
	until  time.Time
}

type targetChanges struct {
	target  int64
	changes []gate.Change
}

func newRolloutTerm(w *RolloutWorker, pic *rolloutPicture) *rolloutTerm {
	return &rolloutTerm{
		w: w, pic: pic, news: make(chan struct{}, 1),
		healthy: map[string]sinceTarget{}, backoff: map[string]*unitBackoff{},
		asking: map[string]int64{}, allowed: map[string]int64{}, allowedAt: map[string]time.Time{}, granted: map[string]int64{},
		failing: map[string]int64{}, changes: map[string]targetChanges{},
	}
}

// servicePlan is what one pass does for one service.
type servicePlan struct {
	service string
	target  int64
	// fail is the reason to fail the rollout for; nothing else is done.
	fail     string
	complete bool
	release  []string
	grant    []string
	// ask are the units to ask gate about; refuse those the policy's
	// gate, missing from this controller, is recorded as refusing.
	gate   gate.Gate
	ask    []gateAsk
	refuse []*pb.GateDecision
}

type gateAsk struct {
	unit, machine string
	from          int64
}

// passStats are what a pass saw, for the gauges.
type passStats struct {
	rolling, out int
}

// plan decides what a pass does, from the picture at now: nothing
// waits on etcd or a gate while the locks are held.
func (t *rolloutTerm) plan(now time.Time) ([]*servicePlan, passStats) {
	t.pic.mu.Lock()
	defer t.pic.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	var plans []*servicePlan
	var stats passStats
	budget := MaxRolloutPassUnits
	askSlots := t.w.cfg.GateAsks - t.inflight
	for svc, ro := range t.pic.rollouts {
		if ro.State != pb.RolloutState_ROLLOUT_STATE_ROLLING && ro.State != pb.RolloutState_ROLLOUT_STATE_CANARY {
			delete(t.failing, svc)
			continue
		}
		stats.rolling++
		if target, ok := t.failing[svc]; ok {
			if target == ro.Target {
				continue
			}
			delete(t.failing, svc)
		}
		policy := t.pic.policies[svc]
		if policy == nil {
			policy = state.DefaultRolloutPolicy()
		}
		p := t.planService(svc, ro, policy, now, &budget, &askSlots, &stats)
		if p.fail != "" {
			t.failing[svc] = ro.Target
		}
		if p.fail != "" || p.complete || len(p.release)+len(p.grant)+len(p.ask)+len(p.refuse) > 0 {
			plans = append(plans, p)
		}
	}
	return plans, stats
}

// planService plans for one rolling service; both locks are held.
func (t *rolloutTerm) planService(svc string, ro *pb.Rollout, policy *pb.RolloutPolicy, now time.Time, budget, askSlots *int, stats *passStats) *servicePlan {
	target := ro.Target
	p := &servicePlan{service: svc, target: target}
	units := t.pic.serviceUnits(svc)
	minHealthy := time.Duration(policy.MinHealthyMs) * time.Millisecond

	// First the units holding permits and those not done: what to
	// release, whether to fail.
	count, out, pending, notDone := 0, 0, 0, 0
	retargets := false
	var notDoneNames []string
	for _, u := range units {
		if u.exists {
			count++
		}
		if u.permit != 0 {
			out++
			retargets = retargets || u.permit != target
		}
		t.settle(u, target, now)
		if u.permit == 0 && (t.asking[u.name] == target || t.allowed[u.name] == target || t.granted[u.name] == target) {
			pending++
		}
		if !u.hasRev {
			continue
		}
		if u.current != target || u.permit != 0 {
			notDone++
			if len(notDoneNames) < 3 {
				notDoneNames = append(notDoneNames, u.name)
			}
		}
		if u.permit != target {
			delete(t.healthy, u.name)
			continue
		}
		if u.agent == "error" && u.agentRev > u.permitRev && p.fail == "" {
			p.fail = fmt.Sprintf("unit %s failed on revision %d: %s", u.name, target, u.agentMsg)
		}
		// Blocked before its move (an app waiting for a relation) is not
		// the move's doing: its permit says which.
		blocked := u.workload == "blocked" && !u.permitBlocked
		if u.current != target || u.target != target || u.agent != "idle" || u.workload == "error" || blocked {
			delete(t.healthy, u.name)
			continue
		}
		h, ok := t.healthy[u.name]
		if !ok || h.target != target {
			h = sinceTarget{target: target, since: now}
			t.healthy[u.name] = h
		}
		if now.Sub(h.since) >= minHealthy {
			p.release = append(p.release, u.name)
		}
	}
	stats.out += max(out, int(ro.Permits))
	// A canary whose units are all granted and done waits for the
	// operator's promote, which sets a new deadline: the wait does not
	// fail it.
	canaryWaits := ro.State == pb.RolloutState_ROLLOUT_STATE_CANARY && ro.CanaryGranted >= ro.Canary && out == 0 && ro.Permits == 0
	if p.fail == "" && !canaryWaits && now.UnixNano() > ro.DeadlineUnixNano && notDone > 0 {
		more := ""
		if notDone > len(notDoneNames) {
			more = " …"
		}
		p.fail = fmt.Sprintf("deadline %s passed: %d units not done (%s%s)",
			time.Duration(policy.DeadlineMs)*time.Millisecond, notDone, strings.Join(notDoneNames, " "), more)
	}
	if p.fail != "" {
		p.release = nil
		return p
	}
	if notDone == 0 && out == 0 && ro.Permits == 0 && pending == 0 {
		p.complete = true
		return p
	}

	// Then the units to move: within max-parallel, and the canary.
	room := state.MaxParallelUnits(policy, count) - max(out, int(ro.Permits)) - pending
	canary := ro.State == pb.RolloutState_ROLLOUT_STATE_CANARY
	canaryRoom := int(ro.Canary-ro.CanaryGranted) - pending
	var g gate.Gate
	if policy.Gate != "" {
		g = t.w.gates[policy.Gate]
		p.gate = g
	}
	p.grant = t.allowedUnits(units, target)
	for _, u := range units {
		if *budget <= 0 || (canary && canaryRoom <= 0) || (room <= 0 && !retargets) {
			break
		}
		retarget := u.permit != 0 && u.permit != target
		switch {
		case !u.hasRev || !u.exists || u.dead || u.machine == "" || !t.pic.present[u.machine]:
			continue
		case u.permit == target || (u.permit == 0 && u.current == target):
			continue
		case !retarget && room <= 0:
			continue
		case t.asking[u.name] == target || t.allowed[u.name] == target || t.granted[u.name] == target:
			continue
		}
		if b := t.backoff[u.name]; b != nil && b.target == target && now.Before(b.until) {
			continue
		}
		switch {
		case policy.Gate == "":
			p.grant = append(p.grant, u.name)
			t.granted[u.name] = target
		case g == nil:
			p.refuse = append(p.refuse, &pb.GateDecision{
				Unit: u.name, Machine: u.machine, Gate: policy.Gate, From: u.current, To: target,
				Decision: pb.GateVerdict_GATE_VERDICT_RETRY, AtUnixNano: now.UnixNano(),
				Reason: fmt.Sprintf("no gate %q on this controller (lifelined controller --rollout-gate %s=…)", policy.Gate, policy.Gate),
			})
			t.backOff(u.name, target, 0, now)
		default:
			if *askSlots <= 0 {
				return p
			}
			*askSlots--
			t.asking[u.name] = target
			t.inflight++
			p.ask = append(p.ask, gateAsk{unit: u.name, machine: u.machine, from: u.current})
		}
		*budget--
		if !retarget {
			room--
		}
		canaryRoom--
	}
	return p
}

// settle forgets what the term held about u once the picture shows it
// (its permit, or its running target), the target moved on, or (an
// allow) it is stale.
func (t *rolloutTerm) settle(u *unitPicture, target int64, now time.Time) {
	for _, m := range []map[string]int64{t.granted, t.allowed} {
		if v, ok := m[u.name]; ok && (v != target || u.permit == target || u.current == target) {
			delete(m, u.name)
		}
	}
	if _, ok := t.allowed[u.name]; ok && now.Sub(t.allowedAt[u.name]) > allowFresh {
		delete(t.allowed, u.name)
	}
	if _, ok := t.allowed[u.name]; !ok {
		delete(t.allowedAt, u.name)
	}
	if b := t.backoff[u.name]; b != nil && b.target != target {
		delete(t.backoff, u.name)
	}
}

// allowedUnits takes the units a gate allowed to move to target out of
// allowed: they are granted now, and counted as granted until the
// picture shows their permits.
func (t *rolloutTerm) allowedUnits(units []*unitPicture, target int64) []string {
	var out []string
	for _, u := range units {
		if t.allowed[u.name] == target {
			out = append(out, u.name)
			delete(t.allowed, u.name)
			t.granted[u.name] = target
		}
	}
	return out
}

// backOff makes unit wait before it is asked about target again: twice
// its last wait (the first DefaultRolloutBackoff, at most MaxBackoff), or
// retryAfter when the gate said.
func (t *rolloutTerm) backOff(unit string, target int64, retryAfter time.Duration, now time.Time) {
	b := t.backoff[unit]
	if b == nil || b.target != target {
		b = &unitBackoff{target: target}
		t.backoff[unit] = b
	}
	if b.delay == 0 {
		b.delay = t.w.cfg.Backoff
	} else {
		b.delay = min(2*b.delay, t.w.cfg.MaxBackoff)
	}
	wait := b.delay
	if retryAfter > 0 {
		wait = retryAfter
	}
	b.until = now.Add(wait)
}

// pass plans and acts once.
func (t *rolloutTerm) pass(ctx context.Context, now time.Time) {
	plans, stats := t.plan(now)
	t.w.rolling.Set(float64(stats.rolling))
	t.w.out.Set(float64(stats.out))
	var jobs []func()
	for _, p := range plans {
		jobs = append(jobs, t.jobs(ctx, p)...)
	}
	sem := make(chan struct{}, t.w.cfg.Calls)
	var wg sync.WaitGroup
	for _, job := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			job()
		}()
	}
	wg.Wait()
}

// jobs are the calls of plan p, each to run on its own.
func (t *rolloutTerm) jobs(ctx context.Context, p *servicePlan) []func() {
	st, logger := t.w.cfg.State, t.w.logger.With("service", p.service, "revision", p.target)
	warn := func(what string, err error) {
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, state.ErrRefused) || errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrAborted) {
			logger.Debug(what+": the model moved on; next pass", "error", err)
			return
		}
		logger.Warn(what+" failed", "error", err)
	}
	switch {
	case p.fail != "":
		return []func(){func() {
			rev, err := st.FailRollout(ctx, p.service, p.target, p.fail)
			if err != nil {
				t.mu.Lock()
				delete(t.failing, p.service)
				t.mu.Unlock()
				warn("failing the rollout", err)
				return
			}
			t.w.failed.Inc()
			if rev != nil {
				logger.Warn("rollout failed: reverting", "reason", p.fail, "revert", rev.Number)
			} else {
				logger.Warn("rollout failed: paused", "reason", p.fail)
			}
		}}
	case p.complete:
		return []func(){func() {
			if err := st.CompleteRollout(ctx, p.service, p.target); err != nil {
				warn("completing the rollout", err)
				return
			}
			t.w.completed.Inc()
			logger.Info("rollout done")
		}}
	}
	var jobs []func()
	for i := 0; i < len(p.release); i += state.MaxReleaseUnits {
		batch := p.release[i:min(i+state.MaxReleaseUnits, len(p.release))]
		jobs = append(jobs, func() {
			if err := st.ReleasePermits(ctx, p.service, batch); err != nil {
				warn("releasing permits", err)
				return
			}
			t.w.released.Add(float64(len(batch)))
		})
	}
	for i := 0; i < len(p.grant); i += state.MaxGrantUnits {
		batch := p.grant[i:min(i+state.MaxGrantUnits, len(p.grant))]
		jobs = append(jobs, func() { t.grant(ctx, p, batch, warn) })
	}
	for _, d := range p.refuse {
		jobs = append(jobs, func() {
			warn("recording a gate decision", st.RecordGateDecision(ctx, p.service, d))
			t.w.decisions.WithLabelValues("retry").Inc()
		})
	}
	if len(p.ask) > 0 {
		t.startAsks(ctx, p, warn)
	}
	return jobs
}

// grant grants permits to batch, and forgets those not granted, to be
// considered again next pass.
func (t *rolloutTerm) grant(ctx context.Context, p *servicePlan, batch []string, warn func(string, error)) {
	got, err := t.w.cfg.State.GrantPermits(ctx, p.service, p.target, batch)
	warn("granting permits", err)
	t.w.granted.Add(float64(len(got)))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, u := range batch {
		if !slices.Contains(got, u) && t.granted[u] == p.target {
			delete(t.granted, u)
		}
	}
}

// startAsks asks p's gate about p's units, each ask on its own goroutine
// (their number bounded by the slots plan reserved), recording each
// decision: an allow awaits the next pass's grant, a deny or retry backs
// the unit off.
func (t *rolloutTerm) startAsks(ctx context.Context, p *servicePlan, warn func(string, error)) {
	done := func(a gateAsk) {
		t.mu.Lock()
		if t.asking[a.unit] == p.target {
			delete(t.asking, a.unit)
		}
		t.inflight--
		t.mu.Unlock()
	}
	changes, err := t.targetChanges(ctx, p.service, p.target)
	if err != nil {
		warn("reading the revision for the gate", err)
		for _, a := range p.ask {
			done(a)
		}
		return
	}
	for _, a := range p.ask {
		t.asks.Add(1)
		go func() {
			defer t.asks.Done()
			defer done(a)
			v := p.gate.Ask(ctx, gate.Question{Service: p.service, Unit: a.unit, Machine: a.machine, From: a.from, To: p.target, Changes: changes})
			if ctx.Err() != nil {
				return
			}
			d := &pb.GateDecision{Unit: a.unit, Machine: a.machine, Gate: p.gate.Name(), From: a.from, To: p.target,
				Reason: v.Reason, RetryAfterMs: v.RetryAfter.Milliseconds()}
			switch v.Decision {
			case gate.Allow:
				d.Decision = pb.GateVerdict_GATE_VERDICT_ALLOW
			case gate.Deny:
				d.Decision = pb.GateVerdict_GATE_VERDICT_DENY
			default:
				d.Decision = pb.GateVerdict_GATE_VERDICT_RETRY
			}
			t.w.decisions.WithLabelValues(string(v.Decision)).Inc()
			warn("recording a gate decision", t.w.cfg.State.RecordGateDecision(ctx, p.service, d))
			t.mu.Lock()
			if v.Decision == gate.Allow {
				delete(t.backoff, a.unit)
				t.allowed[a.unit], t.allowedAt[a.unit] = p.target, time.Now()
			} else {
				t.backOff(a.unit, p.target, v.RetryAfter, time.Now())
			}
			t.mu.Unlock()
			select {
			case t.news <- struct{}{}:
			default:
			}
		}()
	}
}

// targetChanges returns the changes of the service's revision target, as
// the gate is told them, read once a target.
func (t *rolloutTerm) targetChanges(ctx context.Context, service string, target int64) ([]gate.Change, error) {
	t.mu.Lock()
	c, ok := t.changes[service]
	t.mu.Unlock()
	if ok && c.target == target {
		return c.changes, nil
	}
	rev, err := t.w.cfg.State.ServiceRevision(ctx, service, target)
	if err != nil {
		return nil, err
	}
	changes := make([]gate.Change, 0, len(rev.Changes))
	for _, ch := range rev.Changes {
		key := ch.Key
		if ch.Charm {
			key = "charm"
		}
		changes = append(changes, gate.Change{Key: key, Old: ch.OldValue, New: ch.NewValue})
	}
	t.mu.Lock()
	t.changes[service] = targetChanges{target: target, changes: changes}
	t.mu.Unlock()
	return changes, nil
}
