package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestBackupAndRestore: a running controller's model backed up, the
// controller stopped and its etcd member moved aside, the backup
// restored: the controller started again serves the model as it was
// backed up (a machine added after the backup is not there), to the
// same admin credential. Restoring over a member is refused.
func TestBackupAndRestore(t *testing.T) {
	dir := t.TempDir()
	_, cfg, stop := startStoppable(t, dir, 0)
	machines := func(want int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		op := operator(t, cfg)
		if want < 0 {
			if _, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1}, waitForReady()...); err != nil {
				t.Fatalf("AddMachines: %v", err)
			}
			return
		}
		st, err := op.Status(ctx, &pb.StatusRequest{}, waitForReady()...)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if got := len(st.GetStatus().GetMachines()); got != want {
			t.Fatalf("the model has %d machines, want %d", got, want)
		}
	}
	lld := func(args ...string) (string, error) {
		out, err := exec.Command(lifelined, args...).CombinedOutput()
		return string(out), err
	}
	machines(-1)
	backup := filepath.Join(dir, "model.db")
	if out, err := lld("backup", "--data-dir", filepath.Join(dir, "ctl"), "--to", backup); err != nil || !strings.Contains(out, "backed up the model") {
		t.Fatalf("lifelined backup: %v\n%s", err, out)
	}
	machines(-1)
	machines(2)
	stop()

	member := filepath.Join(dir, "ctl", "etcd", "member-data")
	if out, err := lld("restore", "--data-dir", filepath.Join(dir, "ctl"), "--from", backup); err == nil || !strings.Contains(out, "holds a member already") {
		t.Fatalf("lifelined restore over a member: %v\n%s", err, out)
	}
	if err := os.Rename(member, member+".old"); err != nil {
		t.Fatal(err)
	}
	if out, err := lld("restore", "--data-dir", filepath.Join(dir, "ctl"), "--from", backup); err != nil {
		t.Fatalf("lifelined restore: %v\n%s", err, out)
	}
	// On the address the client config names (the model's CA and the
	// admin's credential are the backed-up ones).
	_, cfg, _ = startStoppable(t, dir, 0, "--api-addr", cfg.Controllers[0])
	machines(1)
}
