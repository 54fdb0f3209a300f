package unitagent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// toolsDir holds the hook tools: symlinks to lifelined, which runs as the
// tool its name says (hooks.RunTool). A tool is its own process, run by
// every hook that calls it: it is lifelined, built without the race
// detector, rather than this test binary, whose race runtime waits a
// second at exit while other threads run (a second a call of
// checkpoint-set in a loop, the test's minutes).
var toolsDir string

// daemonPath is lifelined, built once by TestMain: the tools, and the
// tests that run a unit agent in a process of its own (crash_test.go).
var daemonPath string

// lifelined returns the path of lifelined.
func lifelined(t *testing.T) string {
	t.Helper()
	return daemonPath
}

func TestMain(m *testing.M) {
	if os.Getenv("LL_STATE_WRITER_DIR") != "" {
		// TestStateStoreKilled's writer process: no controller, no tools.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ll-ua-tools-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if daemonPath, err = e2etest.BuildLifelined(dir); err != nil {
		fmt.Fprintln(os.Stderr, "build lifelined:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	toolsDir = filepath.Join(dir, "tools")
	if err := hooks.InstallTools(toolsDir, daemonPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := etcdtest.Run(m, etcdtest.Options{})
	os.RemoveAll(dir)
	os.Exit(code)
}

// recorder is the one hook script of the test charms. Every hook appends
// "<hook> <relation id> <remote unit>" to hooks.log in the unit's data
// directory once it succeeds; files there steer it: fail-<hook> (a count of
// failures to come, or "always"), sleep-<hook> (seconds), set-settings (a
// port: relation-set host and port in joined and changed), get-settings
// (relation-get host and port in changed, into settings.log), probe-<hook>
// (a shell script run in the hook, its output into probe.log), fail-colour
// (config-changed fails while config-get colour prints its content).
const recorder = `#!/bin/sh
set -e
dir="$LIFELINE_CHARM_DIR/.."
echo "$LIFELINE_HOOK_NAME" >> "$dir/attempts.log"
f="$dir/fail-$LIFELINE_HOOK_NAME"
if [ -f "$f" ]; then
  n=$(cat "$f")
  if [ "$n" = always ]; then echo "failing $LIFELINE_HOOK_NAME as told" >&2; exit 1; fi
  if [ "$n" -gt 0 ]; then echo $((n-1)) > "$f"; echo "failing $LIFELINE_HOOK_NAME, $n more" >&2; exit 1; fi
fi
if [ "$LIFELINE_HOOK_NAME" = config-changed ] && [ -f "$dir/fail-colour" ] && [ "$(config-get colour)" = "$(cat "$dir/fail-colour")" ]; then
  echo "failing config-changed on colour $(cat "$dir/fail-colour")" >&2; exit 1
fi
if [ -f "$dir/sleep-$LIFELINE_HOOK_NAME" ]; then sleep "$(cat "$dir/sleep-$LIFELINE_HOOK_NAME")"; fi
if [ -f "$dir/probe-$LIFELINE_HOOK_NAME" ]; then sh "$dir/probe-$LIFELINE_HOOK_NAME" >> "$dir/probe.log" 2>&1 || echo "exit $?" >> "$dir/probe.log"; fi
case "$LIFELINE_HOOK_NAME" in
*-relation-joined|*-relation-changed)
  if [ -f "$dir/set-settings" ]; then relation-set "host=$(unit-get private-address)" "port=$(cat "$dir/set-settings")"; fi
  ;;
esac
case "$LIFELINE_HOOK_NAME" in
*-relation-changed)
  if [ -f "$dir/get-settings" ]; then
    echo "$LIFELINE_REMOTE_UNIT host=$(relation-get host) port=$(relation-get port)" >> "$dir/settings.log"
  fi
  ;;
esac
echo "$LIFELINE_HOOK_NAME ${LIFELINE_RELATION_ID:--} ${LIFELINE_REMOTE_UNIT:--}" >> "$dir/hooks.log"
`

// writeCharm makes a charm whose every hook is the recorder: metadata as
// given, hooks for the endpoints named.
func writeCharm(t *testing.T, metadata string, endpoints ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "charm")
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(metadata), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("options:\n  colour:\n    type: string\n    default: red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"install", "config-changed", "start", "stop", "remove", "upgrade-charm"}
	for _, ep := range endpoints {
		for _, k := range []string{"created", "joined", "changed", "departed", "broken"} {
			names = append(names, ep+"-relation-"+k)
		}
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, "hooks", n), []byte(recorder), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The test charms.
const (
	kvMeta     = "name: kv\nprovides:\n  server: kv\n"
	appMeta    = "name: app\nrequires:\n  db: kv\n"
	loggerMeta = "name: logger\nsubordinate: true\nrequires:\n  host:\n    interface: lifeline-info\n    scope: container\n"
)

// world is a controller with the test charms deployed and unit agents
// run in this process.
type world struct {
	t    *testing.T
	env  *controllertest.Env
	op   pb.OperatorServiceClient
	lock chan struct{} // the machine's hook lock: shared by every agent here

	mu     sync.Mutex
	agents map[string]*runningAgent
	dirs   map[string]string
	// apis are the agents' controller clients, the latest started of
	// each unit.
	apis map[string]*countingAPI
	// started are the units whose agents started before: as a machine
	// agent would, the world starts a unit's agent as new
	// (unitagent.Config.New) only the first time, and only when its
	// directory was not made for it (made).
	started map[string]bool
	retry   unitagent.RetryPolicy
	// hookTimeout is the agents' hook timeout; the controller's when zero.
	hookTimeout time.Duration
	// updateStatus is the agents' update-status interval; the
	// controller's when zero.
	updateStatus time.Duration
	// watchDelay holds back what the agents' watch streams bring for so
	// long after each stream opens, as a busy controller may.
	watchDelay time.Duration
	// told are the subordinates the principals' agents told their
	// deployer, in order.
	told [][]string
	// held are subordinates whose agents the deployer does not start,
	// as a machine agent that is down would not.
	held map[string]bool
	// host carries out the units' host claims; nil: none.
	host *hostexec.Host
	// gate checks the units' claims against one another; nil: none.
	gate unitagent.ClaimsGate
}

type runningAgent struct {
	cancel context.CancelFunc
	done   chan error
}

func newWorld(t *testing.T) *world {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	w := &world{
		t: t, env: env, op: env.Operator(), lock: make(chan struct{}, 1),
		agents: map[string]*runningAgent{}, dirs: map[string]string{}, apis: map[string]*countingAPI{},
		started: map[string]bool{},
		retry:   unitagent.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Attempts: 3},
	}
	// Cleanups run last first: the agents stop, then their directories go.
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, d := range w.dirs {
			os.RemoveAll(filepath.Dir(d))
		}
	})
	t.Cleanup(w.stopAll)
	return w
}

// deploy uploads a test charm and deploys n units of it.
func (w *world) deploy(metadata string, n int, endpoints ...string) {
	w.t.Helper()
	c := w.env.Upload(w.op, writeCharm(w.t, metadata, endpoints...))
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: int32(n)}); err != nil {
		w.t.Fatalf("Deploy %s: %v", c.Name, err)
	}
}

