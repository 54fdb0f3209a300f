package agentwatch

import (
	"context"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// model is a controller with machines 0 and 1 and service kv, with kv/0
// on machine 0.
type model struct {
	*controllertest.Env
	t *testing.T
}

func newModel(t *testing.T) *model {
	t.Helper()
	return newModelWith(t, controllertest.Options{})
}

// newModelWith is newModel with a controller of those options.
func newModelWith(t *testing.T, opts controllertest.Options) *model {
	t.Helper()
	m := &model{Env: controllertest.New(t, opts), t: t}
	if _, err := m.State.AddMachines(m.Ctx, 2); err != nil {
		t.Fatal(err)
	}
	ch, err := m.State.AddCharm(m.Ctx, &pb.Charm{Name: "kv"}, []byte("kv charm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.State.AddService(m.Ctx, state.AddServiceArgs{
		Name: "kv", Charm: &pb.CharmRef{Name: ch.Name, Revision: ch.Revision, Sha256: ch.Sha256},
		Config: map[string]*pb.ConfigValue{"name": {Value: &pb.ConfigValue_StringValue{StringValue: "kv"}}},
	}); err != nil {
		t.Fatal(err)
	}
	m.addUnits(1, "0")
	return m
}

func (m *model) addUnits(n int, machine string) {
	m.t.Helper()
	if _, err := m.State.AddUnits(m.Ctx, "kv", n, state.Placement{Machine: machine}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *model) setConfig(name string) {
	m.t.Helper()
	if err := m.State.UpdateServiceConfig(m.Ctx, "kv", map[string]*pb.ConfigValue{"name": {Value: &pb.ConfigValue_StringValue{StringValue: name}}}, nil); err != nil {
		m.t.Fatal(err)
	}
}

func (m *model) destroyUnit(name string) {
	m.t.Helper()
	if err := m.State.DestroyUnit(m.Ctx, name, state.DestroyOptions{}); err != nil {
		m.t.Fatal(err)
	}
}

// asUnit returns a follow of subjects on mux as the named unit, with a
// credential issued for it now (which revokes any issued before).
func (m *model) asUnit(mux *Mux, unit string) func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
	cred := m.Credential("unit-" + unit)
	f := mux.ForAgent(cred, pb.NewAgentServiceClient(m.Dial(cred)))
	return func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
		f.Follow(ctx, subject, apply, hclog.NewNullLogger())
	}
}

// countingAPI is a real AgentService client that counts the streams it
// opens.
type countingAPI struct {
	pb.AgentServiceClient
	watches, watchManys atomic.Int32
	// subscribes counts the subscriptions sent on its WatchMany streams.
	subscribes atomic.Int32
	// old makes it a client of a controller without WatchMany.
	old bool
	// breakAfter, when set, breaks each WatchMany stream after that many
	// responses, as a lost connection would.
	breakAfter int
}

func (c *countingAPI) Watch(ctx context.Context, in *pb.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.WatchResponse], error) {
	c.watches.Add(1)
	return c.AgentServiceClient.Watch(ctx, in, opts...)
}

func (c *countingAPI) WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error) {
	c.watchManys.Add(1)
	if c.old {
		return nil, status.Error(codes.Unimplemented, "unknown method WatchMany for service lifeline.v1.AgentService")
	}
	if c.breakAfter == 0 {
		stream, err := c.AgentServiceClient.WatchMany(ctx, opts...)
		if err != nil {
			return nil, err
		}
		return &countingStream{BidiStreamingClient: stream, subscribes: &c.subscribes}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.AgentServiceClient.WatchMany(ctx, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &breakingStream{BidiStreamingClient: &countingStream{BidiStreamingClient: stream, subscribes: &c.subscribes}, cancel: cancel, left: c.breakAfter}, nil
}

// countingStream is a real stream that counts the subscriptions sent on
// it.
type countingStream struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	subscribes *atomic.Int32
}

func (c *countingStream) Send(req *pb.WatchManyRequest) error {
	if req.GetSubscribe() != nil {
		c.subscribes.Add(1)
	}
	return c.BidiStreamingClient.Send(req)
}

// breakingStream is a real stream that breaks after a number of
// responses.
type breakingStream struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	cancel context.CancelFunc
	left   int
}

