package machineagent_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/unitagent"
)

var lifelined string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ll-ma-bin-")
	if err != nil {
		panic(err)
	}
	if lifelined, err = e2etest.BuildLifelined(dir); err != nil {
		fmt.Fprintf(os.Stderr, "build lifelined: %v\n", err)
		os.Exit(1)
	}
	code := etcdtest.Run(m, etcdtest.Options{})
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestMachineAgentLifecycle runs a machine agent in this process: it runs
// its units' agents, shows present, removes a dead unit and its files, and
// sets its dying machine dead once empty, then stops.
func TestMachineAgentLifecycle(t *testing.T) {
	env, op, m := twoUnitsOnAMachine(t)
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	api := &credCounter{AgentServiceClient: env.Agent("machine-" + m)}
	var downloads, unitSettings atomic.Int32
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: api,
		DialUnit: func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
			api, closer, err := dialUnits(env)(cred)
			return unitCalls{api.(pb.AgentServiceClient), &downloads, &unitSettings}, closer, err
		},
		Lifelined: lifelined, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	status := func() *pb.ModelStatus {
		st, err := op.Status(env.Ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	poll.Until(t, "both units running and the machine started", func() bool {
		st := status()
		if len(st.Machines) != 1 || st.Machines[0].Agent != "started" || len(st.Services) != 1 {
			return false
		}
		for _, u := range st.Services[0].Units {
			if u.State != "running" || u.Agent != "idle" {
				return false
			}
		}
		return len(st.Services[0].Units) == 2
	})
	// Their agents' statuses went through the machine agent, together.
	if n := api.reports.Load(); n < 2 {
		t.Errorf("%d unit status reports sent together, want at least one a unit", n)
	}
	for _, u := range []string{"kv-0", "kv-1"} {
		if b, err := os.ReadFile(filepath.Join(dir, "units", u, "installed")); err != nil {
			t.Errorf("unit %s was not installed in its own directory: %v", u, err)
		} else if !strings.Contains(string(b), "at 127.0.0.1") {
			t.Errorf("unit %s's install hook wrote %q: its unit-get did not answer", u, b)
		}
		// Their hooks' tools are served on the machine's socket.
		if _, err := os.Lstat(filepath.Join(dir, "units", u, "agent.sock")); !os.IsNotExist(err) {
			t.Errorf("unit %s has a hook tool socket of its own (%v)", u, err)
		}
	}
	// It owns the machine's daemon supervisor, recorded in its directory.
	if _, err := os.Stat(filepath.Join(dir, machineagent.DaemonsFile)); err != nil {
		t.Errorf("the machine has no record of its daemons: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "agent.sock")); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("the machine has no hook tool socket (%v)", err)
	}
	// Their charm directories are each their own, made of links to the
	// machine's one unpacked copy of the charm.
	hook0, err0 := os.Stat(filepath.Join(dir, "units", "kv-0", "charm", "hooks", "install"))
	hook1, err1 := os.Stat(filepath.Join(dir, "units", "kv-1", "charm", "hooks", "install"))
	if err0 != nil || err1 != nil || !os.SameFile(hook0, hook1) {
		t.Errorf("the units' install hooks are not one file of the machine's charm cache (%v, %v)", err0, err1)
	}
	if n := downloads.Load(); n != 1 {
		t.Errorf("the units downloaded their charm %d times, want once for the machine", n)
	}
	// The controller's hook timeout is asked for by the machine agent,
	// once for both.
	if n, m := unitSettings.Load(), api.settings.Load(); n != 0 || m != 1 {
		t.Errorf("the units asked for the agent settings %d times and their machine %d, want 0 and 1", n, m)
	}

	if _, err := op.DestroyUnit(env.Ctx, &pb.DestroyUnitRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "kv/0 removed with its files", func() bool {
		_, err := env.State.Unit(env.Ctx, "kv/0")
		_, ferr := os.Stat(filepath.Join(dir, "units", "kv-0"))
		return errors.Is(err, state.ErrNotFound) && os.IsNotExist(ferr)
	})
	if _, err := op.DestroyMachine(env.Ctx, &pb.DestroyMachineRequest{Machine: m}); err == nil {
		t.Fatal("DestroyMachine with kv/1 alive was accepted")
	}
	if _, err := op.DestroyUnit(env.Ctx, &pb.DestroyUnitRequest{Unit: "kv/1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.DestroyMachine(env.Ctx, &pb.DestroyMachineRequest{Machine: m}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, machineagent.ErrMachineDead) {
			t.Fatalf("Run = %v, want ErrMachineDead", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the machine agent did not stop")
	}
	got, err := env.State.Machine(env.Ctx, m)
	if err != nil || got.Life != pb.Life_LIFE_DEAD {
		t.Errorf("machine = %v, %v; want dead", got, err)
	}
	// A unit's agent ran once: none was started again for a unit it had
	// removed, which its watch showed a moment longer. The two units,
	// there when the agent started, had their credentials from one call.
	if n, calls := api.issued.Load(), api.calls.Load(); n != 2 || calls != 1 {
		t.Errorf("the machine agent asked for %d unit credentials in %d calls, want 2 in 1", n, calls)
	}
	// The controller drops the agent's presence once it has seen the
	// stream end, which may come a moment after Run returned.
	poll.UntilSays(t, "the machine agent down", func() (bool, string) {
		agent := status().Machines[0].Agent
		return agent == "down", "machine agent = " + agent
	})
}

// dialUnits connects unit agents to env's controller, each with its own
// credential, over one connection, as lifelined machine-agent does.
func dialUnits(env *controllertest.Env) func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
	conn := env.Dial(pki.Credential{})
	return func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
		return pb.NewAgentServiceClient(apiclient.AsRenewable(conn, cred)), io.NopCloser(nil), nil
	}
}

// twoUnitsOnAMachine starts a controller and deploys two units of the kv
// test charm to one machine, kv/0 and kv/1, whose id it returns.
func twoUnitsOnAMachine(t *testing.T) (*controllertest.Env, pb.OperatorServiceClient, string) {
	t.Helper()
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	c := env.Upload(op, "testdata/kv")
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 2, To: m}); err != nil {
		t.Fatal(err)
	}
	return env, op, m
}

