package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
)

// maxFileSize bounds what the package reads from any of its files: a
// certificate, a key or a client config is a few kilobytes.
const maxFileSize = 1 << 20

// WriteFileAtomic replaces path with data so that a reader, or the next start
// after a crash, sees either the old content or the new, never a part: it
// writes a temporary file with mode perm in the same directory, syncs it,
// renames it over path and syncs the directory.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = syncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for syncing there
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// readPrivateFile reads a file that must be accessible to its owner only
// (what names it in errors: "client config", "CA key"). It checks the mode of
// the file it opened, not of whatever the path names a moment earlier.
func readPrivateFile(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err) // matches fs.ErrNotExist when missing
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s is not a regular file", what, path)
	}
	if err := checkPrivateMode(path, what, fi.Mode()); err != nil {
		return nil, err
	}
	return readLimited(f, path, what)
}

// checkPrivateMode refuses a file that its group or others may read or write.
func checkPrivateMode(path, what string, mode os.FileMode) error {
	if runtime.GOOS == "windows" {
		return nil // permission bits mean nothing there
	}
	perm := mode.Perm()
	switch {
	case perm&0o044 != 0:
		return fmt.Errorf("%s %s is readable by others (mode %04o): chmod 600 it", what, path, perm)
	case perm&0o022 != 0:
		return fmt.Errorf("%s %s is writable by others (mode %04o): chmod 600 it", what, path, perm)
	}
	return nil
}

func readLimited(r io.Reader, path, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", what, path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read %s %s: larger than %d bytes", what, path, maxFileSize)
	}
	return data, nil
}

func encodePEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// parseCertsPEM parses every block of data, which must all be certificates,
// and at least one.
func parseCertsPEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected PEM block %q, want CERTIFICATE", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM-encoded certificate found")
	}
	return certs, nil
}

// parseCertPEM parses data holding exactly one certificate.
func parseCertPEM(data []byte) (*x509.Certificate, error) {
	certs, err := parseCertsPEM(data)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("found %d certificates, want 1", len(certs))
	}
	return certs[0], nil
}

// marshalKeyPEM encodes key as a PKCS #8 "PRIVATE KEY" block.
func marshalKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return encodePEM("PRIVATE KEY", der), nil
}

// parseKeyPEM parses a PKCS #8 or SEC 1 ("EC PRIVATE KEY") private key.
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM-encoded private key found")
	}
	switch block.Type {
	case "PRIVATE KEY":
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse private key: %w", err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("private key of type %T cannot sign", key)
		}
		return signer, nil
	case "EC PRIVATE KEY":
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse private key: %w", err)
		}
		return key, nil
	default:
		return nil, fmt.Errorf("unexpected PEM block %q, want PRIVATE KEY", block.Type)
	}
}

// keyMatches reports whether key is the private half of cert's public key.
func keyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(key.Public())
}

// newSerial returns a random 128-bit certificate serial number.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil // never zero
}
