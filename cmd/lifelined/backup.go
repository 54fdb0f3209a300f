package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
)

// backupCommand copies the model of a running controller's embedded etcd
// into a file.
func backupCommand() *cobra.Command {
	var dataDir, to string
	cmd := &cobra.Command{
		Use:   "backup --data-dir DIR --to FILE",
		Short: "Copy the model of a running controller's embedded etcd into a file",
		Long: `Copies the model held by the embedded etcd of the controller whose data
directory is DIR into FILE, while the controller runs: etcd's snapshot of
its database, written whole or not at all. Keep DIR/pki with it: the
model's CA key in etcd is sealed with the key there, and a restored model
needs it. A model in an external etcd cluster is backed up with that
cluster's own tools (etcdctl snapshot save).`,
		Example: `  lifelined backup --data-dir /var/lib/lifeline/controller --to /backup/lifeline-$(date +%F).db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" || to == "" {
				return usageError{errors.New("backup needs --data-dir and --to")}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			version, err := embedetcd.Backup(ctx, filepath.Join(dataDir, "etcd"), to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up the model of %s to %s (etcd %s)\n", dataDir, to, version)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the running controller's data directory")
	cmd.Flags().StringVar(&to, "to", "", "the `FILE` to write")
	return cmd
}

// restoreCommand makes a stopped controller's data directory hold the
// model of a backup.
func restoreCommand() *cobra.Command {
	var dataDir, from string
	cmd := &cobra.Command{
		Use:   "restore --data-dir DIR --from FILE",
		Short: "Make a stopped controller's embedded etcd hold the model of a backup",
		Long: `Makes the data directory DIR of a stopped controller hold the model
backed up in FILE (lifelined backup): its embedded etcd member is made
from the snapshot. DIR/etcd/member-data must not exist: move it aside
first. DIR/pki must be the one backed up with the model (its key unseals
the model's CA key). Then start the controller on DIR; its machines'
agents reconnect as after any restart.`,
		Example: `  systemctl stop lifeline-controller
  mv /var/lib/lifeline/controller/etcd/member-data /var/lib/lifeline/member-data.old
  lifelined restore --data-dir /var/lib/lifeline/controller --from /backup/lifeline-2026-12-01.db
  systemctl start lifeline-controller`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" || from == "" {
				return usageError{errors.New("restore needs --data-dir and --from")}
			}
			if err := embedetcd.Restore(filepath.Join(dataDir, "etcd"), from); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored the model of %s into %s: start the controller on it\n", from, dataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped controller's data directory")
	cmd.Flags().StringVar(&from, "from", "", "the backup `FILE` (lifelined backup)")
	return cmd
}
