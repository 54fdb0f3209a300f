package state

import (
	"context"
	"sort"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// resolved/<unit> holds an operator's answer to a unit's failed hook until
// the unit's agent acts on it.
const resolvedPrefix = "resolved/"

// ResolvedKey is the key of the named unit's resolved mark.
func ResolvedKey(unit string) string { return resolvedPrefix + unit }

// SetResolved marks the named unit's failed hook resolved, to be run again
// or counted as done. The transaction that sets the mark decides whether
// it may: the unit must exist (ErrNotFound), its agent's status must be
// error (ErrNotInError), and it must have no mark its agent has yet to act
// on (ErrAlreadyResolved): a second answer would be lost, or would answer a
// later failure nobody has seen.
func (s *State) SetResolved(ctx context.Context, unit string, mode pb.ResolvedMode) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	if mode == pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
		return invalidf("resolved needs a mode")
	}
	return s.apply(ctx, "resolve unit "+unit, func(ctx context.Context) (*change, error) {
		agentKey := StatusKey(StatusUnitAgent, unit)
		r, err := s.read(ctx, getExists(UnitKey(unit)), get(agentKey), get(ResolvedKey(unit)))
		if err != nil {
			return nil, err
		}
		if r.ranges[0].Count == 0 {
			return nil, notFoundf("unit %s not found", unit)
		}
		prev, err := decode[pb.Resolved](r.one(2))
		if err != nil {
			return nil, err
		}
		if prev != nil {
			if prev.v.Mode == pb.ResolvedMode_RESOLVED_MODE_NO_RETRY {
				return nil, alreadyResolvedf("unit %s is already resolved: its agent has yet to count its failed hook as done", unit)
			}
			return nil, alreadyResolvedf("unit %s is already resolved: its agent has yet to run its failed hook again", unit)
		}
		agent, err := decode[pb.Status](r.one(1))
		if err != nil {
			return nil, err
		}
		if agent == nil || agent.v.Status != "error" {
			return nil, notInErrorf("unit %s is not in an error state", unit)
		}
		c := &change{}
		c.ifExists(UnitKey(unit))
		c.ifMod(agentKey, agent.mod)
		c.ifAbsent(ResolvedKey(unit))
		c.put(ResolvedKey(unit), &pb.Resolved{Mode: mode})
		return c, nil
	})
}

// UnitsInError returns, sorted, the units whose agent's status is error:
// those SetResolved would answer. It reads every unit agent's status, as
// the model's status does.
func (s *State) UnitsInError(ctx context.Context) ([]string, error) {
	prefix := statusPrefix + string(StatusUnitAgent) + "/"
	kvs, err := s.listAll(ctx, prefix, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range kvs {
		st, err := decode[pb.Status](kv)
		if err != nil {
			return nil, err
		}
		if st.v.Status == "error" {
			out = append(out, strings.TrimPrefix(string(kv.Key), prefix))
		}
	}
	sort.Strings(out)
	return out, nil
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
