package state

import (
	"context"
	"fmt"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A rollout moves a service's units to its target revision. A unit moves
// only holding a permit (permits/<svc>/<unit>); rollout.permits counts
// them, and every write of a permit changes the rollout, so that a grant,
// conditioned on the rollout as read, never takes the count past the
// limit it checked. The leader's worker decides when a unit is done and
// when the rollout has failed; these are the steps it and the operator
// take.

// SetRolloutPolicy sets the named service's rollout policy; it applies
// from the next grant (max-parallel) or the next rollout (canary,
// deadline).
func (s *State) SetRolloutPolicy(ctx context.Context, service string, p *pb.RolloutPolicy) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	if err := ValidateRolloutPolicy(p); err != nil {
		return err
	}
	return s.apply(ctx, "set the rollout policy of service "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(ServiceKey(service)))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		c := &change{}
		c.ifSame(svc.key, svc.create)
		c.put(RolloutPolicyKey(service), p)
		return c, nil
	})
}

// changeRollout changes the named service's rollout as edit decides;
// edit returns errNothingToDo to change nothing.
func (s *State) changeRollout(ctx context.Context, what, service string, edit func(ro *pb.Rollout, policy *pb.RolloutPolicy) error) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	return s.apply(ctx, what+" of service "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(RolloutKey(service)), get(RolloutPolicyKey(service)))
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		policy, err := policyFrom(r.one(1))
		if err != nil {
			return nil, err
		}
		next := protoClone(ro.v)
		if err := edit(next, policy); err != nil {
			return nil, err
		}
		c := &change{}
		c.ifMod(ro.key, ro.mod)
		c.put(ro.key, next)
		return c, nil
	})
}

// rolloutRefusal is the refusal of verb (pause, resume, promote) for a
// rollout in a state that does not allow it.
func rolloutRefusal(verb string, ro *pb.Rollout) error {
	switch ro.State {
	case pb.RolloutState_ROLLOUT_STATE_DONE:
		return refused("V2", "rollout of %s is done: nothing to %s", ro.Service, verb)
	case pb.RolloutState_ROLLOUT_STATE_FAILED:
		return refused("V2", "rollout of %s to revision %d has failed (%s): cannot %s it; resume or abort it", ro.Service, ro.Target, ro.Reason, verb)
	}
	return refused("V2", "rollout of %s to revision %d is %s: cannot %s it", ro.Service, ro.Target, RolloutStateName(ro.State), verb)
}

// PauseRollout pauses the named service's rolling rollout: no permits are
// granted until it is resumed.
func (s *State) PauseRollout(ctx context.Context, service string) error {
	return s.changeRollout(ctx, "pause the rollout", service, func(ro *pb.Rollout, _ *pb.RolloutPolicy) error {
		switch ro.State {
		case pb.RolloutState_ROLLOUT_STATE_ROLLING, pb.RolloutState_ROLLOUT_STATE_CANARY:
			ro.State, ro.Reason = pb.RolloutState_ROLLOUT_STATE_PAUSED, "paused by an operator"
			return nil
		case pb.RolloutState_ROLLOUT_STATE_PAUSED:
			return refused("V2", "rollout of %s is already paused", ro.Service)
		}
		return rolloutRefusal("pause", ro)
	})
}

// ResumeRollout resumes the named service's paused or failed rollout, to
// its canary if it has one still, with a new deadline.
func (s *State) ResumeRollout(ctx context.Context, service string) error {
	now := s.now().UnixNano()
	return s.changeRollout(ctx, "resume the rollout", service, func(ro *pb.Rollout, policy *pb.RolloutPolicy) error {
		switch ro.State {
		case pb.RolloutState_ROLLOUT_STATE_PAUSED, pb.RolloutState_ROLLOUT_STATE_FAILED:
		case pb.RolloutState_ROLLOUT_STATE_ROLLING, pb.RolloutState_ROLLOUT_STATE_CANARY:
			return refused("V2", "rollout of %s is %s, not paused: nothing to resume", ro.Service, RolloutStateName(ro.State))
		default:
			return rolloutRefusal("resume", ro)
		}
		ro.State, ro.Reason = pb.RolloutState_ROLLOUT_STATE_ROLLING, ""
		if ro.Canary > 0 {
			ro.State = pb.RolloutState_ROLLOUT_STATE_CANARY
		}
		ro.DeadlineUnixNano = now + policy.DeadlineMs*1e6
		return nil
	})
}

