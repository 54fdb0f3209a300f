package e2etest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// sandboxChildEnv, set, makes TestSandboxDiesWithTestBinary the child
// test binary: it holds the binaries (JSON) the child's sandbox runs.
const sandboxChildEnv = "LIFELINE_TEST_SANDBOX_CHILD"

// TestSandboxDiesWithTestBinary plays a test binary killed before its
// cleanup, with no reaper: a child test binary starts a sandbox's
// controller (with its embedded etcd), an etcd member of StartEtcd, a ctl
// run that has not finished, and a process a test starts itself with
// Sandbox.Start from a goroutine whose thread has since exited; once the
// child is killed with SIGKILL, none of them is left.
func TestSandboxDiesWithTestBinary(t *testing.T) {
	if spec := os.Getenv(sandboxChildEnv); spec != "" {
		sandboxChild(t, spec)
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	dir := t.TempDir()
	bin, err := BuildBinaries(dir)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := BuildEtcd(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(childSpec{Ctl: bin.Ctl, Lifelined: bin.Lifelined, Etcd: etcd})
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run", "^TestSandboxDiesWithTestBinary$", "-test.v", "-test.timeout", "10m")
	child.Env = append(os.Environ(), sandboxChildEnv+"="+string(spec))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childDone := make(chan struct{})
	lines := make(chan string)
	go func() {
		defer close(childDone)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = child.Wait()
	}()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		for range lines {
		}
		<-childDone
	})

	var sandbox string
	deadline := time.After(5 * time.Minute)
	for sandbox == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the child test binary exited before its sandbox ran")
			}
			if d, ok := strings.CutPrefix(l, "SANDBOX "); ok {
				sandbox = d
			}
		case <-deadline:
			t.Fatal("the child test binary's sandbox did not run within 5 minutes")
		}
	}
	t.Cleanup(func() { os.RemoveAll(sandbox) })
	// ctl runs outside the sandbox's directory, and is known by its
	// binary, this test's own.
	procs := func() []Proc {
		return append(SandboxProcs(sandbox), Procs(func(p Proc) bool { return len(p.Args) > 0 && p.Args[0] == bin.Ctl })...)
	}
	t.Cleanup(func() {
		// Should the test fail, nothing of it is left running.
		for _, p := range procs() {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
	if running := procs(); len(running) < 4 {
		t.Fatalf("the sandbox's processes:\n%swant 4: the controller, the etcd member, ctl status --watch and the sleep", ProcList(running))
	}

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.UntilSays(t, "the sandbox's processes to die with the test binary", func() (bool, string) {
		left := procs()
		return len(left) == 0, ProcList(left)
	})
}

// childSpec is what the child test binary's sandbox runs.
type childSpec struct{ Ctl, Lifelined, Etcd string }

// sandboxChild is the child test binary: it starts its sandbox's
// processes, says where the sandbox is, and waits to be killed.
func sandboxChild(t *testing.T, spec string) {
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatal(err)
	}
	s := NewSandbox(t, Binaries{Ctl: c.Ctl, Lifelined: c.Lifelined})
	s.StartEtcd(t, EtcdConfig{Binary: c.Etcd, Members: 1, NoFsync: true})
	s.StartController(t)

	// A ctl run that does not end: ctl status --watch.
	watch := s.CtlCommand(context.Background(), "", "status", "--watch")
	if err := s.Start(watch); err != nil {
		t.Fatal(err)
	}
	// A process started from a goroutine that locks its thread and
	// returns, so that the Go runtime ends the thread.
	started := make(chan error, 1)
	tid := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		tid <- syscall.Gettid()
		cmd := exec.Command("sleep", "600")
		cmd.Dir = s.Dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		started <- s.Start(cmd)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	// The runtime ends a locked thread whose goroutine returns, but not
	// the process's main thread, which the goroutine may have run on: then
	// the thread stays, and the sleep dies with it like the others.
	task := fmt.Sprintf("/proc/self/task/%d", <-tid)
	gone := func() bool {
		_, err := os.Stat(task)
		return os.IsNotExist(err)
	}
	for end := time.Now().Add(10 * time.Second); !gone() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if !gone() {
		t.Logf("the thread that started the sleep still runs (the main thread is never ended)")
	}
	os.Stdout.WriteString("SANDBOX " + s.Dir + "\n")
	time.Sleep(10 * time.Minute) // until killed
}
