package state

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// resolved/<unit> holds an operator's answer to a unit's failed hook until
// the unit's agent acts on it.
const resolvedPrefix = "resolved/"

// ResolvedKey is the key of the named unit's resolved mark.
func ResolvedKey(unit string) string { return resolvedPrefix + unit }

// SetResolved marks the named unit's failed hook resolved, to be run again
// or counted as done. The unit must exist; whether it is in an error state
// is its agent's to say, and the caller's to check.
func (s *State) SetResolved(ctx context.Context, unit string, mode pb.ResolvedMode) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	if mode == pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
		return invalidf("resolved needs a mode")
	}
	c := &change{}
	c.ifExists(UnitKey(unit))
	c.put(ResolvedKey(unit), &pb.Resolved{Mode: mode})
	ok, err := s.commit(ctx, c)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundf("unit %s not found", unit)
	}
	return nil
}

// Resolved returns the named unit's resolved mark, RESOLVED_MODE_UNSPECIFIED
// when there is none.
func (s *State) Resolved(ctx context.Context, unit string) (pb.ResolvedMode, error) {
	if err := checkUnitName(unit); err != nil {
		return 0, err
	}
	r, err := s.read(ctx, get(ResolvedKey(unit)))
	if err != nil {
		return 0, err
	}
	m, err := decode[pb.Resolved](r.one(0))
	if err != nil || m == nil {
		return pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED, err
	}
	return m.v.Mode, nil
}

// ClearResolved removes the named unit's resolved mark.
func (s *State) ClearResolved(ctx context.Context, unit string) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	_, err := s.kv.Delete(ctx, ResolvedKey(unit))
	return err
}
