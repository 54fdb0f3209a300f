package state

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// machine-joins/<machine> holds a manual machine's join token while it
// waits for its host (pb.MachineJoin: the hash of its secret, its expiry). A
// manual machine has a credential only once its host joined: JoinMachine
// deletes the token in the transaction that stores the credential, so that
// a token joins once. The token goes with its machine (RemoveMachines).
const machineJoinsPrefix = "machine-joins/"

// MachineJoinKey is the key of machine id's join token.
func MachineJoinKey(id string) string { return machineJoinsPrefix + id }

// MaxJoinTokensAtOnce is the most join tokens SetJoinTokens stores in one
// transaction: each is a comparison (its machine as read) and a write.
const MaxJoinTokensAtOnce = MaxTxnOps / 2

// SetJoinTokens stores join tokens for manual machines, by machine id, each
// replacing any the machine has not used: all of them, in one
// transaction, or none when a machine is missing, not manual, or dead
// (the first such, in the ids' order, is named).
func (s *State) SetJoinTokens(ctx context.Context, tokens map[string]*pb.MachineJoin) error {
	if len(tokens) > MaxJoinTokensAtOnce {
		return invalidf("%d join tokens at once: at most %d", len(tokens), MaxJoinTokensAtOnce)
	}
	ids := slices.Sorted(maps.Keys(tokens))
	for _, id := range ids {
		if err := checkMachineID(id); err != nil {
			return err
		}
		if tokens[id].GetHash() == "" {
			return invalidf("join token of machine %s has no hash", id)
		}
	}
	what := "set join tokens"
	if len(ids) == 1 {
		what = "set the join token of machine " + ids[0]
	}
	return s.apply(ctx, what, func(ctx context.Context) (*change, error) {
		gets := make([]getOp, len(ids))
		for i, id := range ids {
			gets[i] = get(MachineKey(id))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		for i, id := range ids {
			m, err := machineFrom(r.one(i), id)
			if err != nil {
				return nil, err
			}
			switch {
			case !m.v.Manual:
				return nil, refused("join", "machine %s is not a manual machine: the provisioner starts its agent", id)
			case m.v.Life == pb.Life_LIFE_DEAD:
				return nil, refused("join", "machine %s is dead: no host joins it", id)
			}
			c.ifMod(m.key, m.mod)
			c.put(MachineJoinKey(id), tokens[id])
		}
		return c, nil
	})
}

// JoinMachine uses machine id's join token: when accept says the token's
// stored hash is that of the secret presented and the token has not
// expired at now, it deletes the token and stores credHash as the
// machine's credential (replacing any), in one transaction, so that one
// token joins one host. A token missing (used, or never issued) or not
// accepted is refused alike, with ErrBadJoinToken; so is an expired one,
// saying when it expired. A dead machine joins no host.
func (s *State) JoinMachine(ctx context.Context, id string, accept func(hash string) bool, now time.Time, credHash string) error {
	if err := checkMachineID(id); err != nil {
		return err
	}
	if credHash == "" {
		return invalidf("join of machine %s: no credential hash", id)
	}
	return s.apply(ctx, "join machine "+id, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(MachineJoinKey(id)), get(MachineKey(id)))
		if err != nil {
			return nil, err
		}
		tok, err := decode[pb.MachineJoin](r.one(0))
		if err != nil {
			return nil, err
		}
		if tok == nil || !accept(tok.v.Hash) {
			return nil, badJoinTokenf("the join token of machine %s is not valid: used already, replaced, or never issued", id)
		}
		if exp := time.Unix(0, tok.v.ExpiresUnixNano); !now.Before(exp) {
			return nil, badJoinTokenf("the join token of machine %s expired at %s: ask for another (ctl join-token %s)", id, exp.UTC().Format(time.RFC3339), id)
		}
		m, err := machineFrom(r.one(1), id)
		if err != nil {
			return nil, err
		}
		if m.v.Life == pb.Life_LIFE_DEAD {
			return nil, refused("join", "machine %s is dead: no host joins it", id)
		}
		c := &change{}
		c.ifMod(tok.key, tok.mod)
		c.ifMod(m.key, m.mod)
		c.del(tok.key)
		c.putRaw(credentialKey(names.MachineTag(id)), credHash)
		return c, nil
	})
}

// badJoinTokenf is an ErrBadJoinToken with its own sentence.
func badJoinTokenf(format string, args ...any) error {
	return &kindError{kind: ErrBadJoinToken, msg: fmt.Sprintf(format, args...)}
}