// dir returns a unit's data directory, short for its socket, and not made
// until its agent, or a steering file, makes it: an agent that makes it
// knows it holds nothing yet.
func (w *world) dir(unit string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.dirs[unit]; ok {
		return d
	}
	d, err := os.MkdirTemp("", "ll-u-")
	if err != nil {
		w.t.Fatal(err)
	}
	d = filepath.Join(d, "u")
	w.dirs[unit] = d
	return d
}

// made returns the unit's data directory, made now if it was not (so that
// its agent will not take it for new).
func (w *world) made(unit string) string {
	w.t.Helper()
	d := w.dir(unit)
	if err := os.MkdirAll(d, 0o700); err != nil {
		w.t.Fatal(err)
	}
	return d
}

// start runs the named unit's agent in this process.
func (w *world) start(unit string) {
	w.t.Helper()
	u, err := w.env.State.Unit(w.env.Ctx, unit)
	if err != nil {
		w.t.Fatal(err)
	}
	api := &countingAPI{AgentServiceClient: w.env.Agent("unit-" + unit), watchDelay: w.watchDelay}
	_, statErr := os.Stat(w.dir(unit))
	w.mu.Lock()
	w.apis[unit] = api
	isNew := !w.started[unit] && errors.Is(statErr, os.ErrNotExist)
	w.started[unit] = true
	w.mu.Unlock()
	a, err := unitagent.New(unitagent.Config{
		Unit: unit, MachineID: u.MachineId, Address: "10.0.0." + strings.ReplaceAll(unit, "/", "-"),
		DataDir: w.dir(unit), ToolsDir: toolsDir, API: api, HookLock: w.lock, New: isNew,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Warn, Output: testWriter{w.t}}),
		Retry:  w.retry, Deployer: (*deployer)(w), HookTimeout: w.hookTimeout, Host: w.host,
		Gate: w.gate, UpdateStatusInterval: w.updateStatus,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	w.mu.Lock()
	w.agents[unit] = ra
	w.mu.Unlock()
}

