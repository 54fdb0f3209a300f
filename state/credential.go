package state

import (
	"context"

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
	kind, id, err := names.ParseTag(tag)
	if err != nil {
		return invalidf("%v", err)
	}
	c := &change{}
	switch kind {
	case names.KindMachine:
		c.ifExists(MachineKey(id))
	case names.KindUnit:
		c.ifExists(UnitKey(id))
	}
	c.putRaw(credentialKey(tag), hash)
	ok, err := s.commit(ctx, c)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundf("%s %s not found", kind, id)
	}
	return nil
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
