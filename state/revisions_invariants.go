package state

import (
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// checkRevisions checks the revisions' records (revisions.go,
// rollouts.go): each revision's id is its spec's, its number at most its
// rollout's head; the mirrors hold the head's spec; a service has a
// rollout and a rollout a service; every unit has a unit-revision and
// every unit-revision a unit, its current and target revisions kept, at
// or after the rollout's previous (what makes pruning safe) and at most
// its target; a permit's unit exists and targets the permit's revision,
// which is the rollout's target or an older one whose units are still
// to be retargeted or released; the rollout counts its permits, within
// the limit it last checked; a service keeps at most MaxGateDecisions.
func checkRevisions(snap *Snapshot, m *model, bad func(string, ...any)) {
	revs := map[string]map[int64]*pb.Revision{}
	rollouts := map[string]*pb.Rollout{}
	permits := map[string]int64{}
	gates := map[string]int{}
	units := map[string]*pb.UnitRevision{}
	type permit struct {
		svc, unit string
		p         *pb.Permit
	}
	var ps []permit
	dec := func(k string, msg proto.Message) bool {
		if err := proto.Unmarshal(snap.Values[k], msg); err != nil {
			bad("%s: undecodable value: %v", k, err)
			return false
		}
		return true
	}
	for k := range snap.Values {
		switch {
		case strings.HasPrefix(k, revisionsPrefix):
			svc, num, _ := strings.Cut(strings.TrimPrefix(k, revisionsPrefix), "/")
			n, err := parseNum(num)
			rev := &pb.Revision{}
			if err != nil {
				bad("revision key %s: %v", k, err)
				continue
			}
			if !dec(k, rev) {
				continue
			}
			if rev.Service != svc || rev.Number != n {
				bad("revision key %s holds revision %d of %s", k, rev.Number, rev.Service)
			}
			if id := SpecID(rev.Spec); rev.Id != id {
				bad("revision %s: id %s is not its spec's, %s", k, rev.Id, id)
			}
			if size := len(snap.Values[k]); size > MaxRevisionBytes {
				bad("revision %s is %d bytes, over %d", k, size, MaxRevisionBytes)
			}
			if revs[svc] == nil {
				revs[svc] = map[int64]*pb.Revision{}
			}
			revs[svc][n] = rev
		case strings.HasPrefix(k, rolloutsPrefix):
			ro := &pb.Rollout{}
			if dec(k, ro) {
				rollouts[strings.TrimPrefix(k, rolloutsPrefix)] = ro
			}
		case strings.HasPrefix(k, rolloutPoliciesPrefix):
			svc := strings.TrimPrefix(k, rolloutPoliciesPrefix)
			p := &pb.RolloutPolicy{}
			if !dec(k, p) {
				continue
			}
			if err := ValidateRolloutPolicy(p); err != nil {
				bad("rollout policy of %s: %v", svc, err)
			}
			if m.services[svc] == nil {
				bad("rollout policy of service %s, which does not exist", svc)
			}
		case strings.HasPrefix(k, unitRevisionsPrefix):
			ur := &pb.UnitRevision{}
			if dec(k, ur) {
				units[strings.TrimPrefix(k, unitRevisionsPrefix)] = ur
			}
		case strings.HasPrefix(k, permitsPrefix):
			rest := strings.TrimPrefix(k, permitsPrefix)
			svc, unit, _ := strings.Cut(rest, "/")
			p := &pb.Permit{}
			if dec(k, p) {
				ps = append(ps, permit{svc, unit, p})
				permits[svc]++
			}
		case strings.HasPrefix(k, gateDecisionsPrefix):
			svc, _, _ := strings.Cut(strings.TrimPrefix(k, gateDecisionsPrefix), "/")
			gates[svc]++
			if m.services[svc] == nil {
				bad("gate decision %s of service %s, which does not exist", k, svc)
			}
		}
	}
	for name, svc := range m.services {
		ro := rollouts[name]
		if ro == nil {
			bad("service %s has no rollout", name)
			continue
		}
		if ro.Service != name {
			bad("rollout of %s names service %s", name, ro.Service)
		}
		if ro.Target != ro.Head {
			bad("rollout of %s targets revision %d, not its head %d", name, ro.Target, ro.Head)
		}
		head := revs[name][ro.Head]
		if head == nil {
			bad("rollout of %s: head revision %d does not exist", name, ro.Head)
		} else {
			if !proto.Equal(head.Spec.GetCharm(), svc.Charm) {
				bad("service %s runs charm %v, its head revision %d %v", name, svc.Charm, ro.Head, head.Spec.GetCharm())
			}
			cfg := &pb.ServiceConfig{}
			if v, ok := snap.Values[ServiceConfigKey(name)]; ok && proto.Unmarshal(v, cfg) == nil &&
				!proto.Equal(cfg, &pb.ServiceConfig{Values: head.Spec.GetConfig()}) {
				bad("config of service %s is not its head revision %d's", name, ro.Head)
			}
		}
		if ro.Previous != 0 && revs[name][ro.Previous] == nil {
			bad("rollout of %s: previous revision %d does not exist", name, ro.Previous)
		}
		if ro.Previous > ro.Target {
			bad("rollout of %s: previous revision %d is after its target %d", name, ro.Previous, ro.Target)
		}
		for n := range revs[name] {
			if n > ro.Head {
				bad("revision %d of %s is after its rollout's head %d", n, name, ro.Head)
			}
		}
		if ro.Permits != permits[name] {
			bad("rollout of %s counts %d permits; %d are out", name, ro.Permits, permits[name])
		}
		if ro.Permits > 0 && ro.Permits > ro.PermitLimit {
			bad("rollout of %s has %d permits out, over its limit of %d", name, ro.Permits, ro.PermitLimit)
		}
		if ro.State == pb.RolloutState_ROLLOUT_STATE_UNSPECIFIED || pb.RolloutState_name[int32(ro.State)] == "" {
			bad("rollout of %s has no valid state (%v)", name, ro.State)
		}
		if gates[name] > MaxGateDecisions {
			bad("service %s keeps %d gate decisions, over %d", name, gates[name], MaxGateDecisions)
		}
	}
	for name := range rollouts {
		if m.services[name] == nil {
			bad("rollout of service %s, which does not exist", name)
		}
	}
	for name := range revs {
		if m.services[name] == nil {
			bad("revisions of service %s, which does not exist", name)
		}
	}
	for name := range m.units {
		if units[name] == nil {
			bad("unit %s has no unit-revision", name)
		}
	}
	for name, ur := range units {
		u := m.units[name]
		if u == nil {
			bad("unit-revision of unit %s, which does not exist", name)
			continue
		}
		ro := rollouts[u.Service]
		for _, n := range []int64{ur.Current, ur.Target} {
			if revs[u.Service][n] == nil {
				bad("unit %s: revision %d of %s does not exist", name, n, u.Service)
			}
			if ro != nil && (n < ro.Previous || n > ro.Target) {
				bad("unit %s: revision %d is outside its rollout's, from %d to %d", name, n, ro.Previous, ro.Target)
			}
		}
		if len(ur.Note) > MaxNoteBytes {
			bad("unit %s: note of %d bytes, over %d", name, len(ur.Note), MaxNoteBytes)
		}
	}
	for _, p := range ps {
		u, ur := m.units[p.unit], units[p.unit]
		switch {
		case u == nil || u.Service != p.svc:
			bad("permit of %s for unit %s, which does not exist", p.svc, p.unit)
		case ur == nil:
		case ur.Target != p.p.Revision:
			bad("permit of unit %s is for revision %d; the unit targets %d", p.unit, p.p.Revision, ur.Target)
		case rollouts[p.svc] != nil && p.p.Revision > rollouts[p.svc].Target:
			bad("permit of unit %s is for revision %d, after its rollout's target %d", p.unit, p.p.Revision, rollouts[p.svc].Target)
		}
	}
}
