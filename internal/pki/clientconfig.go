package pki

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// ClientConfig is the operator's client config file: where the controllers
// are, the CA that signed their certificates, and the operator's credential.
// On disk it is JSON:
//
//	{
//	  "controllers": ["10.0.0.5:17070"],
//	  "ca_cert": "-----BEGIN CERTIFICATE-----\n...",
//	  "tag": "admin",
//	  "secret": "..."
//	}
//
// It formats (%v, %#v) with its secret redacted.
type ClientConfig struct {
	// Controllers are the controllers' addresses, host:port each.
	Controllers []string `json:"controllers"`
	// CACert is the controllers' CA certificate, PEM-encoded.
	CACert string `json:"ca_cert"`
	// Tag and Secret are the operator's credential.
	Tag    string `json:"tag"`
	Secret string `json:"secret"`
}

// Credential returns the credential of c.
func (c ClientConfig) Credential() Credential { return Credential{Tag: c.Tag, Secret: c.Secret} }

// Validate checks that c names at least one controller, each as host:port,
// holds a CA certificate and a well-formed credential.
func (c ClientConfig) Validate() error {
	if len(c.Controllers) == 0 {
		return errors.New("no controller addresses")
	}
	for _, addr := range c.Controllers {
		if err := checkHostPort(addr); err != nil {
			return err
		}
	}
	if c.CACert == "" {
		return errors.New("no CA certificate")
	}
	if _, err := caPool([]byte(c.CACert)); err != nil {
		return err
	}
	return c.Credential().Validate()
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("invalid controller address %q: want host:port", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("invalid controller address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// String returns c with its secret redacted.
func (c ClientConfig) String() string {
	return fmt.Sprintf("{Controllers:%v Tag:%s Secret:<redacted>}", c.Controllers, c.Tag)
}

// GoString returns c with its secret redacted.
func (c ClientConfig) GoString() string {
	return fmt.Sprintf("pki.ClientConfig{Controllers:%#v, CACert:%q, Tag:%q, Secret:<redacted>}", c.Controllers, c.CACert, c.Tag)
}

// WriteClientConfig validates c and writes it to path, mode 0600, atomically
// (a temporary file in the same directory, synced, renamed over path, and the
// directory synced). It creates missing parent directories with mode 0700.
func WriteClientConfig(path string, c ClientConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("write client config %s: %w", path, err)
	}
	data = append(data, '\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	return nil
}

// ReadClientConfig reads and validates the client config at path. It refuses
// a file that its group or others may read or write.
func ReadClientConfig(path string) (ClientConfig, error) {
	data, err := readPrivateFile(path, "client config")
	if err != nil {
		return ClientConfig{}, err
	}
	var c ClientConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return ClientConfig{}, fmt.Errorf("parse client config %s: %s", path, jsonErrorText(data, err))
	}
	if err := c.Validate(); err != nil {
		return ClientConfig{}, fmt.Errorf("client config %s: %w", path, err)
	}
	return c, nil
}

// jsonErrorText describes a JSON decoding error with the line and column
// where it happened, when it says where.
func jsonErrorText(data []byte, err error) string {
	var offset int64
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		offset = syntaxErr.Offset
	case errors.As(err, &typeErr):
		offset = typeErr.Offset
	default:
		return err.Error()
	}
	// The offset is just past the offending byte.
	pos := min(max(offset-1, 0), int64(len(data)))
	before := data[:pos]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}

// DefaultClientConfigPath returns where ctl keeps its client config:
// $LIFELINE_CONFIG when set, otherwise lifeline/client.json under the user's
// config directory ($XDG_CONFIG_HOME, or ~/.config, on Linux).
//
// It reads the environment, which components must not (STYLE.md): it is for
// main to call, to pick the default of its flag.
func DefaultClientConfigPath() (string, error) {
	if p := os.Getenv("LIFELINE_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find client config: %w: set LIFELINE_CONFIG", err)
	}
	return filepath.Join(dir, "lifeline", "client.json"), nil
}