// unitCalls counts a unit agent's charm downloads and asks for the agent
// settings.
type unitCalls struct {
	pb.AgentServiceClient
	downloads, settings *atomic.Int32
}

// SetUnitStatus fails a unit agent's report of its agent status: the
// machine agent sends those together.
func (u unitCalls) SetUnitStatus(ctx context.Context, in *pb.SetUnitStatusRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusResponse, error) {
	if in.GetKind() == pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT {
		return nil, status.Errorf(codes.Internal, "unit %s's agent status was reported in a call of its own", in.GetUnit())
	}
	return u.AgentServiceClient.SetUnitStatus(ctx, in, opts...)
}

func (u unitCalls) DownloadCharm(ctx context.Context, in *pb.DownloadCharmRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.DownloadCharmResponse], error) {
	u.downloads.Add(1)
	return u.AgentServiceClient.DownloadCharm(ctx, in, opts...)
}

func (u unitCalls) GetAgentSettings(ctx context.Context, in *pb.GetAgentSettingsRequest, opts ...grpc.CallOption) (*pb.GetAgentSettingsResponse, error) {
	u.settings.Add(1)
	return u.AgentServiceClient.GetAgentSettings(ctx, in, opts...)
}

// credCounter is a machine agent's real client, counting the unit
// credentials it asks for (one each time it starts a unit's agent) and
// its calls for them. Its watches bring removals late, as a busy
// controller's may.
type credCounter struct {
	pb.AgentServiceClient
	issued   atomic.Int32 // units
	calls    atomic.Int32
	settings atomic.Int32
	// reports counts the unit status reports sent together.
	reports atomic.Int32
}

func (c *credCounter) SetUnitStatuses(ctx context.Context, in *pb.SetUnitStatusesRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusesResponse, error) {
	c.reports.Add(int32(len(in.GetReports())))
	return c.AgentServiceClient.SetUnitStatuses(ctx, in, opts...)
}

func (c *credCounter) GetAgentSettings(ctx context.Context, in *pb.GetAgentSettingsRequest, opts ...grpc.CallOption) (*pb.GetAgentSettingsResponse, error) {
	c.settings.Add(1)
	return c.AgentServiceClient.GetAgentSettings(ctx, in, opts...)
}

func (c *credCounter) WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error) {
	stream, err := c.AgentServiceClient.WatchMany(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return lateRemovals{stream}, nil
}

// lateRemovals is a watch stream that holds back each response carrying
// a removal for a moment.
type lateRemovals struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
}

func (l lateRemovals) Recv() (*pb.WatchManyResponse, error) {
	resp, err := l.BidiStreamingClient.Recv()
	for _, ch := range resp.GetWatch().GetChanges() {
		if ch.Removed {
			time.Sleep(300 * time.Millisecond)
			break
		}
	}
	return resp, err
}

func (c *credCounter) IssueUnitCredentials(ctx context.Context, in *pb.IssueUnitCredentialsRequest, opts ...grpc.CallOption) (*pb.IssueUnitCredentialsResponse, error) {
	c.calls.Add(1)
	c.issued.Add(int32(len(in.Units)))
	return c.AgentServiceClient.IssueUnitCredentials(ctx, in, opts...)
}