// PromoteRollout ends the named service's canary: the rest of its units
// move, with a new deadline (the rollout worker does not count the wait
// for promote against the deadline).
func (s *State) PromoteRollout(ctx context.Context, service string) error {
	now := s.now().UnixNano()
	return s.changeRollout(ctx, "promote the rollout", service, func(ro *pb.Rollout, policy *pb.RolloutPolicy) error {
		if ro.State != pb.RolloutState_ROLLOUT_STATE_CANARY {
			if ro.State == pb.RolloutState_ROLLOUT_STATE_ROLLING {
				return refused("V2", "rollout of %s to revision %d has no canary waiting: it is rolling", ro.Service, ro.Target)
			}
			return rolloutRefusal("promote", ro)
		}
		ro.State, ro.Canary = pb.RolloutState_ROLLOUT_STATE_ROLLING, 0
		ro.DeadlineUnixNano = now + policy.DeadlineMs*1e6
		return nil
	})
}

// RevertRollout makes a new revision of the named service whose spec is
// its rollout's previous's, rolled out without a canary, as the return
// from the rollout's target: an abort (reason "abort") or an auto-revert.
// A done rollout, or one with nothing before it, is refused.
func (s *State) RevertRollout(ctx context.Context, service, by, reason string) (*pb.Revision, error) {
	ro, err := s.Rollout(ctx, service)
	if err != nil {
		return nil, err
	}
	return s.revert(ctx, ro, by, reason)
}

// revert is RevertRollout of rollout ro as read: refused if the rollout
// has since moved to another target or previous.
func (s *State) revert(ctx context.Context, ro *pb.Rollout, by, reason string) (*pb.Revision, error) {
	if ro.State == pb.RolloutState_ROLLOUT_STATE_DONE {
		return nil, rolloutRefusal("abort", ro)
	}
	if ro.Previous == 0 {
		return nil, refused("V2", "rollout of %s to revision %d has no revision before it to return to", ro.Service, ro.Target)
	}
	prev, err := s.ServiceRevision(ctx, ro.Service, ro.Previous)
	if err != nil {
		return nil, err
	}
	check := func(now *pb.Rollout) error {
		if now.Target != ro.Target || now.Previous != ro.Previous || now.State == pb.RolloutState_ROLLOUT_STATE_DONE {
			return refused("V2", "rollout of %s moved on (to revision %d, %s) while reverting revision %d", ro.Service, now.Target, RolloutStateName(now.State), ro.Target)
		}
		return nil
	}
	return s.changeSpec(ctx, ro.Service, SpecChange{
		By: by, Reason: reason, SkipCanary: true, Reverting: ro.Target,
		Next: func(*pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return prev.Spec, prev.Endpoints, nil
		},
	}, check)
}

// FailRollout fails the named service's rollout to target, for reason:
// with the policy's auto-revert, and unless the rollout is itself a
// return from a failure, by reverting it (the new revision is returned);
// otherwise by pausing it as failed (nil is returned). A rollout that has
// moved on from target, or is done, is refused.
func (s *State) FailRollout(ctx context.Context, service string, target int64, reason string) (*pb.Revision, error) {
	if len(reason) > MaxGateReasonBytes {
		reason = cutText(reason, MaxGateReasonBytes)
	}
	for range s.cfg.MaxAttempts {
		ro, err := s.Rollout(ctx, service)
		if err != nil {
			return nil, err
		}
		if ro.Target != target {
			return nil, refused("V2", "rollout of %s has moved on to revision %d: revision %d is not rolling out", service, ro.Target, target)
		}
		if ro.State == pb.RolloutState_ROLLOUT_STATE_DONE {
			return nil, rolloutRefusal("fail", ro)
		}
		policy, err := s.RolloutPolicy(ctx, service)
		if err != nil {
			return nil, err
		}
		if policy.AutoRevert && ro.Reverting == 0 && ro.Previous > 0 {
			rev, err := s.revert(ctx, ro, "", "auto-revert: "+reason)
			if RuleOf(err) == "V2" {
				// The rollout moved meanwhile: look again.
				continue
			}
			return rev, err
		}
		err = s.changeRollout(ctx, "fail the rollout", service, func(now *pb.Rollout, _ *pb.RolloutPolicy) error {
			switch {
			case now.Target != target:
				return refused("V2", "rollout of %s has moved on to revision %d: revision %d is not rolling out", service, now.Target, target)
			case now.State == pb.RolloutState_ROLLOUT_STATE_DONE:
				return rolloutRefusal("fail", now)
			case now.State == pb.RolloutState_ROLLOUT_STATE_FAILED && now.Reason == reason:
				return errNothingToDo
			}
			now.State, now.Reason = pb.RolloutState_ROLLOUT_STATE_FAILED, reason
			return nil
		})
		return nil, err
	}
	return nil, fmt.Errorf("fail the rollout of service %s: %w", service, ErrAborted)
}