func (b *breakingStream) Recv() (*pb.WatchManyResponse, error) {
	if b.left == 0 {
		b.cancel()
		return nil, status.Error(codes.Unavailable, "connection lost (the test broke it)")
	}
	b.left--
	return b.BidiStreamingClient.Recv()
}

// recorder keeps what a Follow delivered and checks, as apply, that
// revisions only grow and that apply is never called concurrently.
type recorder struct {
	t     *testing.T
	busy  atomic.Bool
	mu    sync.Mutex
	resps []*pb.WatchResponse
	done  chan struct{}
}

func (r *recorder) apply(resp *pb.WatchResponse) {
	if !r.busy.CompareAndSwap(false, true) {
		r.t.Errorf("apply called concurrently")
	}
	defer r.busy.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.resps); n > 0 && resp.Revision < r.resps[n-1].Revision {
		r.t.Errorf("revision went from %d back to %d", r.resps[n-1].Revision, resp.Revision)
	}
	r.resps = append(r.resps, resp)
}

// changes shows what was delivered: "=id@version" for a listing's items,
// "id@version" for changes, "-id@version" for removals; progress leaves
// nothing.
func (r *recorder) changes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, resp := range r.resps {
		if resp.Relisted {
			out = append(out, "relisted")
		}
		for _, ch := range resp.Changes {
			s := fmt.Sprintf("%s@%d", ch.Id, ch.Version)
			if ch.Removed {
				s = "-" + s
			}
			out = append(out, s)
		}
	}
	return out
}

// record runs f's Follow of subject with a new recorder until the test
// ends or cancel.
func record(t *testing.T, f func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)), subject *pb.WatchSubject) (*recorder, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{t: t, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		f(ctx, subject, r.apply)
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r, cancel
}

func machineSubjects() []*pb.WatchSubject {
	return []*pb.WatchSubject{
		{Subject: &pb.WatchSubject_Machine{Machine: "0"}},
		{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}},
		{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}},
		{Subject: &pb.WatchSubject_Service{Service: "kv"}},
		{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}},
		{Subject: &pb.WatchSubject_Resolved{Resolved: "kv/0"}},
		{Subject: &pb.WatchSubject_UnitSubordinates{UnitSubordinates: "kv/0"}},
	}
}

func (m *Mux) follower(logger hclog.Logger) func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
	return func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
		m.Follow(ctx, subject, apply, logger)
	}
}

func TestMuxDeliversWhatWatchDelivers(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(api, nil))
	single := func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
		Follow(ctx, api, subject, apply, hclog.NewNullLogger())
	}
	subjects := machineSubjects()
	var singles, muxed []*recorder
	for _, s := range subjects {
		r, _ := record(t, single, s)
		singles = append(singles, r)
		r, _ = record(t, mux.follower(hclog.NewNullLogger()), s)
		muxed = append(muxed, r)
	}
	poll.Until(t, "every listing", func() bool {
		for _, r := range append(slices.Clone(singles), muxed...) {
			if len(r.changes()) == 0 {
				return false
			}
		}
		return true
	})
	m.addUnits(2, "0") // kv/1, kv/2
	m.addUnits(1, "1") // kv/3, not on machine 0
	m.setConfig("kv2")
	m.setConfig("kv3")
	m.destroyUnit("kv/0")
	m.destroyUnit("kv/1")
	want := map[int]int{1: 2, 2: 1, 4: 2} // changes after the listing, by subject
	poll.UntilSays(t, "every change, the same from the Mux as from Follow", func() (bool, string) {
		done := true
		for i, n := range want {
			done = done && len(singles[i].changes()) >= 2+n
		}
		var b strings.Builder
		for i, s := range subjects {
			done = done && slices.Equal(muxed[i].changes(), singles[i].changes())
			fmt.Fprintf(&b, "Mux.Follow(%v) delivered %v; Follow delivered %v\n", s, muxed[i].changes(), singles[i].changes())
		}
		return done, b.String()
	})
	if n := api.watchManys.Load(); n != 1 {
		t.Errorf("the Mux opened %d WatchMany streams, want 1", n)
	}
}