// TestMachineAgentRemovesDeadUnitsTogether: a machine agent's removals of
// its dead units go to the controller together, one call at a time (the
// units that die while a call is on its way go in the next), never as
// calls of their own; each unit is removed, files and all, once.
func TestMachineAgentRemovesDeadUnitsTogether(t *testing.T) {
	env, op, m := twoUnitsOnAMachine(t)
	api := &heldRemoval{AgentServiceClient: env.Agent("machine-" + m), held: make(chan []string, 1), release: make(chan struct{})}
	var release sync.Once
	releaseHeld := func() { release.Do(func() { close(api.release) }) }
	dir, stop := runInstalled(t, env, m, api)
	defer stop()
	defer releaseHeld() // before stop: the held call lets go
	for _, u := range []string{"kv/0", "kv/1"} {
		if _, err := op.DestroyUnit(env.Ctx, &pb.DestroyUnitRequest{Unit: u}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-api.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no unit was removed")
	}
	poll.Until(t, "both units dead or removed", func() bool {
		for _, u := range []string{"kv/0", "kv/1"} {
			unit, err := env.State.Unit(env.Ctx, u)
			if err == nil && unit.Life != pb.Life_LIFE_DEAD {
				return false
			}
		}
		return true
	})
	releaseHeld()
	poll.Until(t, "both units removed with their files", func() bool {
		for _, u := range []string{"kv/0", "kv/1"} {
			_, err := env.State.Unit(env.Ctx, u)
			_, ferr := os.Stat(filepath.Join(dir, "units", strings.ReplaceAll(u, "/", "-")))
			if !errors.Is(err, state.ErrNotFound) || !os.IsNotExist(ferr) {
				return false
			}
		}
		return true
	})
	api.mu.Lock()
	defer api.mu.Unlock()
	named := map[string]int{}
	for _, call := range api.calls {
		for _, u := range call {
			named[u]++
		}
	}
	if len(api.calls) > 2 || named["kv/0"] != 1 || named["kv/1"] != 1 || api.alone.Load() != 0 {
		t.Errorf("removal calls %v and %d of a unit alone; want the two units named once, in one or two calls", api.calls, api.alone.Load())
	}
}

// heldRemoval is a machine agent's real client whose first RemoveUnits
// waits, having said which units it is for on held, until release is
// closed, whatever its deadline. It counts the units' removals.
type heldRemoval struct {
	pb.AgentServiceClient
	held    chan []string
	release chan struct{}

	mu    sync.Mutex
	calls [][]string
	alone atomic.Int32
}

func (h *heldRemoval) RemoveUnits(ctx context.Context, in *pb.RemoveUnitsRequest, opts ...grpc.CallOption) (*pb.RemoveUnitsResponse, error) {
	h.mu.Lock()
	h.calls = append(h.calls, in.Units)
	first := len(h.calls) == 1
	h.mu.Unlock()
	if first {
		h.held <- in.Units
		<-h.release
	}
	return h.AgentServiceClient.RemoveUnits(ctx, in, opts...)
}

func (h *heldRemoval) RemoveUnit(ctx context.Context, in *pb.RemoveUnitRequest, opts ...grpc.CallOption) (*pb.RemoveUnitResponse, error) {
	h.alone.Add(1)
	return h.AgentServiceClient.RemoveUnit(ctx, in, opts...)
}

// TestMachineAgentStartsUnitsAloneWhenTogetherFails: when the units
// arriving together cannot have their credentials in one call (one of them
// removed meanwhile, say: here the controller refuses every call for more
// than one), each is asked for on its own and every unit still starts.
func TestMachineAgentStartsUnitsAloneWhenTogetherFails(t *testing.T) {
	env, _, m := twoUnitsOnAMachine(t)
	api := &aloneOnly{credCounter: credCounter{AgentServiceClient: env.Agent("machine-" + m)}}
	_, stop := runInstalled(t, env, m, api)
	defer stop()
	if n, refused := api.issued.Load(), api.refused.Load(); n != 2 || refused != 1 {
		t.Errorf("the machine agent had %d unit credentials after %d refused calls, want 2 after 1", n, refused)
	}
}

// aloneOnly refuses calls for more than one unit's credential.
type aloneOnly struct {
	credCounter
	refused atomic.Int32
}

func (c *aloneOnly) IssueUnitCredentials(ctx context.Context, in *pb.IssueUnitCredentialsRequest, opts ...grpc.CallOption) (*pb.IssueUnitCredentialsResponse, error) {
	if len(in.Units) > 1 {
		c.refused.Add(1)
		return nil, status.Error(codes.NotFound, "unit kv/9 not found")
	}
	return c.credCounter.IssueUnitCredentials(ctx, in, opts...)
}

// runInstalled runs machine m's agent with api until both its units
// (twoUnitsOnAMachine) are installed; stop stops it and removes its files.
func runInstalled(t *testing.T, env *controllertest.Env, m string, api machineagent.API) (dir string, stop func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-m-") // short: the hook tool socket is in it
	if err != nil {
		t.Fatal(err)
	}
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: api,
		DialUnit:  dialUnits(env),
		Lifelined: lifelined, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			os.RemoveAll(dir)
		})
	}
	t.Cleanup(stop) // should the wait fail
	poll.Until(t, "both units installed", func() bool {
		_, err0 := os.Stat(filepath.Join(dir, "units", "kv-0", "installed"))
		_, err1 := os.Stat(filepath.Join(dir, "units", "kv-1", "installed"))
		return err0 == nil && err1 == nil
	})
	return dir, stop
}