// countingAPI is a unit agent's real client, counting the watch streams
// it opens, its calls to set its unit dead and to ask for its scopes, its
// calls to leave a scope and the departures its death calls carried.
type countingAPI struct {
	pb.AgentServiceClient
	watches, watchManys, ensureDeads, scopeChecks atomic.Int32
	leaves, carriedLeaves                         atomic.Int32
	watchDelay                                    time.Duration
}

func (c *countingAPI) LeaveScope(ctx context.Context, in *pb.LeaveScopeRequest, opts ...grpc.CallOption) (*pb.LeaveScopeResponse, error) {
	c.leaves.Add(1)
	return c.AgentServiceClient.LeaveScope(ctx, in, opts...)
}

func (c *countingAPI) UnitScopes(ctx context.Context, in *pb.UnitScopesRequest, opts ...grpc.CallOption) (*pb.UnitScopesResponse, error) {
	c.scopeChecks.Add(1)
	return c.AgentServiceClient.UnitScopes(ctx, in, opts...)
}

func (c *countingAPI) EnsureUnitDead(ctx context.Context, in *pb.EnsureUnitDeadRequest, opts ...grpc.CallOption) (*pb.EnsureUnitDeadResponse, error) {
	c.ensureDeads.Add(1)
	c.carriedLeaves.Add(int32(len(in.GetLeaveScopes())))
	return c.AgentServiceClient.EnsureUnitDead(ctx, in, opts...)
}

func (c *countingAPI) Watch(ctx context.Context, in *pb.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.WatchResponse], error) {
	c.watches.Add(1)
	return c.AgentServiceClient.Watch(ctx, in, opts...)
}

func (c *countingAPI) WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error) {
	c.watchManys.Add(1)
	stream, err := c.AgentServiceClient.WatchMany(ctx, opts...)
	if err != nil || c.watchDelay == 0 {
		return stream, err
	}
	return &slowStream{BidiStreamingClient: stream, from: time.Now().Add(c.watchDelay)}, nil
}

// slowStream is a watch stream that brings nothing before from.
type slowStream struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	from time.Time
}

func (s *slowStream) Recv() (*pb.WatchManyResponse, error) {
	resp, err := s.BidiStreamingClient.Recv()
	time.Sleep(time.Until(s.from))
	return resp, err
}