func TestMuxResumesAfterTheControllerRestarts(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(api, nil))
	units, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	config, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	poll.Until(t, "the listings", func() bool { return len(units.changes()) == 2 && len(config.changes()) == 2 })

	// While the controller is away, and after it is back: each change
	// comes once, in order, without a new listing.
	for round := range 3 {
		m.Stop()
		m.addUnits(1, "0")
		m.setConfig(fmt.Sprint("away", round))
		m.Start()
		m.addUnits(1, "1")
		m.addUnits(1, "0")
		m.setConfig(fmt.Sprint("back", round))
		poll.Until(t, "the changes", func() bool {
			return len(units.changes()) == 2+2*(round+1) && len(config.changes()) == 2+2*(round+1)
		})
	}
	deliveredOnce(t, units, config)
	want := []string{"relisted", "kv/0@"}
	for i := range 6 {
		want = append(want, fmt.Sprintf("kv/%d@", []int{1, 3, 4, 6, 7, 9}[i]))
	}
	got := units.changes()
	for i := range got {
		if i >= len(want) || !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("machine 0's units: delivered %v, want %v", got, want)
		}
	}
	if n := api.watchManys.Load(); n < 4 {
		t.Errorf("the Mux opened %d WatchMany streams, want at least 4 (one a restart)", n)
	}
}

func TestMuxResumesAfterTheStreamBreaks(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0"), breakAfter: 3}
	mux := runMux(t, NewMux(api, nil))
	units, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	config, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	unit, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}})
	poll.Until(t, "the listings", func() bool {
		return len(units.changes()) == 2 && len(config.changes()) == 2 && len(unit.changes()) == 2
	})
	// A round at a time, so that the stream breaks again and again.
	const rounds = 10
	for i := range rounds {
		m.addUnits(1, "0")
		m.setConfig(fmt.Sprint("v", i))
		m.addUnits(1, "1")
		poll.Until(t, "the round's changes", func() bool {
			return len(units.changes()) == 3+i && len(config.changes()) == 3+i
		})
	}
	m.destroyUnit("kv/0")
	poll.UntilSays(t, "every change", func() (bool, string) {
		return len(units.changes()) == 2+rounds && len(config.changes()) == 2+rounds && len(unit.changes()) == 3,
			fmt.Sprintf("units %v, config %v, unit %v; %d streams", units.changes(), config.changes(), unit.changes(), api.watchManys.Load())
	})
	deliveredOnce(t, units, config, unit)
	if n := api.watchManys.Load(); n < 5 {
		t.Errorf("the Mux opened %d WatchMany streams, want at least 5 (each broke after 3 responses)", n)
	}
}

func TestMuxRefusedSubjectEndsOnlyItsSubscription(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	logger, logs := debugLogger()
	mux := runMux(t, NewMux(api, logger))
	refused, _ := record(t, mux.follower(logger), &pb.WatchSubject{Subject: &pb.WatchSubject_Machine{Machine: "1"}})
	units, _ := record(t, mux.follower(logger), &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	poll.Until(t, "the listing", func() bool { return len(units.changes()) == 2 })
	poll.Until(t, "the refusal logged", func() bool { return logs.Has("watch refused", "may not watch machine 1") })
	m.addUnits(1, "0")
	poll.Until(t, "the change", func() bool { return len(units.changes()) == 3 })
	if got := refused.changes(); len(got) != 0 {
		t.Errorf("the refused subject delivered %v", got)
	}
	if n := api.watchManys.Load(); n != 1 {
		t.Errorf("the Mux opened %d WatchMany streams, want 1: a refused subject ends only its subscription", n)
	}
}

// debugLogger returns a logger at debug level and what it writes.
func debugLogger() (hclog.Logger, *syncbuf.Buffer) {
	logs := &syncbuf.Buffer{}
	return hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}), logs
}

