package pki

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KEKFile is the file of a controller's data directory (beside the CA,
// mode 0600) that holds the key-encryption key of the model's CA key.
const KEKFile = "ca-kek"

// SealedKeyPEMType is the PEM block type of a CA key sealed by SealKey.
// It does not end in "PRIVATE KEY": nothing that looks for a clear key
// mistakes it for one.
const SealedKeyPEMType = "LIFELINE SEALED CA KEY"

// kekSize is a key-encryption key's length: AES-256.
const kekSize = 32

// kekPrefix starts a KEK file's text, so that a file of the wrong kind
// is recognised.
const kekPrefix = "lifeline-kek-1."

// ErrWrongKEK is matched (errors.Is) by OpenKey's error for a sealed key
// that the key-encryption key given cannot open: it was sealed with
// another (another model's, or one made since), or it was altered.
var ErrWrongKEK = errors.New("the key-encryption key does not open the CA key")

// KEK is a key-encryption key: 32 random bytes, the AES-256-GCM key with
// which the controllers of a model seal the model's CA key before storing
// it in etcd. It never goes into etcd itself: each controller keeps it in
// its data directory (KEKFile), and a controller joining the model
// receives it from another over TLS, in exchange for a one-time join
// token. It formats (%v, %s, %#v) without its bytes.
type KEK struct{ b [kekSize]byte }

// NewKEK returns a new key-encryption key from crypto/rand.
func NewKEK() (KEK, error) {
	var k KEK
	if _, err := rand.Read(k.b[:]); err != nil {
		return KEK{}, fmt.Errorf("new key-encryption key: %w", err)
	}
	return k, nil
}

// KEKFromBytes returns the key-encryption key of b, which must be 32 bytes
// (what Bytes returns, as a controller hands it to one that joins).
func KEKFromBytes(b []byte) (KEK, error) {
	var k KEK
	if len(b) != kekSize {
		return k, fmt.Errorf("a key-encryption key is %d bytes, not %d", kekSize, len(b))
	}
	copy(k.b[:], b)
	return k, nil
}

// Bytes returns the key's 32 bytes: for handing it to a controller that
// joins, never for logging or storing anywhere but KEKFile.
func (k KEK) Bytes() []byte { return append([]byte(nil), k.b[:]...) }

// IsZero says whether k is the zero value: no key.
func (k KEK) IsZero() bool { return k == KEK{} }

// String returns a placeholder: never the key.
func (k KEK) String() string { return "<key-encryption key>" }

// GoString returns a placeholder: never the key.
func (k KEK) GoString() string { return "pki.KEK{<redacted>}" }

// LoadKEK reads the key-encryption key kept in dir; ok is false when dir
// holds none. A file readable or writable by others, or not of the form
// SaveKEK writes, is an error.
func LoadKEK(dir string) (k KEK, ok bool, err error) {
	path := filepath.Join(dir, KEKFile)
	data, err := readPrivateFile(path, "key-encryption key")
	if errors.Is(err, fs.ErrNotExist) {
		return KEK{}, false, nil
	}
	if err != nil {
		return KEK{}, false, err
	}
	enc, found := strings.CutPrefix(strings.TrimSpace(string(data)), kekPrefix)
	if !found {
		return KEK{}, false, fmt.Errorf("key-encryption key %s: not a key-encryption key (it should start with %q)", path, kekPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return KEK{}, false, fmt.Errorf("key-encryption key %s is damaged: %w", path, err)
	}
	if k, err = KEKFromBytes(b); err != nil {
		return KEK{}, false, fmt.Errorf("key-encryption key %s: %w", path, err)
	}
	return k, true, nil
}

// SaveKEK writes k into dir (created, mode 0700, when missing) as KEKFile,
// mode 0600, atomically and synced: a key that seals the CA key stored in
// etcd must be on disk before the sealed key is stored.
func SaveKEK(dir string, k KEK) error {
	if k.IsZero() {
		return errors.New("save key-encryption key: no key")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save key-encryption key: %w", err)
	}
	text := kekPrefix + base64.RawURLEncoding.EncodeToString(k.b[:]) + "\n"
	if err := WriteFileAtomic(filepath.Join(dir, KEKFile), []byte(text), 0o600); err != nil {
		return fmt.Errorf("save key-encryption key: %w", err)
	}
	return nil
}

// RemoveKEK removes the key-encryption key kept in dir, if any.
func RemoveKEK(dir string) error {
	if err := os.Remove(filepath.Join(dir, KEKFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove key-encryption key: %w", err)
	}
	return nil
}

// SealKey returns ca's private key sealed with k: a PEM block of type
// SealedKeyPEMType holding a random 12-byte nonce and the AES-256-GCM
// encryption of the key's PKCS #8 form, authenticated together with the
// SHA-256 of the CA certificate (so that the sealed key opens only as the
// key of that certificate).
func (ca *CA) SealKey(k KEK) ([]byte, error) {
	if k.IsZero() {
		return nil, errors.New("seal the CA key: no key-encryption key")
	}
	keyPEM, err := ca.keyPEM()
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	aead, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(block.Bytes)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal the CA key: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, block.Bytes, sealAD(ca.cert.Raw))
	return encodePEM(SealedKeyPEMType, sealed), nil
}

// OpenCA returns the CA of certPEM whose key SealKey sealed with k into
// sealedPEM, checked as ParseCA checks a CA. A key that k does not open
// is an error matching ErrWrongKEK.
func OpenCA(certPEM, sealedPEM []byte, k KEK) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	block, _ := pem.Decode(sealedPEM)
	if block == nil || block.Type != SealedKeyPEMType {
		return nil, fmt.Errorf("CA key: not a sealed key (want a PEM block %q)", SealedKeyPEMType)
	}
	if k.IsZero() {
		return nil, fmt.Errorf("CA key: %w: no key-encryption key", ErrWrongKEK)
	}
	aead, err := newAEAD(k)
	if err != nil {
		return nil, err
	}
	if len(block.Bytes) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("CA key: the sealed key is truncated")
	}
	nonce, sealed := block.Bytes[:aead.NonceSize()], block.Bytes[aead.NonceSize():]
	der, err := aead.Open(nil, nonce, sealed, sealAD(cert.Raw))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", ErrWrongKEK)
	}
	return ParseCA(certPEM, encodePEM("PRIVATE KEY", der))
}

// IsSealedKey says whether data is a key sealed by SealKey (as opposed
// to a key in clear, as models stored before keys were sealed).
func IsSealedKey(data []byte) bool {
	block, _ := pem.Decode(data)
	return block != nil && block.Type == SealedKeyPEMType
}

func newAEAD(k KEK) (cipher.AEAD, error) {
	block, err := aes.NewCipher(k.b[:])
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key: %w", err)
	}
	return aead, nil
}

// sealAD is the additional data a sealed CA key is authenticated with:
// what it is, and the SHA-256 of its certificate's DER.
func sealAD(certDER []byte) []byte {
	sum := sha256.Sum256(certDER)
	return append([]byte("lifeline CA key for certificate sha256:"), sum[:]...)
}