// destroyed destroys the named unit and waits for its agent to stop on
// it dead; it returns the agent's client, with its counts.
func (w *world) destroyed(unit string) *countingAPI {
	w.t.Helper()
	w.mu.Lock()
	api := w.apis[unit]
	w.mu.Unlock()
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: unit}); err != nil {
		w.t.Fatal(err)
	}
	if err := w.exited(unit); !errors.Is(err, unitagent.ErrDead) {
		w.t.Fatalf("%s's agent returned %v, want ErrDead", unit, err)
	}
	return api
}

// exited waits for the named unit's agent to stop on its own, and
// returns what it returned.
func (w *world) exited(unit string) error {
	w.t.Helper()
	w.mu.Lock()
	ra := w.agents[unit]
	w.mu.Unlock()
	select {
	case err := <-ra.done:
		w.mu.Lock()
		delete(w.agents, unit)
		w.mu.Unlock()
		return err
	case <-time.After(30 * time.Second):
		w.t.Fatalf("%s's agent still runs after 30 s", unit)
		return nil
	}
}

// stop stops the named unit's agent and waits for it.
func (w *world) stop(unit string) error {
	w.mu.Lock()
	ra := w.agents[unit]
	delete(w.agents, unit)
	w.mu.Unlock()
	if ra == nil {
		return nil
	}
	ra.cancel()
	return <-ra.done
}

func (w *world) stopAll() {
	w.mu.Lock()
	units := make([]string, 0, len(w.agents))
	for u := range w.agents {
		units = append(units, u)
	}
	w.mu.Unlock()
	for _, u := range units {
		w.stop(u)
	}
}

// deployer runs subordinates' agents in this process, as the machine agent
// will.
type deployer world

func (d *deployer) Deploy(unit string) error {
	w := (*world)(d)
	w.mu.Lock()
	_, running := w.agents[unit]
	held := w.held[unit]
	w.mu.Unlock()
	if !running && !held {
		w.start(unit)
	}
	return nil
}

func (d *deployer) Recall(unit string) error {
	w := (*world)(d)
	if err := w.stop(unit); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, unitagent.ErrDead) {
		return err
	}
	return nil
}

func (d *deployer) Subordinates(units []string) {
	w := (*world)(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.told = append(w.told, units)
}

// file writes a steering file in the unit's data directory.
func (w *world) file(unit, name, content string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.made(unit), name), []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// lines returns the lines of a log in the unit's data directory.
func (w *world) lines(unit, name string) []string {
	data, _ := os.ReadFile(filepath.Join(w.dir(unit), name))
	s := strings.TrimSpace(string(data))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// hooks returns the hooks a unit ran, in order, as "<hook> <rel> <remote>".
func (w *world) hooks(unit string) []string { return w.lines(unit, "hooks.log") }

// waitFor polls cond until it holds or a deadline passes.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	poll.Until(w.t, what, cond)
}

// agentStatus returns the unit's agent status as the controller has it.
func (w *world) agentStatus(unit string) *pb.UnitStatus {
	st, err := w.op.Status(w.env.Ctx, &pb.StatusRequest{})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range st.Status.Services {
		for _, u := range s.Units {
			if u.Name == unit {
				return u
			}
		}
	}
	return nil
}

// waitState waits until the controller shows the unit's agent idle in state.
func (w *world) waitState(unit, state string) {
	w.t.Helper()
	w.waitFor(unit+" "+state, func() bool {
		s := w.agentStatus(unit)
		return s != nil && s.State == state && s.Agent == "idle"
	})
}

// waitHook waits until the unit has run the hook of line want (a prefix,
// as index takes it).
func (w *world) waitHook(unit, want string) {
	w.t.Helper()
	w.waitFor(unit+" to run "+want, func() bool { return index(w.hooks(unit), want) >= 0 })
}

// index returns where hook line want (a prefix) first appears, or -1.
func index(lines []string, want string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, want) {
			return i
		}
	}
	return -1
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