// deliveredOnce checks that each recorder got one listing, first, and no
// change twice.
func deliveredOnce(t *testing.T, rs ...*recorder) {
	t.Helper()
	for _, r := range rs {
		got := r.changes()
		if got[0] != "relisted" || slices.Contains(got[1:], "relisted") {
			t.Errorf("delivered %v, want one listing first", got)
		}
		seen := map[string]bool{}
		for _, c := range got[1:] {
			if seen[c] {
				t.Errorf("delivered %s twice: %v", c, got)
			}
			seen[c] = true
		}
	}
}

func TestMuxUnsubscribesWhenFollowEnds(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(api, nil))
	units := &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}}
	a, stopA := record(t, mux.follower(hclog.NewNullLogger()), units)
	b, stopB := record(t, mux.follower(hclog.NewNullLogger()), units)
	poll.Until(t, "the listings", func() bool { return len(a.changes()) == 2 && len(b.changes()) == 2 })
	stopA()
	<-a.done
	m.addUnits(1, "0")
	poll.Until(t, "the change", func() bool { return len(b.changes()) == 3 })
	if got := a.changes(); len(got) != 2 {
		t.Errorf("an ended Follow delivered %v, want only its listing", got)
	}
	stopB()
	<-b.done
	poll.Until(t, "the stream closed", func() bool {
		mux.mu.Lock()
		defer mux.mu.Unlock()
		return !mux.running
	})
	// A new Follow opens a new stream.
	c, _ := record(t, mux.follower(hclog.NewNullLogger()), units)
	poll.Until(t, "the listing", func() bool { return len(c.changes()) == 3 })
	if n := api.watchManys.Load(); n != 2 {
		t.Errorf("the Mux opened %d WatchMany streams, want 2", n)
	}
}

func TestMuxCarriesManySubscriptionsOnOneStream(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(api, nil))
	const n = 200
	var rs []*recorder
	for i := range n {
		s := machineSubjects()[i%2]
		r, _ := record(t, mux.follower(hclog.NewNullLogger()), s)
		rs = append(rs, r)
	}
	poll.Until(t, "every listing", func() bool {
		for _, r := range rs {
			if len(r.changes()) < 2 {
				return false
			}
		}
		return true
	})
	m.addUnits(1, "0")
	poll.Until(t, "every change", func() bool {
		for i := 1; i < n; i += 2 {
			if len(rs[i].changes()) < 3 {
				return false
			}
		}
		return true
	})
	if n := api.watchManys.Load(); n != 1 {
		t.Errorf("the Mux opened %d WatchMany streams, want 1", n)
	}
	if n := api.watches.Load(); n != 0 {
		t.Errorf("the Mux opened %d Watch streams, want 0", n)
	}
}

func TestMuxFollowsAControllerWithoutWatchManyAStreamASubject(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0"), old: true}
	mux := runMux(t, NewMux(api, nil))
	units, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	config, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	poll.Until(t, "the listings", func() bool { return len(units.changes()) == 2 && len(config.changes()) == 2 })
	m.addUnits(1, "0")
	m.setConfig("kv2")
	poll.Until(t, "the changes", func() bool { return len(units.changes()) == 3 && len(config.changes()) == 3 })
	if n := api.watches.Load(); n != 2 {
		t.Errorf("the Mux opened %d Watch streams, want 2", n)
	}
}

// TestMuxFollowsAsAnotherAgentOnItsStream follows a unit's subject on a
// machine agent's stream, as the unit: the subject is one the machine may
// not watch (a unit on another machine), and it comes on the one stream.
// Against a controller without WatchMany it is watched with the unit's
// own client.
func TestMuxFollowsAsAnotherAgentOnItsStream(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old=%v", old), func(t *testing.T) {
			m := newModel(t)
			m.addUnits(1, "1") // kv/1
			machine := &countingAPI{AgentServiceClient: m.Agent("machine-0"), old: old}
			cred := m.Credential("unit-kv/1")
			unit := &countingAPI{AgentServiceClient: pb.NewAgentServiceClient(m.Dial(cred))}
			mux := runMux(t, NewMux(machine, nil))
			subject := &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/1"}}
			as := mux.ForAgent(cred, unit)
			r, _ := record(t, func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
				as.Follow(ctx, subject, apply, hclog.NewNullLogger())
			}, subject)
			poll.Until(t, "the listing", func() bool { return len(r.changes()) == 2 })
			m.destroyUnit("kv/1")
			poll.Until(t, "the change", func() bool { return len(r.changes()) == 3 })
			if old {
				if n := unit.watches.Load(); n != 1 {
					t.Errorf("the unit's client opened %d Watch streams, want 1", n)
				}
				return
			}
			if n, u := machine.watchManys.Load(), unit.watchManys.Load()+unit.watches.Load(); n != 1 || u != 0 {
				t.Errorf("the machine's client opened %d WatchMany streams and the unit's %d streams, want 1 and 0", n, u)
			}
		})
	}
}

