package state

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/lifelinehq/lifeline/internal/names"
)

// Credentials are stored as the hash of each holder's secret, at
// credentials/<tag>. A machine's or unit's credential goes with the entity:
// removing it revokes the credential in the same transaction.
const credentialsPrefix = "credentials/"

// CredentialsPrefix is where the credentials are, for watching them: the
// key of tag's credential is CredentialsPrefix+tag, its value the hash.
const CredentialsPrefix = credentialsPrefix

func credentialKey(tag string) string { return credentialsPrefix + tag }

// SetCredential stores the hash of the secret of tag's holder, replacing
// (and so revoking) any earlier one. A machine or unit must exist; a
// user's credential is SetUserCredential's.
func (s *State) SetCredential(ctx context.Context, tag, hash string) error {
	return s.SetCredentials(ctx, map[string]string{tag: hash})
}

// MaxCredentialsAtOnce is the most credentials SetCredentials stores in
// one transaction: each is a comparison (its holder exists) and a write,
// beside one comparison of the asking agent's presence
// (SetCredentialsWhilePresent).
const MaxCredentialsAtOnce = (MaxTxnOps - 1) / 2

// credentialHolder is a machine or unit a credential is stored for, and
// its record's key.
type credentialHolder struct{ kind, id, key string }

// credentialHolders are the machines and units among the tags of hashes,
// in the tags' order; a tag that does not parse is refused, and so is a
// user's, which is SetUserCredential's to store.
func credentialHolders(hashes map[string]string) ([]credentialHolder, error) {
	var holders []credentialHolder
	for _, tag := range slices.Sorted(maps.Keys(hashes)) {
		kind, id, err := names.ParseTag(tag)
		if err != nil {
			return nil, invalidf("%v", err)
		}
		switch kind {
		case names.KindUser:
			return nil, invalidf("the credential of user %s is its own to set (SetUserCredential)", id)
		case names.KindMachine:
			holders = append(holders, credentialHolder{kind, id, MachineKey(id)})
		case names.KindUnit:
			holders = append(holders, credentialHolder{kind, id, UnitKey(id)})
		}
	}
	return holders, nil
}

// SetCredentials stores the hashes of the secrets of several holders, by
// tag, each as SetCredential does, in one transaction: all of them, or
// none when any holder is missing (the first missing, in the tags' order,
// is named).
func (s *State) SetCredentials(ctx context.Context, hashes map[string]string) error {
	if len(hashes) > MaxCredentialsAtOnce {
		return invalidf("%d credentials at once: at most %d", len(hashes), MaxCredentialsAtOnce)
	}
	holders, err := credentialHolders(hashes)
	if err != nil {
		return err
	}
	c := &change{}
	for _, tag := range slices.Sorted(maps.Keys(hashes)) {
		c.putRaw(credentialKey(tag), hashes[tag])
	}
	for _, h := range holders {
		c.ifExists(h.key)
	}
	ok, err := s.commit(ctx, c)
	if err != nil || ok {
		return err
	}
	// A holder is missing: name the first, in the tags' order.
	gets := make([]getOp, len(holders))
	for i, h := range holders {
		gets[i] = getKeyOnly(h.key)
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return err
	}
	for i, h := range holders {
		if r.one(i) == nil {
			return notFoundf("%s %s not found", h.kind, h.id)
		}
	}
	// Every holder is there now: the one missing at the commit was
	// added since.
	return fmt.Errorf("set credentials: %w", ErrAborted)
}

// SetCredentialsWhilePresent is SetCredentials for the agent instance
// instance of agent (a tag): the credentials are stored only while that
// instance is agent's present one (PresentAs), which the transaction
// compares. Otherwise they are refused (ErrRefused): an agent of a machine
// fenced out by another does not issue its units' credentials, which
// would revoke the other's.
func (s *State) SetCredentialsWhilePresent(ctx context.Context, hashes map[string]string, agent, instance string) error {
	if len(hashes) > MaxCredentialsAtOnce {
		return invalidf("%d credentials at once: at most %d", len(hashes), MaxCredentialsAtOnce)
	}
	kind, id, err := names.ParseTag(agent)
	if err != nil {
		return invalidf("%v", err)
	}
	holders, err := credentialHolders(hashes)
	if err != nil {
		return err
	}
	tags := slices.Sorted(maps.Keys(hashes))
	return s.apply(ctx, "set credentials for "+agent, func(ctx context.Context) (*change, error) {
		gets := []getOp{get(presenceKey(agent))}
		for _, h := range holders {
			gets = append(gets, getExists(h.key))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		p := r.one(0)
		switch {
		case p == nil:
			return nil, refused("presence", "the agent of %s %s is not present (instance %q): it issues no credentials until it is", kind, id, instance)
		case string(p.Value) != instance:
			return nil, refused("presence", "another agent of %s %s is present (instance %q, not %q): this one issues no credentials", kind, id, p.Value, instance)
		}
		for i, h := range holders {
			if r.ranges[i+1].Count == 0 {
				return nil, notFoundf("%s %s not found", h.kind, h.id)
			}
		}
		c := &change{}
		c.ifMod(presenceKey(agent), p.ModRevision)
		for _, h := range holders {
			c.ifExists(h.key)
		}
		for _, tag := range tags {
			c.putRaw(credentialKey(tag), hashes[tag])
		}
		return c, nil
	})
}

// CredentialHash returns the stored hash of tag's secret.
func (s *State) CredentialHash(ctx context.Context, tag string) (string, error) {
	r, err := s.read(ctx, get(credentialKey(tag)))
	if err != nil {
		return "", err
	}
	kv := r.one(0)
	if kv == nil {
		return "", notFoundf("no credential for %s", tag)
	}
	return string(kv.Value), nil
}

// RevokeCredential deletes tag's credential.
func (s *State) RevokeCredential(ctx context.Context, tag string) error {
	_, err := s.kv.Delete(ctx, credentialKey(tag))
	return err
}
