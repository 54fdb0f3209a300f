package hostexec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
)

// jobTasks is the job of the tests: a new unit's packages, files and
// daemons, a slow package among them. Its daemons carry dir in their
// environment, by which the test counts their processes.
func jobTasks(dir string) []Task {
	unit, unitDir := "kv/0", filepath.Join(dir, "units", "kv-0")
	env := map[string]string{"JOBTEST": dir}
	return []Task{
		{Kind: TaskInstall, Unit: unit, Packages: []Package{{Name: "base"}}},
		{Kind: TaskManage, Unit: unit, UnitDir: unitDir, File: File{Path: "kv.conf", Content: []byte("port=8080\n")}},
		{Kind: TaskRun, Unit: unit, Daemon: Daemon{Name: "first", Command: []string{"sleep", "1000"}, Env: env}},
		{Kind: TaskInstall, Unit: unit, Packages: []Package{{Name: "slow", Version: "2.0"}}},
		{Kind: TaskManage, Unit: unit, UnitDir: unitDir, File: File{Path: filepath.Join(dir, "host", "kv.env"), Content: []byte("X=1\n"), Mode: 0o600}},
		{Kind: TaskRun, Unit: unit, Daemon: Daemon{Name: "second", Command: []string{"sleep", "1000"}, Env: env}},
	}
}

// testHost is the Host of a machine agent whose files are under dir.
func testHost(dir string) (*Host, error) {
	pm, err := ParsePackageManager("exec:" + fakepkgPath)
	if err != nil {
		return nil, err
	}
	s, err := NewSupervisor(testConfig(nil, dir))
	if err != nil {
		return nil, err
	}
	return &Host{Packages: NewPackages(dir, pm), Supervisor: s}, nil
}

// runChildJob is the child's part: run the job as a machine agent would,
// supervisor and all, until done (or SIGKILLed).
func runChildJob(dir string) error {
	h, err := testHost(dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Supervisor.Run(ctx) }()
	_, err = h.RunJob(ctx, filepath.Join(dir, "job.json"), jobTasks(dir))
	cancel()
	<-done
	return err
}

// daemonsOf returns the pids of the session leaders whose environment
// holds JOBTEST=dir, by their command's first word after sleep's.
func daemonsOf(t *testing.T, dir string) []int {
	t.Helper()
	want := []byte("JOBTEST=" + dir + "\x00")
	var pids []int
	for _, pid := range procfs.PIDs() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if st, ok, _ := procfs.ReadStat(pid); ok && st.Session == pid && st.State != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

func journalOutcomes(t *testing.T, path string) []Outcome {
	var rec journalRecord
	if _, err := readRecord(path, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Outcomes
}

// TestJobKilledResumes runs the job in a child process, SIGKILLs it
// while it installs the slow package (after it started the first
// daemon), then runs the job again here: it resumes at the install, the
// first daemon is adopted, not started again, and the job completes.
func TestJobKilledResumes(t *testing.T) {
	_, db := fakepkg(t)
	dir := t.TempDir()
	journal := filepath.Join(dir, "job.json")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), childDirEnv+"="+dir, fakepkgEnv+"="+fakepkgPath, "FAKEPKG_SLOW=slow", "FAKEPKG_SLEEP=1h")
	var out syncbuf.Buffer
	child.Stdout, child.Stderr = &out, &out
	// Its own process group, so that the kill takes fakepkg with it.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
			child.Wait()
		}
	})
	poll.UntilSays(t, "the child to start the first daemon and reach the slow install", func() (bool, string) {
		n := len(journalOutcomes(t, journal))
		return n == 3, fmt.Sprintf("%d tasks done; child's output: %s", n, out.String())
	})
	syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
	child.Wait()
	killed = true
	first := daemonsOf(t, dir)
	if len(first) != 1 {
		t.Fatalf("after the kill, %d daemons run, want 1 (the first)", len(first))
	}

	h, err := testHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Supervisor.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := h.Supervisor.StopAll("kv/0"); err != nil {
			t.Error(err)
		}
	})
	got, err := h.RunJob(ctx, journal, jobTasks(dir))
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, o := range got {
		results = append(results, o.Result)
	}
	if want := []string{Changed, Changed, Changed, Changed, Changed, Changed}; !equalStrings(results, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	if st := state(t, h.Supervisor, "kv/0", "first"); st.Pid != first[0] {
		t.Errorf("first = %+v, want adopted as pid %d", st, first[0])
	}
	if n := len(daemonsOf(t, dir)); n != 2 {
		t.Errorf("%d daemons run, want 2: each once", n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "host", "kv.env")); err != nil || string(b) != "X=1\n" {
		t.Errorf("kv.env = %q, %v", b, err)
	}
	if log, want := fakepkgLog(t, db), []string{"install_base_1.0", "install_slow_2.0"}; !equalStrings(log, want) {
		t.Errorf("fakepkg did %v, want %v", log, want)
	}
	// Done: run again, nothing is.
	again, err := h.RunJob(ctx, journal, jobTasks(dir))
	if err != nil || len(again) != len(got) {
		t.Fatalf("RunJob of a completed job = %v, %v", again, err)
	}
	if log := fakepkgLog(t, db); len(log) != 2 {
		t.Errorf("a completed job ran again: fakepkg did %v", log)
	}
}

