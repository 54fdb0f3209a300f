package state

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/lifelinehq/lifeline/names"
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
// (and so revoking) any earlier one. A machine or unit must exist.
func (s *State) SetCredential(ctx context.Context, tag, hash string) error {
	return s.SetCredentials(ctx, map[string]string{tag: hash})
}

// MaxCredentialsAtOnce is the most credentials SetCredentials stores in
// one transaction: each is a comparison (its holder exists) and a write.
const MaxCredentialsAtOnce = MaxTxnOps / 2

// SetCredentials stores the hashes of the secrets of several holders, by
// tag, each as SetCredential does, in one transaction: all of them, or
// none when any holder is missing (the first missing, in the tags' order,
// is named).
func (s *State) SetCredentials(ctx context.Context, hashes map[string]string) error {
	if len(hashes) > MaxCredentialsAtOnce {
		return invalidf("%d credentials at once: at most %d", len(hashes), MaxCredentialsAtOnce)
	}
	tags := slices.Sorted(maps.Keys(hashes))
	c := &change{}
	type holder struct{ kind, id, key string }
	var holders []holder // the machines and units among them
	for _, tag := range tags {
		kind, id, err := names.ParseTag(tag)
		if err != nil {
			return invalidf("%v", err)
		}
		switch kind {
		case names.KindMachine:
			holders = append(holders, holder{kind, id, MachineKey(id)})
		case names.KindUnit:
			holders = append(holders, holder{kind, id, UnitKey(id)})
		}
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
