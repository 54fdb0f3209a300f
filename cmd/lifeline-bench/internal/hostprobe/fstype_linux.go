package hostprobe

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Filesystem names the kind of filesystem dir is on, and says whether
// it keeps its files in memory only, where fsync returns at once and
// etcd's transactions cost no disk at all.
func Filesystem(dir string) (name string, inMemory bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", false, err
	}
	switch int64(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs", true, nil
	case unix.RAMFS_MAGIC:
		return "ramfs", true, nil
	case unix.EXT4_SUPER_MAGIC: // ext2 and ext3 too
		return "ext4", false, nil
	case unix.XFS_SUPER_MAGIC:
		return "xfs", false, nil
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs", false, nil
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay", false, nil
	case unix.NFS_SUPER_MAGIC:
		return "nfs", false, nil
	}
	return fmt.Sprintf("0x%x", st.Type), false, nil
}
