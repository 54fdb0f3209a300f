package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/pki"
	"github.com/lifelinehq/lifeline/state"
)

// What lets several controllers serve one model: the CA they share through
// etcd, each one's id and registration, and (in controller.go) the election
// of the one that runs the singleton workers.

// controllerTTL is how long a controller that stopped keeping its leases
// (a crash, a partition) still counts: as a live controller agents may
// dial, and as the leader of the singleton workers.
const controllerTTL = 8 * time.Second

// controllerID returns this controller's id, made on first start and kept
// in the data directory.
func controllerID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "controller-id")
	data, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(data)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("controller id: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := "c-" + hex.EncodeToString(b)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("controller id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("controller id: %w", err)
	}
	return id, nil
}

// sharedCA returns the model's CA and keeps a copy in dir: the one stored
// in etcd, or, for the model's first controller, the one in dir (made now
// if there is none), which it stores for the others.
func sharedCA(ctx context.Context, st *state.State, dir string, logger hclog.Logger) (*pki.CA, error) {
	local, created, err := pki.LoadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	keyPEM, err := local.KeyPEM()
	if err != nil {
		return nil, err
	}
	certPEM, storedKey, err := st.SharedCA(ctx, local.CertPEM(), keyPEM)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(certPEM, local.CertPEM()) {
		if created {
			logger.Info("created the model's CA", "dir", dir)
		}
		return local, nil
	}
	ca, err := pki.ParseCA(certPEM, storedKey)
	if err != nil {
		return nil, fmt.Errorf("the model's CA stored in etcd: %w", err)
	}
	if err := pki.SaveCA(dir, ca); err != nil {
		return nil, err
	}
	if created {
		logger.Info("joined the model: using its CA", "dir", dir)
	} else {
		logger.Warn("this data directory's CA is not the model's: replaced by the model's (clients that trusted the old one need the model's CA)", "dir", dir)
	}
	return ca, nil
}

// register keeps this controller listed among the live ones until ctx
// ends, registering again after any lapse.
func register(ctx context.Context, st *state.State, id string, addrs []string, logger hclog.Logger) error {
	wait := time.Second
	for {
		p, err := st.RegisterController(ctx, id, addrs, controllerTTL)
		if err == nil {
			wait = time.Second
			select {
			case <-ctx.Done():
				p.Close()
				return nil
			case <-p.Lost():
				p.Close()
				logger.Warn("controller registration lapsed: registering again")
			}
		} else if ctx.Err() == nil {
			logger.Warn("cannot register the controller", "error", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}
