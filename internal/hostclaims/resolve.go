package hostclaims

import "sort"

// UnitRevisions is one unit of a machine as a pass of its agent sees it.
type UnitRevisions struct {
	Unit string
	// Order is when the unit was assigned to the machine: lower is
	// earlier. Conflicts among units that did not change hold back the
	// later one.
	Order int64
	// Current are the claims of the revision the unit would run.
	Current *Claims
	// Changed says the unit moves to Current in this pass, from Previous
	// (nil for a new unit, which has nothing to roll back to: rolled back,
	// it claims nothing).
	Changed  bool
	Previous *Claims
}

// Outcome is what Resolve decided for a unit.
type Outcome int

const (
	// Kept: the unit runs its current revision.
	Kept Outcome = iota + 1
	// RolledBack: the unit keeps running its previous revision.
	RolledBack
	// Held: the unit's claims are dropped from the pass; it runs nothing
	// new.
	Held
)

func (o Outcome) String() string {
	switch o {
	case Kept:
		return "kept"
	case RolledBack:
		return "rolled back"
	case Held:
		return "held"
	}
	return "unknown"
}

// UnitResult is Resolve's decision for one unit.
type UnitResult struct {
	Unit    string
	Outcome Outcome
	// Claims are what the unit holds after the pass: Current when kept,
	// Previous when rolled back, nil when held.
	Claims *Claims
	// Conflicts are the unit's conflicts when it was rolled back or held
	// (empty when kept).
	Conflicts []Conflict
}

// Resolution is Resolve's result: one UnitResult per unit, sorted by unit
// name.
type Resolution struct {
	Units []UnitResult
}

// Result returns the unit's result, or false when the unit was not given.
func (r Resolution) Result(unit string) (UnitResult, bool) {
	i := sort.Search(len(r.Units), func(i int) bool { return r.Units[i].Unit >= unit })
	if i < len(r.Units) && r.Units[i].Unit == unit {
		return r.Units[i], true
	}
	return UnitResult{}, false
}

// Resolve decides which units of a machine run their current revision so
// that no two claims left conflict. While any pair conflicts: among the
// changed units (not yet rolled back) with conflicts, the one with the most
// conflicts (counted over all its pairs; ties to the lowest unit name) is
// rolled back — its claims become its previous ones, and it counts as
// unchanged from then on — and the conflicts are counted again. When only
// unchanged units conflict (a forced placement, or a rollback that meets
// one), the latest-assigned unit among those with conflicts (highest
// Order; ties to the highest unit name) is held: its claims leave the
// pass. A unit is rolled back or held only while it has a conflict, and
// each step removes one unit's current claims, so the loop ends within
// 2×len(units) steps. Units are named once; a repeated name is resolved
// as another unit.
func Resolve(units []UnitRevisions) Resolution {
	type state struct {
		UnitResult
		order   int64
		changed bool
		prev    *Claims
	}
	st := make([]*state, len(units))
	for i, u := range units {
		st[i] = &state{
			UnitResult: UnitResult{Unit: u.Unit, Outcome: Kept, Claims: u.Current},
			order:      u.Order,
			changed:    u.Changed,
			prev:       u.Previous,
		}
	}
	sort.SliceStable(st, func(i, j int) bool { return st[i].Unit < st[j].Unit })
	conflicts := make([][]Conflict, len(st))
	for {
		for i := range conflicts {
			conflicts[i] = conflicts[i][:0]
		}
		anyConflict := false
		for i := range st {
			for j := i + 1; j < len(st); j++ {
				if st[i].Claims == nil || st[j].Claims == nil {
					continue
				}
				ab := Conflicts(st[i].Claims, st[j].Claims)
				if len(ab) == 0 {
					continue
				}
				anyConflict = true
				conflicts[i] = append(conflicts[i], ab...)
				conflicts[j] = append(conflicts[j], Conflicts(st[j].Claims, st[i].Claims)...)
			}
		}
		if !anyConflict {
			break
		}
		// The changed unit with the most conflicts; st is sorted by name,
		// so the first of the most is the lowest name.
		pick := -1
		for i, s := range st {
			if s.changed && len(conflicts[i]) > 0 && (pick < 0 || len(conflicts[i]) > len(conflicts[pick])) {
				pick = i
			}
		}
		if pick >= 0 {
			s := st[pick]
			s.Outcome, s.Claims, s.changed = RolledBack, s.prev, false
			s.Conflicts = append([]Conflict(nil), conflicts[pick]...)
			continue
		}
		// Only unchanged units conflict: hold the latest assigned.
		for i, s := range st {
			if len(conflicts[i]) > 0 && (pick < 0 || s.order >= st[pick].order) {
				pick = i
			}
		}
		s := st[pick]
		s.Outcome, s.Claims = Held, nil
		s.Conflicts = append([]Conflict(nil), conflicts[pick]...)
	}
	res := Resolution{Units: make([]UnitResult, len(st))}
	for i, s := range st {
		res.Units[i] = s.UnitResult
	}
	return res
}
