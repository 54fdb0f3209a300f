package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnap "go.etcd.io/etcd/client/v3/snapshot"
	utilsnap "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Backup copies the model of the member running in dir (a controller's
// <data-dir>/etcd) into the file to, while it runs: etcd's snapshot of
// its database, through the member's socket, written beside to and
// renamed into place once whole and checked.
func Backup(ctx context.Context, dir, to string) (version string, err error) {
	sock := Config{Dir: dir}.socketPath()
	if _, err := os.Stat(sock); err != nil {
		return "", fmt.Errorf("no etcd member serves in %s (is the controller running, with etcd embedded?): %w", dir, err)
	}
	tmp := to + ".part"
	defer os.Remove(tmp)
	version, err = clientsnap.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{
		Endpoints: []string{"unix://" + sock}, DialTimeout: 10 * time.Second,
	}, tmp)
	if err != nil {
		return "", fmt.Errorf("snapshot of the member in %s: %w", dir, err)
	}
	if err := os.Rename(tmp, to); err != nil {
		return "", err
	}
	return version, nil
}

// Restore makes dir (a controller's <data-dir>/etcd) hold the member of
// the snapshot from, as Start then runs it: the controller must be
// stopped, and dir must hold no member (move it aside first).
func Restore(dir, from string) error {
	data := filepath.Join(dir, "member-data")
	if _, err := os.Stat(data); err == nil {
		return fmt.Errorf("%s holds a member already: stop the controller and move it aside first", data)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The member Start runs: its name, its cluster of one and its token.
	peer := "http://127.0.0.1:0"
	return utilsnap.NewV3(zap.NewNop()).Restore(utilsnap.RestoreConfig{
		SnapshotPath:        from,
		Name:                "lifeline",
		OutputDataDir:       data,
		PeerURLs:            []string{peer},
		InitialCluster:      "lifeline=" + peer,
		InitialClusterToken: "lifeline",
	})
}