// GrantPermits grants permits to move to target to as many of units, in
// their order, as the named service's rollout allows: while it is rolling
// to target (or in its canary, up to the canary's count), up to the
// policy's max-parallel of the service's units, counting the permits
// out. A unit that holds a permit for an older target is retargeted
// with it (in a canary, counted against the canary); one that holds a
// permit for target is returned as granted; one that runs target
// already, or is gone, is passed over. At most MaxGrantUnits units a
// call, in one transaction. The service's units are counted as read: a
// unit removed meanwhile may leave one permit more out than a
// percentage of the units left allows (permit_limit records what was
// checked).
func (s *State) GrantPermits(ctx context.Context, service string, target int64, units []string) ([]string, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	if len(units) > MaxGrantUnits {
		return nil, invalidf("%d units to grant permits to: at most %d a call", len(units), MaxGrantUnits)
	}
	units = distinct(units)
	for _, u := range units {
		if err := checkUnitName(u); err != nil {
			return nil, err
		}
		if names.UnitService(u) != service {
			return nil, invalidf("unit %s is not a unit of service %s", u, service)
		}
	}
	var granted []string
	err := s.apply(ctx, "grant permits of service "+service, func(ctx context.Context) (*change, error) {
		gets := []getOp{get(RolloutKey(service)), get(RolloutPolicyKey(service)),
			getCount(ServiceUnitsPrefix(service))}
		for _, u := range units {
			gets = append(gets, get(UnitRevisionKey(u)), get(PermitKey(u)), get(StatusKey(StatusUnit, u)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		policy, err := policyFrom(r.one(1))
		if err != nil {
			return nil, err
		}
		canary := false
		switch {
		case ro.v.Target != target:
			return nil, refused("V3", "rollout of %s targets revision %d, not %d", service, ro.v.Target, target)
		case ro.v.State == pb.RolloutState_ROLLOUT_STATE_ROLLING:
		case ro.v.State == pb.RolloutState_ROLLOUT_STATE_CANARY && ro.v.CanaryGranted < ro.v.Canary:
			canary = true
		case ro.v.State == pb.RolloutState_ROLLOUT_STATE_CANARY:
			return nil, refused("V3", "rollout of %s to revision %d has granted its canary of %d: promote it first", service, target, ro.v.Canary)
		default:
			return nil, refused("V3", "rollout of %s to revision %d is %s: no permits are granted", service, target, RolloutStateName(ro.v.State))
		}
		limit := int64(MaxParallelUnits(policy, int(r.ranges[2].Count)))
		room := limit - ro.v.Permits
		canaryRoom := ro.v.Canary - ro.v.CanaryGranted
		next := protoClone(ro.v)
		c := &change{}
		now := s.now().UnixNano()
		granted = granted[:0]
		for i, u := range units {
			ur, err := decode[pb.UnitRevision](r.one(3 + 3*i))
			if err != nil {
				return nil, err
			}
			p, err := decode[pb.Permit](r.one(4 + 3*i))
			if err != nil {
				return nil, err
			}
			workload, err := decode[pb.Status](r.one(5 + 3*i))
			if err != nil {
				return nil, err
			}
			switch {
			case ur == nil:
				continue
			case p != nil && p.v.Revision == target:
				granted = append(granted, u)
				continue
			case p == nil && ur.v.Current == target:
				continue
			case canary && canaryRoom == 0:
				continue
			case p == nil && room <= 0:
				continue
			}
			if p == nil {
				room--
				next.Permits++
			}
			if canary {
				canaryRoom--
				next.CanaryGranted++
			}
			c.ifMod(ur.key, ur.mod)
			blocked := workload != nil && workload.v.Status == "blocked"
			c.put(PermitKey(u), &pb.Permit{Revision: target, GrantedUnixNano: now, WorkloadBlocked: blocked})
			c.put(ur.key, &pb.UnitRevision{Current: ur.v.Current, Target: target})
			granted = append(granted, u)
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		if next.Permits > ro.v.Permits {
			// The limit this grant checked. A grant that only retargets
			// adds none, and leaves the last such limit: a policy
			// lowered meanwhile does not make the permits out too many.
			next.PermitLimit = limit
		}
		c.ifMod(ro.key, ro.mod)
		c.ifMod(RolloutPolicyKey(service), modOf(r.one(1)))
		c.put(ro.key, next)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return granted, nil
}

func modOf(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// ReleasePermits frees the permits of those of units, of the named
// service, that run the revision their permit is for: done moving (the
// leader's worker decides that). Others are passed over. At most
// MaxReleaseUnits units a call.
func (s *State) ReleasePermits(ctx context.Context, service string, units []string) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	if len(units) > MaxReleaseUnits {
		return invalidf("%d units to release permits of: at most %d a call", len(units), MaxReleaseUnits)
	}
	units = distinct(units)
	for _, u := range units {
		if err := checkUnitName(u); err != nil {
			return err
		}
		if names.UnitService(u) != service {
			return invalidf("unit %s is not a unit of service %s", u, service)
		}
	}
	return s.apply(ctx, "release permits of service "+service, func(ctx context.Context) (*change, error) {
		gets := []getOp{get(RolloutKey(service))}
		for _, u := range units {
			gets = append(gets, get(UnitRevisionKey(u)), get(PermitKey(u)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		next := protoClone(ro.v)
		c := &change{}
		for i, u := range units {
			ur, err := decode[pb.UnitRevision](r.one(1 + 2*i))
			if err != nil {
				return nil, err
			}
			p, err := decode[pb.Permit](r.one(2 + 2*i))
			if err != nil {
				return nil, err
			}
			if p == nil || ur == nil || ur.v.Current != p.v.Revision || ur.v.Target != p.v.Revision {
				continue
			}
			c.ifMod(ur.key, ur.mod)
			c.del(PermitKey(u))
			next.Permits--
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		c.ifMod(ro.key, ro.mod)
		c.put(ro.key, next)
		return c, nil
	})
}

// CompleteRollout sets the named service's rollout to target done: every
// unit runs target and no permit is out. Otherwise it is refused, naming
// what is left.
func (s *State) CompleteRollout(ctx context.Context, service string, target int64) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	return s.apply(ctx, "complete the rollout of service "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(RolloutKey(service)))
		if err != nil {
			return nil, err
		}
		ro, err := rolloutFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		switch {
		case ro.v.Target != target:
			return nil, refused("V4", "rollout of %s targets revision %d, not %d", service, ro.v.Target, target)
		case ro.v.State == pb.RolloutState_ROLLOUT_STATE_DONE:
			return nil, errNothingToDo
		case ro.v.Permits > 0:
			return nil, refused("V4", "rollout of %s to revision %d has %d permits out", service, target, ro.v.Permits)
		}
		kvs, err := s.listRev(ctx, UnitRevisionsPrefix(service), false, r.rev)
		if err != nil {
			return nil, err
		}
		behind, first := 0, ""
		for _, kv := range kvs {
			ur, err := decode[pb.UnitRevision](kv)
			if err != nil {
				return nil, err
			}
			if ur.v.Current != target {
				if behind == 0 {
					first = fmt.Sprintf("%s runs revision %d", lastTwo(string(kv.Key)), ur.v.Current)
				}
				behind++
			}
		}
		if behind > 0 {
			return nil, refused("V4", "rollout of %s to revision %d is not done: %d units do not run it (%s)", service, target, behind, first)
		}
		next := protoClone(ro.v)
		next.State, next.Reason = pb.RolloutState_ROLLOUT_STATE_DONE, ""
		c := &change{}
		c.ifMod(ro.key, ro.mod)
		c.ifNoNewer(UnitRevisionsPrefix(service), r.rev)
		c.put(ro.key, next)
		return c, nil
	})
}

// SetUnitRevision records that the named unit runs revision n, its
// target: the unit agent's report. Any other revision is refused.
func (s *State) SetUnitRevision(ctx context.Context, unit string, n int64) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	svc := names.UnitService(unit)
	return s.apply(ctx, "set the revision of unit "+unit, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(UnitRevisionKey(unit)))
		if err != nil {
			return nil, err
		}
		ur, err := unitRevisionFrom(r.one(0), unit)
		if err != nil {
			return nil, err
		}
		if n != ur.v.Target {
			return nil, refused("V5", "unit %s is to run revision %d, not %d", unit, ur.v.Target, n)
		}
		if ur.v.Current == n {
			return nil, errNothingToDo
		}
		next := protoClone(ur.v)
		next.Current = n
		c := &change{}
		c.ifMod(ur.key, ur.mod)
		c.ifExists(RevisionKey(svc, n))
		c.put(ur.key, next)
		return c, nil
	})
}

// RecordGateDecision keeps a gate's decision about a unit of the named
// service, the last MaxGateDecisions of the service kept; a denial or a
// retry becomes the unit's note, which its status shows while it waits.
func (s *State) RecordGateDecision(ctx context.Context, service string, d *pb.GateDecision) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	if err := checkUnitName(d.GetUnit()); err != nil {
		return err
	}
	switch {
	case names.UnitService(d.Unit) != service:
		return invalidf("unit %s is not a unit of service %s", d.Unit, service)
	case !names.ValidEndpoint(d.Gate):
		return invalidf("gate name %q: want lowercase letters, digits and dashes, starting with a letter", d.Gate)
	case d.Decision == pb.GateVerdict_GATE_VERDICT_UNSPECIFIED || pb.GateVerdict_name[int32(d.Decision)] == "":
		return invalidf("gate decision about %s has no verdict", d.Unit)
	case len(d.Reason) > MaxGateReasonBytes:
		return invalidf("gate decision about %s: its reason is %d bytes, at most %d", d.Unit, len(d.Reason), MaxGateReasonBytes)
	case len(d.Machine) > 64 || d.RetryAfterMs < 0:
		return invalidf("gate decision about %s: bad machine or retry-after", d.Unit)
	}
	d = protoClone(d)
	if d.AtUnixNano == 0 {
		d.AtUnixNano = s.now().UnixNano()
	}
	return s.apply(ctx, "record a gate decision of service "+service, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(ServiceKey(service)), get(UnitRevisionKey(d.Unit)), getLastKey(GateDecisionsPrefix(service)))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), service)
		if err != nil {
			return nil, err
		}
		ur, err := unitRevisionFrom(r.one(1), d.Unit)
		if err != nil {
			return nil, err
		}
		seq := int64(1)
		if last := r.one(2); last != nil {
			n, err := parseNum(lastSegment(string(last.Key)))
			if err != nil {
				return nil, fmt.Errorf("gate decision key %s: %v", last.Key, err)
			}
			seq = n + 1
		}
		c := &change{}
		c.ifSame(svc.key, svc.create)
		c.ifAbsent(gateDecisionKey(service, seq))
		c.put(gateDecisionKey(service, seq), d)
		if seq > MaxGateDecisions {
			c.delRange(GateDecisionsPrefix(service), gateDecisionKey(service, seq-MaxGateDecisions+1))
		}
		var note string
		switch d.Decision {
		case pb.GateVerdict_GATE_VERDICT_DENY:
			note = fmt.Sprintf("gate %q denied: %s", d.Gate, d.Reason)
		case pb.GateVerdict_GATE_VERDICT_RETRY:
			note = fmt.Sprintf("gate %q asked to retry: %s", d.Gate, d.Reason)
		}
		if note != "" {
			next := protoClone(ur.v)
			next.Note = cutText(note, MaxNoteBytes)
			c.ifMod(ur.key, ur.mod)
			c.put(ur.key, next)
		}
		return c, nil
	})
}

// unitRevisionGets are the reads a unit's removal adds: its permit and
// its service's rollout (removeUnitRevisionOps).
func unitRevisionGets(unit string) []getOp {
	return []getOp{get(PermitKey(unit)), get(RolloutKey(names.UnitService(unit)))}
}

// removeUnitRevisionOps adds to a unit's removal (removeUnitOps deletes
// its unit-revision and its permit) the freeing of its permit: from the
// answers to unitRevisionGets, when it holds one, the rollout's count
// goes down (unless the removal removes the service too); when it holds
// none, the removal asserts it still does not.
func removeUnitRevisionOps(c *change, unit string, permit, rollout *mvccpb.KeyValue, serviceGone bool) error {
	if permit == nil {
		c.ifAbsent(PermitKey(unit))
		return nil
	}
	if serviceGone {
		return nil
	}
	ro, err := rolloutFrom(rollout, names.UnitService(unit))
	if err != nil {
		return err
	}
	next := protoClone(ro.v)
	next.Permits--
	c.ifMod(ro.key, ro.mod)
	c.put(ro.key, next)
	return nil
}

// distinct returns names without repeats, in their first order: a unit
// named twice in one call is granted or released once.
func distinct(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