// stuckAPI opens WatchMany streams whose sends never complete, as on a
// connection whose flow control has stopped: Recv waits for the end.
type stuckAPI struct {
	ManyWatcher
	sends atomic.Int32
}

func (a *stuckAPI) WatchMany(ctx context.Context, _ ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error) {
	return &stuckStream{ctx: ctx, api: a}, nil
}

type stuckStream struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	ctx context.Context
	api *stuckAPI
}

func (s *stuckStream) Send(*pb.WatchManyRequest) error {
	s.api.sends.Add(1)
	<-s.ctx.Done()
	return s.ctx.Err()
}

func (s *stuckStream) Recv() (*pb.WatchManyResponse, error) {
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// A Follow ends when its context does, even while the stream cannot take
// its subscription, and the others' subscriptions wait their turn.
func TestMuxFollowEndsWhileItsStreamIsStuck(t *testing.T) {
	api := &stuckAPI{}
	mux := runMux(t, NewMux(api, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{}, 3)
	followCtx, stop := context.WithCancel(ctx)
	for _, s := range machineSubjects()[:3] {
		go func() {
			mux.Follow(followCtx, s, func(*pb.WatchResponse) {}, hclog.NewNullLogger())
			ended <- struct{}{}
		}()
	}
	poll.Until(t, "a send", func() bool { return api.sends.Load() > 0 })
	stop()
	for range 3 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("Follow did not return after its context ended: it waits on the stream")
		}
	}
}

// TestMuxSharesASubjectAmongUnitsOfAService follows, as two units of kv
// on the machine, the subjects the controller serves alike to both: each
// is subscribed once, the unit that follows late starts with a listing of
// what the other was given, both see every change, and the subscription
// outlives the unit whose credential it carries. The units' own subjects
// are subscribed once for each.
func TestMuxSharesASubjectAmongUnitsOfAService(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			m := newModel(t)
			m.addUnits(1, "0") // kv/1
			machine := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
			if broken {
				// Each stream breaks after a few responses: the
				// subscriptions resume on the next, shared still.
				machine.breakAfter = 3
			}
			mux := runMux(t, NewMux(machine, nil))
			kv0, kv1 := m.asUnit(mux, "kv/0"), m.asUnit(mux, "kv/1")
			shared := []*pb.WatchSubject{
				{Subject: &pb.WatchSubject_Service{Service: "kv"}},
				{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}},
				{Subject: &pb.WatchSubject_ServiceRelations{ServiceRelations: "kv"}},
			}
			var first, late []*recorder
			var stopFirst []context.CancelFunc
			for _, s := range shared {
				r, stop := record(t, kv0, s)
				first, stopFirst = append(first, r), append(stopFirst, stop)
			}
			own0, _ := record(t, kv0, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}})
			poll.Until(t, "the first unit's listings", func() bool {
				for _, r := range first {
					if len(r.changes()) == 0 {
						return false
					}
				}
				return len(own0.changes()) > 0
			})
			for _, s := range shared {
				r, _ := record(t, kv1, s)
				late = append(late, r)
			}
			own1, _ := record(t, kv1, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/1"}})
			same := func() bool {
				for i := range shared {
					if !slices.Equal(first[i].changes(), late[i].changes()) {
						return false
					}
				}
				return true
			}
			poll.Until(t, "the late unit's listings", func() bool { return same() && len(own1.changes()) > 0 })
			if got := late[2].changes(); !slices.Equal(got, []string{"relisted"}) {
				t.Errorf("the late unit's relations: %v, want an empty listing", got)
			}
			m.setConfig("kv2")
			poll.Until(t, "the change, for both", func() bool { return len(first[1].changes()) == 3 && same() })
			if !broken {
				// Three shared subjects and two units' own.
				if n := machine.subscribes.Load(); n != 5 {
					t.Errorf("the Mux sent %d subscriptions, want 5", n)
				}
			}
			// The unit whose credential the subscriptions carry stops
			// following: the other goes on.
			for _, stop := range stopFirst {
				stop()
			}
			for _, r := range first {
				<-r.done
			}
			m.setConfig("kv3")
			poll.Until(t, "the next change", func() bool { return len(late[1].changes()) == 4 })
			if got := late[1].changes(); got[0] != "relisted" || strings.HasPrefix(got[3], "-") {
				t.Errorf("the late unit's configuration: %v", got)
			}
		})
	}
}

