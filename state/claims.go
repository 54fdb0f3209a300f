package state

import (
	"context"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Placement's claims check (rule P1). A charm's record holds its static
// host claims (pb.StaticClaims: what every unit claims whatever its config
// and facts). A unit placed on a given machine, by AddUnits with a
// Placement.Machine, AssignUnit or AddSubordinate beside its principal, is
// refused when its charm's static claims, at the revision it starts on
// (its service's rollout target), conflict with those of a unit already on
// the machine, principal or subordinate, at the revision it runs and at
// the one it is moving to when that differs (either may be the one it
// ends on, a rollout going on or back). A unit AssignUnit places is
// compared at both of its own too. A new machine has no unit to conflict
// with, and a forced placement (Placement.Force) is not checked: the
// machine agent holds one of the units back.
//
// Only certain conflicts refuse: overlapping ports of one protocol; one
// absolute path with different content (both written as is) or mode; one
// package at two versions (an empty version is any). A file whose
// content is a template still claims its path and mode; its content is
// known on the machine alone, where the agent compares what it renders.
//
// The check reads the machine's units as of a revision and the
// transaction that places the unit asserts that no key under
// refs/machine-units/<m>/ changed since (ifNoNewer): a principal placed
// there puts its own reference, and a subordinate with static claims
// puts its principal's again, so of two placements racing on one machine
// the second to commit reads again and sees the first. A rollout moving a
// unit already there to a revision that conflicts is not a placement: the
// machine agent rolls the changed unit back.

// claimsRule names the rule in refusals.
const claimsRule = "P1"

// heldClaims are a unit's static claims on its machine: at its current
// revision and at its target when that differs.
type heldClaims struct {
	unit   string
	claims []*pb.StaticClaims
}

// machineClaims are the static claims of the units on a machine, read as
// of rev: what a placement there compares.
type machineClaims struct {
	machine string
	rev     int64
	units   []heldClaims
}

// readMachineClaims reads the static claims of the units on machine: its
// principals (as of the revision returned with them), their subordinates,
// and for each the charm of the revisions it runs and targets.
func (s *State) readMachineClaims(ctx context.Context, machine string) (*machineClaims, error) {
	kvs, rev, err := s.listRevAt(ctx, machineUnitsPrefix(machine), true, 0)
	if err != nil {
		return nil, err
	}
	principals := keySuffixes(kvs, machineUnitsPrefix(machine))
	subs, err := s.subordinatesOf(ctx, principals, "")
	if err != nil {
		return nil, err
	}
	units := append(principals, subs...)
	mc := &machineClaims{machine: machine, rev: rev}
	if len(units) == 0 {
		return mc, nil
	}
	gets := make([]getOp, len(units))
	for i, u := range units {
		gets[i] = get(UnitRevisionKey(u))
	}
	urs, err := s.readEach(ctx, gets)
	if err != nil {
		return nil, err
	}
	// The revisions each unit runs and targets, each read once.
	revs := map[string]int{}
	var revKeys []getOp
	unitRevs := make([][]string, len(units))
	for i, u := range units {
		ur, err := decode[pb.UnitRevision](urs[i])
		if err != nil {
			return nil, err
		}
		if ur == nil {
			// Gone since the principals were read: removed units
			// claim nothing.
			continue
		}
		for _, n := range []int64{ur.v.Current, ur.v.Target} {
			k := RevisionKey(names.UnitService(u), n)
			if len(unitRevs[i]) > 0 && unitRevs[i][0] == k {
				continue
			}
			if _, ok := revs[k]; !ok {
				revs[k] = len(revKeys)
				revKeys = append(revKeys, get(k))
			}
			unitRevs[i] = append(unitRevs[i], k)
		}
	}
	revKVs, err := s.readEach(ctx, revKeys)
	if err != nil {
		return nil, err
	}
	refs := make([]*pb.CharmRef, len(revKVs))
	for i, kv := range revKVs {
		r, err := decode[pb.Revision](kv)
		if err != nil {
			return nil, err
		}
		if r != nil {
			refs[i] = r.v.GetSpec().GetCharm()
		}
	}
	claims, err := s.charmClaims(ctx, refs)
	if err != nil {
		return nil, err
	}
	for i, u := range units {
		h := heldClaims{unit: u}
		for _, k := range unitRevs[i] {
			if c := claims[revs[k]]; c != nil {
				h.claims = append(h.claims, c)
			}
		}
		if len(h.claims) > 0 {
			mc.units = append(mc.units, h)
		}
	}
	return mc, nil
}

// revisionClaims returns the static claims of the charm of service's
// revision n: nil when it claims nothing static or the revision is gone.
func (s *State) revisionClaims(ctx context.Context, service string, n int64) (*pb.StaticClaims, error) {
	r, err := s.read(ctx, get(RevisionKey(service, n)))
	if err != nil {
		return nil, err
	}
	rev, err := decode[pb.Revision](r.one(0))
	if err != nil || rev == nil {
		return nil, err
	}
	c, err := s.charmClaims(ctx, []*pb.CharmRef{rev.v.GetSpec().GetCharm()})
	if err != nil {
		return nil, err
	}
	return c[0], nil
}

// unitClaims returns the static claims of the charm of the revision
// unit runs and of the one it targets when another (none for those
// without).
func (s *State) unitClaims(ctx context.Context, unit string) ([]*pb.StaticClaims, error) {
	r, err := s.read(ctx, get(UnitRevisionKey(unit)))
	if err != nil {
		return nil, err
	}
	ur, err := decode[pb.UnitRevision](r.one(0))
	if err != nil || ur == nil {
		return nil, err
	}
	var out []*pb.StaticClaims
	for i, n := range []int64{ur.v.Current, ur.v.Target} {
		if i == 1 && n == ur.v.Current {
			break
		}
		c, err := s.revisionClaims(ctx, names.UnitService(unit), n)
		if err != nil {
			return nil, err
		}
		if c != nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// CheckPlacement is P1's check of n units of service, deployed from
// charm, on machine, made before the service exists: Deploy asks it first
// so that a refused placement leaves no service behind (one with a peer
// relation would only become dying). The units are named as AddUnits
// would name them; AddUnits checks again in its transaction. A service
// that exists already is passed over: AddService refuses it.
func (s *State) CheckPlacement(ctx context.Context, service string, charm *pb.CharmRef, machine string, n int) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	if err := checkMachineID(machine); err != nil {
		return err
	}
	claims, err := s.charmClaims(ctx, []*pb.CharmRef{charm})
	if err != nil || claims[0] == nil || n < 1 {
		return err
	}
	r, err := s.read(ctx, get(seqUnitKey(service)), getExists(ServiceKey(service)))
	if err != nil {
		return err
	}
	if r.ranges[1].Count > 0 {
		return nil // AddService refuses it
	}
	next, _, err := seqValue(r.one(0))
	if err != nil {
		return err
	}
	held, err := s.readMachineClaims(ctx, machine)
	if err != nil {
		return err
	}
	for i := range int64(n) {
		u := unitName(service, next+i)
		if err := held.check(u, claims[0]); err != nil {
			return err
		}
		held.units = append(held.units, heldClaims{unit: u, claims: claims})
	}
	return nil
}

// check refuses unit, placed on the machine with static claims c, when
// they conflict with a unit's there.
func (mc *machineClaims) check(unit string, c *pb.StaticClaims) error {
	for _, h := range mc.units {
		for _, hc := range h.claims {
			if what, detail := staticConflict(c, hc); what != "" {
				return refused(claimsRule, "cannot place %s on machine %s: %s is claimed by %s there%s", unit, mc.machine, what, h.unit, detail)
			}
		}
	}
	return nil
}

// staticConflict returns the first of a's claims that b's conflict with
// ("port 8080/tcp") and what differs in b's (" with other content"), or
// "" when none does. The rules are hostclaims.Conflicts' over what is
// known before rendering: ports of one protocol overlapping; one path
// with different content (when both are known) or mode; one package at
// two versions, neither empty.
func staticConflict(a, b *pb.StaticClaims) (what, detail string) {
	if a == nil || b == nil {
		return "", ""
	}
	for _, p := range a.Ports {
		for _, q := range b.Ports {
			if p.Protocol == q.Protocol && p.From <= q.To && q.From <= p.To {
				if p.From != q.From || p.To != q.To {
					detail = " (as " + portString(q) + ")"
				}
				return "port " + portString(p), detail
			}
		}
	}
	for _, f := range a.Files {
		for _, g := range b.Files {
			if f.Path != g.Path {
				continue
			}
			switch {
			case len(f.Sha256) > 0 && len(g.Sha256) > 0 && string(f.Sha256) != string(g.Sha256):
				return "file " + f.Path, " with other content"
			case f.Mode != g.Mode:
				return "file " + f.Path, fmt.Sprintf(" with mode %04o", g.Mode)
			}
		}
	}
	for _, p := range a.Packages {
		for _, q := range b.Packages {
			if p.Name == q.Name && p.Version != "" && q.Version != "" && p.Version != q.Version {
				return "package " + p.Name, " at version " + q.Version
			}
		}
	}
	return "", ""
}

// portString writes a port claim as metadata.yaml does: "8080/tcp",
// "9000-9010/udp".
func portString(p *pb.StaticPortClaim) string {
	if p.From == p.To {
		return fmt.Sprintf("%d/%s", p.From, p.Protocol)
	}
	return fmt.Sprintf("%d-%d/%s", p.From, p.To, p.Protocol)
}

// readEach reads gets, in round trips of at most maxPointReads, and
// returns the first key each found (nil for none), in order.
func (s *State) readEach(ctx context.Context, gets []getOp) ([]*mvccpb.KeyValue, error) {
	out := make([]*mvccpb.KeyValue, 0, len(gets))
	for len(gets) > 0 {
		batch := gets[:min(len(gets), maxPointReads)]
		gets = gets[len(batch):]
		r, err := s.read(ctx, batch...)
		if err != nil {
			return nil, err
		}
		for i := range batch {
			out = append(out, r.one(i))
		}
	}
	return out, nil
}

// claimsCacheSize bounds the charms whose static claims a State keeps.
const claimsCacheSize = 256

// claimsCache keeps the static claims of the charm revisions read, by
// name, revision and archive sha256: a charm record is never rewritten,
// and a placement reads the charms of every unit on its machine.
type claimsCache struct {
	mu sync.Mutex
	m  map[string]*pb.StaticClaims
}

// charmClaims returns the static claims of each charm revision of refs
// (nil for a nil ref, a charm gone or one without static claims), read in
// round trips of at most maxPointReads or kept from an earlier read.
func (s *State) charmClaims(ctx context.Context, refs []*pb.CharmRef) ([]*pb.StaticClaims, error) {
	out := make([]*pb.StaticClaims, len(refs))
	var gets []getOp
	var missing []int
	s.claims.mu.Lock()
	for i, ref := range refs {
		if ref == nil {
			continue
		}
		if c, ok := s.claims.m[claimsCacheKey(ref)]; ok {
			out[i] = c
			continue
		}
		gets = append(gets, get(CharmKey(ref.Name, ref.Revision)))
		missing = append(missing, i)
	}
	s.claims.mu.Unlock()
	if len(gets) == 0 {
		return out, nil
	}
	kvs, err := s.readEach(ctx, gets)
	if err != nil {
		return nil, err
	}
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	for j, kv := range kvs {
		c, err := decode[pb.Charm](kv)
		if err != nil {
			return nil, err
		}
		if c == nil {
			continue
		}
		i := missing[j]
		out[i] = c.v.StaticClaims
		if c.v.Sha256 != refs[i].Sha256 {
			continue
		}
		if s.claims.m == nil || len(s.claims.m) >= claimsCacheSize {
			s.claims.m = make(map[string]*pb.StaticClaims, claimsCacheSize)
		}
		s.claims.m[claimsCacheKey(refs[i])] = c.v.StaticClaims
	}
	return out, nil
}

func claimsCacheKey(ref *pb.CharmRef) string {
	return fmt.Sprintf("%s/%d/%s", ref.Name, ref.Revision, ref.Sha256)
}
