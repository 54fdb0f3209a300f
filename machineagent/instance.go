package machineagent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lifelinehq/lifeline/internal/pki"
)

// ErrFenced is returned by Run when another agent instance holds the
// machine: its presence was refused (FailedPrecondition) because another
// one is present. The error Run returns wraps it with the controller's
// sentence.
var ErrFenced = errors.New("the machine is another agent's")

// An agent instance is one run of the machine agent: a random id, new at
// each start, which its presence stream names so that the controller
// holds the machine for one instance at a time (state.PresentAs). The
// data directory keeps the id of the instance running (instanceFile), so
// that the next run, naming it as the instance before, takes the machine
// over at once rather than when the previous run's presence lapses. Only
// one process runs on a data directory at a time (lockFile): the previous
// instance the file names has stopped, or runs elsewhere on a copy of the
// directory, and the controller ends that one's presence once taken over.
const (
	instanceFile = "instance"
	lockFile     = "agent.lock"
)

// newInstance returns a new random instance id.
func newInstance() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("agent instance: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// claimDataDir locks dir for this process (the lock goes with the
// process, or with release) and records a new instance id in it, returning
// it and the previous run's, if any.
func claimDataDir(dir string) (instance, previous string, release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", "", nil, fmt.Errorf("machine agent: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return "", "", nil, fmt.Errorf("machine agent: another machine agent runs with data directory %s", dir)
		}
		return "", "", nil, fmt.Errorf("machine agent: lock %s: %w", dir, err)
	}
	release = func() { f.Close() }
	path := filepath.Join(dir, instanceFile)
	switch b, err := os.ReadFile(path); {
	case err == nil:
		previous = strings.TrimSpace(string(b))
	case !errors.Is(err, fs.ErrNotExist):
		release()
		return "", "", nil, fmt.Errorf("machine agent: %w", err)
	}
	if instance, err = newInstance(); err != nil {
		release()
		return "", "", nil, err
	}
	if err := pki.WriteFileAtomic(path, []byte(instance+"\n"), 0o600); err != nil {
		release()
		return "", "", nil, fmt.Errorf("machine agent: %w", err)
	}
	return instance, previous, release, nil
}