func TestShareKey(t *testing.T) {
	unit := func(name string) string { return "unit-" + name }
	service := &pb.WatchSubject{Subject: &pb.WatchSubject_Service{Service: "kv"}}
	scope := &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: 7}}
	barrier := &pb.WatchSubject{Subject: &pb.WatchSubject_Barrier{Barrier: true}}
	for _, c := range []struct {
		as1, as2 string
		s1, s2   *pb.WatchSubject
		share    bool
	}{
		{unit("kv/0"), unit("kv/1"), service, service, true},
		{unit("kv/0"), unit("kv/1"), scope, scope, true},
		// Another service's unit sees another side of the relation.
		{unit("kv/0"), unit("app/0"), scope, scope, false},
		{unit("kv/0"), unit("kv/1"), service, &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}}, false},
		{unit("kv/0"), unit("kv/1"), scope, &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: 8}}, false},
		// A unit's own subjects, and the machine's, are not shared.
		{unit("kv/0"), unit("kv/1"), &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}}, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}}, false},
		{"", "", service, service, false},
		{"machine-0", "machine-0", service, service, false},
		// The barrier is every agent's.
		{unit("kv/0"), unit("app/0"), barrier, barrier, true},
		{"", unit("app/0"), barrier, barrier, true},
	} {
		k1, k2 := shareKey(c.as1, c.s1), shareKey(c.as2, c.s2)
		if got := k1 != "" && k1 == k2; got != c.share {
			t.Errorf("%v %v and %v %v share: %v (%q, %q), want %v", c.as1, c.s1, c.as2, c.s2, got, k1, k2, c.share)
		}
	}
}

// TestMuxSharedSubscriptionEndedOutlivesItsFollows: a unit that joins a
// shared subscription the controller ended, waiting for its Follows to
// subscribe it again, has it subscribed again itself, although the
// Follows that saw the end are gone before they could.
func TestMuxSharedSubscriptionEndedOutlivesItsFollows(t *testing.T) {
	m := newModel(t)
	m.addUnits(1, "0") // kv/1
	machine := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(machine, nil))
	kv0, kv1 := m.asUnit(mux, "kv/0"), m.asUnit(mux, "kv/1")
	// A unit may watch only its own service's relations: refused.
	refused := &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceRelations{ServiceRelations: "other"}}
	parked := func() bool {
		mux.mu.Lock()
		defer mux.mu.Unlock()
		for s := range mux.subs {
			if s.parked {
				return true
			}
		}
		return false
	}
	a, stopA := record(t, kv0, refused)
	// Refused eight times, kv/0's Follow waits a second or two before it
	// subscribes again: kv/1 joins meanwhile, and kv/0 stops.
	poll.Until(t, "eight refusals", func() bool { return machine.subscribes.Load() >= 8 && parked() })
	record(t, kv1, refused)
	poll.Until(t, "kv/1 to join", func() bool {
		mux.mu.Lock()
		defer mux.mu.Unlock()
		for s := range mux.subs {
			return len(s.followers) == 2 && s.parked
		}
		return false
	})
	stopA()
	<-a.done
	n := machine.subscribes.Load()
	poll.Until(t, "the subscription subscribed again, twice", func() bool { return machine.subscribes.Load() >= n+2 })
}
