package main

import (
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

	"github.com/lifelinehq/lifeline/state"
)

// What lets several controllers serve one model: the CA they share through
// etcd (cakey.go), each one's id and registration, and (in controller.go)
// the election of the one that runs the singleton workers.

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
