package provisioner_test

import (
	"context"
	"errors"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/provisioner"
	"github.com/lifelinehq/lifeline/provisioner/provider"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// fakeProvider keeps instances in memory: a narrow seam for the
// provisioner's decisions.
type fakeProvider struct {
	mu      sync.Mutex
	insts   map[string]provider.Instance
	started []string
	stopped []string
	// stopping, when set, holds every Stop until it is closed; inStop
	// counts the Stops held.
	stopping chan struct{}
	inStop   int
	// queued counts the calls whose context's writes would queue behind
	// the agents' (not state.WithPriority).
	queued int
}

func (f *fakeProvider) Start(ctx context.Context, spec provider.MachineSpec) (provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !state.HasPriority(ctx) {
		f.queued++
	}
	if spec.Agent.Tag != "machine-"+spec.ID || spec.Agent.Secret == "" || len(spec.Agent.Controllers) == 0 {
		panic("bad agent config: " + spec.Agent.String())
	}
	in := provider.Instance{ID: "fake-" + spec.ID, MachineID: spec.ID, Address: "10.0.0." + spec.ID, Running: true}
	f.insts[in.ID] = in
	f.started = append(f.started, spec.ID)
	return in, nil
}

func (f *fakeProvider) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	if !state.HasPriority(ctx) {
		f.queued++
	}
	if f.stopping != nil {
		f.inStop++
		f.mu.Unlock()
		<-f.stopping
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	delete(f.insts, id)
	f.stopped = append(f.stopped, id)
	return nil
}

func (f *fakeProvider) Instances(context.Context) ([]provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []provider.Instance
	for _, in := range f.insts {
		out = append(out, in)
	}
	return out, nil
}

func setup(t *testing.T) (*state.State, context.Context, *fakeProvider, *provisioner.Provisioner) {
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProvider{insts: map[string]provider.Instance{}}
	p, err := provisioner.New(provisioner.Config{State: st, Provider: fp, Controllers: []string{"127.0.0.1:1"}, CACert: []byte("ca")})
	if err != nil {
		t.Fatal(err)
	}
	return st, etcdtest.Context(t), fp, p
}

// runWithStopsHeld runs p until the test ends, every Stop of fp held until
// release is called (or the test ends).
func runWithStopsHeld(t *testing.T, ctx context.Context, fp *fakeProvider, p *provisioner.Provisioner) (release func()) {
	t.Helper()
	fp.mu.Lock()
	fp.stopping = make(chan struct{})
	fp.mu.Unlock()
	release = sync.OnceFunc(func() { close(fp.stopping) })
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	t.Cleanup(func() {
		release()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return release
}

func TestProvisionerStartsAndRemoves(t *testing.T) {
	st, ctx, fp, p := setup(t)
	ms, err := st.AddMachines(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	manual, err := st.AddMachinesWith(ctx, 1, state.MachineOptions{Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.started) != 2 {
		t.Fatalf("started %v, want the two provisioned machines (not the manual one)", fp.started)
	}
	for _, m := range ms {
		got, err := st.Machine(ctx, m.Id)
		if err != nil {
			t.Fatal(err)
		}
		if got.InstanceId != "fake-"+m.Id || got.Address != "10.0.0."+m.Id {
			t.Errorf("machine %s = instance %q address %q", m.Id, got.InstanceId, got.Address)
		}
		if _, err := st.CredentialHash(ctx, "machine-"+m.Id); err != nil {
			t.Errorf("machine %s has no credential: %v", m.Id, err)
		}
	}
	// A second pass starts nothing more.
	if err := p.Pass(ctx); err != nil || len(fp.started) != 2 {
		t.Fatalf("second pass: %v, started %v", err, fp.started)
	}
	// Dead machines are stopped and removed; the manual one, whose agent
	// joined (a manual machine that never joined goes at once when
	// destroyed), has nothing to stop.
	if err := st.SetStatus(ctx, state.StatusMachine, manual[0].Id, &pb.Status{Status: "started"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ms[0].Id, manual[0].Id} {
		if err := st.DestroyMachine(ctx, id, state.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureMachineDead(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.stopped) != 1 || fp.stopped[0] != "fake-"+ms[0].Id {
		t.Errorf("stopped %v, want only machine %s's instance", fp.stopped, ms[0].Id)
	}
	left, err := st.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Id != ms[1].Id {
		t.Errorf("machines left: %v, want only %s", left, ms[1].Id)
	}
	// Its work goes ahead of the agents' writes queued for etcd.
	if fp.queued != 0 {
		t.Errorf("%d provider calls made with a context whose writes queue, want 0 (state.WithPriority)", fp.queued)
	}
}

func TestProvisionerRestartsStoppedInstancesOnlyAtFirst(t *testing.T) {
	st, ctx, fp, p := setup(t)
	ms, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := ms[0].Id
	if err := st.SetMachineInstance(ctx, id, "fake-"+id, "10.0.0."+id); err != nil {
		t.Fatal(err)
	}
	// The instance is there but its agent stopped (the host rebooted).
	fp.insts["fake-"+id] = provider.Instance{ID: "fake-" + id, MachineID: id}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.started) != 1 {
		t.Fatalf("first pass started %v, want machine %s again", fp.started, id)
	}
	fp.insts["fake-"+id] = provider.Instance{ID: "fake-" + id, MachineID: id} // stopped again
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.started) != 1 {
		t.Errorf("a later pass started %v again: a stopped agent should show lost, not be restarted", fp.started)
	}
	// An instance of no machine is stopped.
	fp.insts["fake-99"] = provider.Instance{ID: "fake-99", MachineID: "99", Running: true}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.stopped) != 1 || fp.stopped[0] != "fake-99" {
		t.Errorf("stopped %v, want the orphan fake-99", fp.stopped)
	}
}

// TestLocalProviderSessions starts a "machine agent" (a script standing in
// for lifelined) that starts a daemon of its own, finds it running, and
// stops it with its whole session.
func TestLocalProviderSessions(t *testing.T) {
	dir, err := os.MkdirTemp("", "ll-local-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	fake := filepath.Join(dir, "lifelined")
	marker := filepath.Join(dir, "daemon-pid")
	script := "#!/bin/sh\nsleep 1000 &\necho $! > " + marker + "\nwait\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &provider.Local{Dir: filepath.Join(dir, "machines"), Lifelined: fake}
	in, err := l.Start(context.Background(), provider.MachineSpec{ID: "7", Agent: agentConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "local:7" || in.Address != "127.1.0.8" {
		t.Errorf("Start = %+v, want local:7 at 127.1.0.8", in)
	}
	// The script's cmdline is "sh .../lifelined machine-agent --data-dir ...".
	poll.Until(t, "the instance to run", func() bool {
		insts, _ := l.Instances(context.Background())
		return len(insts) == 1 && insts[0].Running
	})
	// The shell creates the marker before it writes the pid into it, so
	// wait for a pid, not for the file: an empty one would make the path
	// below /proc/stat, which is never gone.
	daemon := ""
	poll.Until(t, "the daemon to start", func() bool {
		data, _ := os.ReadFile(marker)
		daemon = strings.TrimSpace(string(data))
		pid, err := strconv.Atoi(daemon)
		return err == nil && pid > 0
	})
	if err := l.Stop(context.Background(), in.ID); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the daemon to be gone", func() bool {
		st, err := os.ReadFile("/proc/" + daemon + "/stat")
		return err != nil || strings.Contains(string(st), ") Z ")
	})
	if insts, _ := l.Instances(context.Background()); len(insts) != 0 {
		t.Errorf("Instances after Stop = %v, want none", insts)
	}
}

// Run follows the machines through its watch: it stops and removes dead
// ones side by side, and starts new ones' instances as they come.
func TestProvisionerRunFollowsTheMachines(t *testing.T) {
	st, ctx, fp, p := setup(t)
	ms, err := st.AddMachines(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		if err := st.DestroyMachine(ctx, m.Id, state.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureMachineDead(ctx, m.Id); err != nil {
			t.Fatal(err)
		}
	}
	release := runWithStopsHeld(t, ctx, fp, p)
	// Both instances are stopped at once: each Stop is held until both
	// are under way.
	poll.Until(t, "the two dead machines' instances stopping together", func() bool {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return fp.inStop == 2
	})
	release()
	poll.Until(t, "the dead machines removed", func() bool {
		left, err := st.Machines(ctx)
		return err == nil && len(left) == 1 && left[0].Id == ms[2].Id
	})
	more, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the new machine's instance recorded", func() bool {
		got, err := st.Machine(ctx, more[0].Id)
		return err == nil && got.InstanceId == "fake-"+more[0].Id
	})
}

// TestProvisionerActsOnEtcdNotItsView gives a pass an old view of the
// machines, as Run's watch can be behind the pass's own writes: a machine
// seen before its instance was recorded, whose agent has since stopped,
// gets no second agent, and an instance of a machine the view does not
// have yet is not stopped.
func TestProvisionerActsOnEtcdNotItsView(t *testing.T) {
	st, ctx, fp, p := setup(t)
	ms, err := st.AddMachines(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	old := ms[0] // as listed before its instance
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fp.started) != 2 {
		t.Fatalf("started %v, want both machines", fp.started)
	}
	// Machine 0's agent stops (killed); a later pass sees machine 0 as it
	// was before its instance, and machine 1 not at all.
	fp.insts["fake-"+old.Id] = provider.Instance{ID: "fake-" + old.Id, MachineID: old.Id}
	if err := p.PassOver(ctx, []*pb.Machine{old}); err != nil {
		t.Fatal(err)
	}
	if len(fp.started) != 2 {
		t.Errorf("started %v: a second agent for machine %s, from an old view", fp.started, old.Id)
	}
	if len(fp.stopped) != 0 {
		t.Errorf("stopped %v: machine %s's instance, which the view did not have yet", fp.stopped, ms[1].Id)
	}
	got, err := st.Machine(ctx, old.Id)
	if err != nil || got.InstanceId != "fake-"+old.Id {
		t.Errorf("machine %s: %v, %v; want its instance kept", old.Id, got, err)
	}
}

// A dead machine's removal goes on beside Run's passes: a machine added
// while an instance is still being stopped gets its own at once, rather
// than after the removal.
func TestProvisionerRemovesBesideItsPasses(t *testing.T) {
	st, ctx, fp, p := setup(t)
	ms, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.DestroyMachine(ctx, ms[0].Id, state.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureMachineDead(ctx, ms[0].Id); err != nil {
		t.Fatal(err)
	}
	release := runWithStopsHeld(t, ctx, fp, p)
	poll.Until(t, "the dead machine's instance stopping", func() bool {
		fp.mu.Lock()
		defer fp.mu.Unlock()
		return fp.inStop == 1
	})
	more, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the new machine's instance recorded while the other's stops", func() bool {
		got, err := st.Machine(ctx, more[0].Id)
		return err == nil && got.InstanceId == "fake-"+more[0].Id
	})
	release()
	poll.Until(t, "the dead machine removed", func() bool {
		_, err := st.Machine(ctx, ms[0].Id)
		return errors.Is(err, state.ErrNotFound)
	})
}

// A machine the view shows dead but a read at once does not (etcd sends a
// write to its watchers a moment before reads see it) is removed when its
// removal is tried again, not left for the next look at every machine.
func TestProvisionerTriesARefusedRemovalAgain(t *testing.T) {
	st, ctx, _, p := setup(t)
	ms, err := st.AddMachinesWith(ctx, 1, state.MachineOptions{Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	id := ms[0].Id
	// Its agent joined: it is not removed at once.
	if err := st.SetStatus(ctx, state.StatusMachine, id, &pb.Status{Status: "started"}); err != nil {
		t.Fatal(err)
	}
	if err := st.DestroyMachine(ctx, id, state.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := &pb.Machine{Id: id, Life: pb.Life_LIFE_DEAD, Manual: true} // dying in etcd yet
	go func() {
		time.Sleep(120 * time.Millisecond)
		if err := st.EnsureMachineDead(ctx, id); err != nil {
			t.Error(err)
		}
	}()
	if err := p.PassOver(ctx, []*pb.Machine{seen}); err != nil {
		t.Fatalf("a pass over machine %s seen dead before it was: %v", id, err)
	}
	if _, err := st.Machine(ctx, id); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("machine %s: %v, want removed", id, err)
	}
}
