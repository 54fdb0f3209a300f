package pki

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
)

// Metadata keys that carry a credential with each request (gRPC metadata,
// that is HTTP/2 headers: lowercase).
const (
	MetadataTag    = "lifeline-tag"
	MetadataSecret = "lifeline-secret"
)

// secretBytes is how many random bytes a secret holds.
const secretBytes = 32

// hashPrefix names the algorithm of a hash made by HashSecret, so that a
// later version can tell old hashes from new ones.
const hashPrefix = "sha256:"

// Credential is what an entity presents with every request: its tag and its
// secret. It formats (%v, %s, %#v) as its tag alone, so that logging one does
// not leak the secret.
//
// Its GetRequestMetadata and RequireTransportSecurity methods make it a
// gRPC credentials.PerRPCCredentials: grpc.WithPerRPCCredentials(cred) sends
// it with every call, and only over TLS.
type Credential struct {
	Tag    string
	Secret string
}

// NewCredential returns a credential for tag with a new secret, and the hash
// of that secret, which is what the controller stores.
func NewCredential(tag string) (cred Credential, hash string, err error) {
	if _, _, err := names.ParseTag(tag); err != nil {
		return Credential{}, "", fmt.Errorf("new credential: %w", err)
	}
	secret, err := NewSecret()
	if err != nil {
		return Credential{}, "", fmt.Errorf("new credential for %s: %w", tag, err)
	}
	return Credential{Tag: tag, Secret: secret}, HashSecret(secret), nil
}

// Validate checks that c has a well-formed tag and a secret shaped like one
// that NewSecret makes.
func (c Credential) Validate() error {
	if _, _, err := names.ParseTag(c.Tag); err != nil {
		return err
	}
	if c.Secret == "" {
		return fmt.Errorf("credential %s: empty secret", c.Tag)
	}
	if !validSecret(c.Secret) {
		return fmt.Errorf("credential %s: malformed secret: want %d or more random bytes, URL-safe base64 without padding", c.Tag, secretBytes)
	}
	return nil
}

// String returns c's tag: never its secret.
func (c Credential) String() string { return c.Tag }

// GoString returns c with its secret redacted.
func (c Credential) GoString() string {
	return fmt.Sprintf("pki.Credential{Tag:%q, Secret:<redacted>}", c.Tag)
}

// GetRequestMetadata returns the request metadata that carries c: MetadataTag
// and MetadataSecret. (Its name is gRPC's PerRPCCredentials interface's.)
func (c Credential) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	return map[string]string{MetadataTag: c.Tag, MetadataSecret: c.Secret}, nil
}

// RequireTransportSecurity reports true: a credential is never sent in clear.
func (c Credential) RequireTransportSecurity() bool { return true }

// CredentialFromMetadata returns the credential carried by request metadata
// md (a gRPC metadata.MD converts implicitly): exactly one MetadataTag that
// parses and exactly one non-empty MetadataSecret. It checks the form only;
// the caller looks up the hash stored for the tag and calls VerifySecret. An
// error here means the caller is unauthenticated.
func CredentialFromMetadata(md map[string][]string) (Credential, error) {
	tag, err := metadataValue(md, MetadataTag)
	if err != nil {
		return Credential{}, err
	}
	if _, _, err := names.ParseTag(tag); err != nil {
		return Credential{}, err
	}
	secret, err := metadataValue(md, MetadataSecret)
	if err != nil {
		return Credential{}, err
	}
	return Credential{Tag: tag, Secret: secret}, nil
}

func metadataValue(md map[string][]string, key string) (string, error) {
	switch vals := md[key]; {
	case len(vals) == 0 || vals[0] == "":
		return "", fmt.Errorf("no %s in request metadata", key)
	case len(vals) > 1:
		return "", fmt.Errorf("%d values of %s in request metadata, want 1", len(vals), key)
	default:
		return vals[0], nil
	}
}

// NewSecret returns a new secret: 32 bytes from crypto/rand, URL-safe base64
// without padding (43 characters).
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// HashSecret returns the hash of secret that the controller stores in place
// of the secret: "sha256:" and the URL-safe base64 of its SHA-256 digest.
//
// A fast hash is right here, where it would be wrong for passwords. A slow
// KDF (bcrypt, scrypt, argon2) makes each guess at a low-entropy password
// expensive for someone holding its hash; but a secret from NewSecret is 256
// random bits, so guessing it is hopeless however fast each guess is, and
// recovering it from its hash means inverting SHA-256. Salt is unneeded for
// the same reason: two secrets never coincide and there is no dictionary to
// precompute. A fast hash also keeps checking the credential of every call
// cheap, and gives no one a way to load the controller with expensive hashing
// by sending bad secrets.
//
// This reasoning holds only for secrets from NewSecret: never hash a
// password chosen by a person with it. VerifySecret refuses secrets shorter
// than NewSecret's.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hashPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// VerifySecret reports whether secret is the one whose hash (from HashSecret)
// is hash, comparing the digests in constant time. An empty or malformed
// secret or hash never verifies.
func VerifySecret(secret, hash string) bool {
	want, err := parseHash(hash)
	if err != nil || !validSecret(secret) {
		return false
	}
	got := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

// ValidateHash checks that hash has the form HashSecret gives, for a caller
// about to store one it did not make itself.
func ValidateHash(hash string) error {
	_, err := parseHash(hash)
	return err
}

func parseHash(hash string) ([]byte, error) {
	enc, ok := strings.CutPrefix(hash, hashPrefix)
	if !ok {
		return nil, errors.New("malformed secret hash: want sha256:<digest>")
	}
	digest, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(digest) != sha256.Size {
		return nil, errors.New("malformed secret hash: want a SHA-256 digest in URL-safe base64")
	}
	return digest, nil
}

// validSecret reports whether secret is shaped like one from NewSecret: at
// least secretBytes bytes, URL-safe base64 without padding.
func validSecret(secret string) bool {
	if len(secret) < base64.RawURLEncoding.EncodedLen(secretBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(secret)
	return err == nil
}