// TestJobFailsAndRetries: the first failed task ends the job; run again,
// it retries from that task. Then the reverse job takes it all away.
func TestJobFailsAndRetries(t *testing.T) {
	_, db := fakepkg(t)
	dir := t.TempDir()
	h, err := testHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { h.Supervisor.StopAll("kv/0") })
	journal := filepath.Join(dir, "job.json")
	tasks := jobTasks(dir)
	t.Setenv("FAKEPKG_FAIL", "slow")
	got, err := h.RunJob(ctx, journal, tasks)
	if err == nil || len(got) != 4 || got[3].Result != Failed || !strings.Contains(got[3].Message, "FAKEPKG_FAIL") {
		t.Fatalf("RunJob with slow failing = %v, %v; want 4 outcomes, the last failed", got, err)
	}
	t.Setenv("FAKEPKG_FAIL", "")
	got, err = h.RunJob(ctx, journal, tasks)
	if err != nil || len(got) != 6 {
		t.Fatalf("RunJob again = %v, %v", got, err)
	}
	if log := fakepkgLog(t, db); !equalStrings(log, []string{"install_base_1.0", "install_slow_2.0"}) {
		t.Errorf("fakepkg did %v", log)
	}
	// A job of the same tasks under another journal finds all done.
	got, err = h.RunJob(ctx, filepath.Join(dir, "job2.json"), tasks)
	for _, o := range got {
		if o.Result != Unchanged {
			t.Errorf("the same tasks again: %+v, want unchanged", o)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	unitDir := tasks[1].UnitDir
	if err := os.WriteFile(filepath.Join(dir, "host", "kv.env"), []byte("edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reverse := []Task{
		{Kind: TaskShutdown, Unit: "kv/0", Daemon: Daemon{Name: "second"}},
		{Kind: TaskShutdown, Unit: "kv/0", Daemon: Daemon{Name: "first"}},
		{Kind: TaskRemove, Unit: "kv/0", UnitDir: unitDir, File: File{Path: filepath.Join(dir, "host", "kv.env")}},
		{Kind: TaskRemove, Unit: "kv/0", UnitDir: unitDir, File: File{Path: "kv.conf"}},
		{Kind: TaskUninstall, Unit: "kv/0", Packages: []Package{{Name: "slow"}, {Name: "base"}}},
	}
	got, err = h.RunJob(ctx, filepath.Join(dir, "removed.json"), reverse)
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, o := range got {
		results = append(results, o.Result)
	}
	if want := []string{Changed, Changed, OK, Changed, Changed}; !equalStrings(results, want) {
		t.Errorf("the reverse job's outcomes %v, want %v", got, want)
	}
	if n := len(daemonsOf(t, dir)); n != 0 {
		t.Errorf("%d daemons run after shutdown", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "host", "kv.env")); err != nil {
		t.Errorf("the edited kv.env was removed: %v", err)
	}
	if log := fakepkgLog(t, db); !equalStrings(log, []string{"install_base_1.0", "install_slow_2.0", "remove_base", "remove_slow"}) {
		t.Errorf("fakepkg did %v", log)
	}
	if _, err := h.RunJob(ctx, journal, []Task{{Kind: "reboot", Unit: "kv/0"}}); err == nil {
		t.Errorf("RunJob of an unknown kind = nil error")
	}
}
