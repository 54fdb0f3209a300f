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

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// runGroup runs g until the test ends (after the Follows recorded later,
// whose cleanups run first) or stop, which returns once Run has.
// runMux runs m until the test ends.
func runMux(t *testing.T, m *Mux) *Mux {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return m
}

func runGroup(t *testing.T, g *Group) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// inGroup is a follow of subjects in g, shaped for record; the applies of
// all of them are checked to come one at a time.
func inGroup(t *testing.T, g *Group, logger hclog.Logger) func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
	var busy atomic.Bool
	return func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
		g.Start(ctx, subject, func(resp *pb.WatchResponse) {
			if !busy.CompareAndSwap(false, true) {
				t.Errorf("two subjects of a Group applied at once")
			}
			defer busy.Store(false)
			apply(resp)
		}, logger)
		<-ctx.Done()
	}
}

// followUnitsAndConfig follows machine 0's units and service kv's config
// in g and waits for both listings; stopConfig ends the config's follow.
func followUnitsAndConfig(t *testing.T, g *Group) (units, config *recorder, stopConfig context.CancelFunc) {
	t.Helper()
	grouped := inGroup(t, g, hclog.NewNullLogger())
	units, _ = record(t, grouped, &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	config, stopConfig = record(t, grouped, &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	poll.Until(t, "the listings", func() bool { return len(units.changes()) == 2 && len(config.changes()) == 2 })
	return units, config, stopConfig
}

// TestGroupDeliversWhatWatchDelivers: a Group's subjects get what a
// stream a subject gets, each in order, one at a time, on one stream.
func TestGroupDeliversWhatWatchDelivers(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	g := runMux(t, NewMux(api, nil)).NewGroup()
	runGroup(t, g)
	grouped := inGroup(t, g, hclog.NewNullLogger())
	single := func(ctx context.Context, subject *pb.WatchSubject, apply func(*pb.WatchResponse)) {
		Follow(ctx, api, subject, apply, hclog.NewNullLogger())
	}
	subjects := machineSubjects()
	var singles, inG []*recorder
	for _, s := range subjects {
		r, _ := record(t, single, s)
		singles = append(singles, r)
		r, _ = record(t, grouped, s)
		inG = append(inG, r)
	}
	poll.Until(t, "every listing", func() bool {
		for _, r := range append(slices.Clone(singles), inG...) {
			if len(r.changes()) == 0 {
				return false
			}
		}
		return true
	})
	m.addUnits(2, "0")
	m.setConfig("kv2")
	m.destroyUnit("kv/0")
	poll.Until(t, "every change, as Follow delivered it", func() bool {
		for i := range subjects {
			if !slices.Equal(inG[i].changes(), singles[i].changes()) {
				return false
			}
		}
		return len(singles[1].changes()) >= 4 && len(singles[4].changes()) >= 3
	})
	if n := api.watchManys.Load(); n != 1 {
		t.Errorf("the Group's Mux opened %d WatchMany streams, want 1", n)
	}
}

// TestGroupResumesAfterTheStreamBreaks: each subject gets every change
// once, after one listing, however often the stream breaks.
func TestGroupResumesAfterTheStreamBreaks(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0"), breakAfter: 3}
	g := runMux(t, NewMux(api, nil)).NewGroup()
	runGroup(t, g)
	units, config, _ := followUnitsAndConfig(t, g)
	const rounds = 6
	for i := range rounds {
		m.addUnits(1, "0")
		m.setConfig(fmt.Sprint("v", i))
		m.addUnits(1, "1")
		poll.Until(t, "the round's changes", func() bool {
			return len(units.changes()) == 3+i && len(config.changes()) == 3+i
		})
	}
	deliveredOnce(t, units, config)
	if n := api.watchManys.Load(); n < 3 {
		t.Errorf("the Mux opened %d WatchMany streams, want at least 3 (each broke after 3 responses)", n)
	}
}

// TestGroupRefusedSubjectIsAskedForAgain: a subject the controller
// refuses is logged and subscribed again after a pause, again and again,
// while the Group's others go on.
func TestGroupRefusedSubjectIsAskedForAgain(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	logger, logs := debugLogger()
	g := runMux(t, NewMux(api, logger)).NewGroup()
	runGroup(t, g)
	grouped := inGroup(t, g, logger)
	refused, _ := record(t, grouped, &pb.WatchSubject{Subject: &pb.WatchSubject_Machine{Machine: "1"}})
	units, _ := record(t, grouped, &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}})
	poll.Until(t, "the listing", func() bool { return len(units.changes()) == 2 })
	poll.Until(t, "the refused subject asked for three times", func() bool { return api.subscribes.Load() >= 4 })
	if !logs.Has("watch refused", "may not watch machine 1") {
		t.Errorf("the refusal is not logged:\n%s", logs)
	}
	m.addUnits(1, "0")
	poll.Until(t, "the change", func() bool { return len(units.changes()) == 3 })
	if got := refused.changes(); len(got) != 0 {
		t.Errorf("the refused subject delivered %v", got)
	}
	if n := api.watchManys.Load(); n != 1 {
		t.Errorf("the Mux opened %d WatchMany streams, want 1", n)
	}
}

// TestGroupFollowsAControllerWithoutWatchManyAStreamASubject.
func TestGroupFollowsAControllerWithoutWatchManyAStreamASubject(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0"), old: true}
	g := runMux(t, NewMux(api, nil)).NewGroup()
	runGroup(t, g)
	units, config, _ := followUnitsAndConfig(t, g)
	m.addUnits(1, "0")
	m.setConfig("kv2")
	poll.Until(t, "the changes", func() bool { return len(units.changes()) == 3 && len(config.changes()) == 3 })
	if n := api.watches.Load(); n != 2 {
		t.Errorf("the Group opened %d Watch streams, want 2", n)
	}
}

// TestGroupEndsItsFollows: a subject whose context ends is unsubscribed
// and applied no more; once Run returns, nothing is applied and the
// stream closes.
func TestGroupEndsItsFollows(t *testing.T) {
	m := newModel(t)
	api := &countingAPI{AgentServiceClient: m.Agent("machine-0")}
	mux := runMux(t, NewMux(api, nil))
	g := mux.NewGroup()
	stop := runGroup(t, g)
	units, config, stopConfig := followUnitsAndConfig(t, g)
	stopConfig()
	poll.Until(t, "the ended subject unsubscribed", func() bool {
		mux.mu.Lock()
		defer mux.mu.Unlock()
		return len(mux.subs) == 1
	})
	m.setConfig("kv2")
	m.addUnits(1, "0")
	poll.Until(t, "the change", func() bool { return len(units.changes()) == 3 })
	if got := config.changes(); len(got) != 2 {
		t.Errorf("an ended subject delivered %v, want only its listing", got)
	}
	stop()
	poll.Until(t, "the stream closed", func() bool {
		mux.mu.Lock()
		defer mux.mu.Unlock()
		return !mux.running && len(mux.subs) == 0
	})
	m.addUnits(1, "0")
	if got := units.changes(); len(got) != 3 {
		t.Errorf("delivered %v after Run returned", got)
	}
}

// TestGroupLateJoinersGetTheirListings: units of one service that start
// following a shared subject after it was listed each get the listing
// the Mux makes for them, in Groups of their own with nothing else to
// wake them.
func TestGroupLateJoinersGetTheirListings(t *testing.T) {
	m := newModel(t)
	const late = 100
	m.addUnits(late, "0") // kv/1..kv/100
	mux := runMux(t, NewMux(&countingAPI{AgentServiceClient: m.Agent("machine-0")}, nil))
	config := &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}}
	first, _ := record(t, m.asUnit(mux, "kv/0"), config)
	poll.Until(t, "the first listing", func() bool { return len(first.changes()) == 2 })
	for i := 1; i <= late; i++ {
		cred := m.Credential(fmt.Sprintf("unit-kv/%d", i))
		g := mux.ForAgent(cred, pb.NewAgentServiceClient(m.Dial(cred))).(Grouper).NewGroup()
		runGroup(t, g)
		r, _ := record(t, inGroup(t, g, hclog.NewNullLogger()), config)
		poll.Until(t, fmt.Sprintf("kv/%d's listing, joining late", i), func() bool { return len(r.changes()) == 2 })
	}
}

// TestGroupRenewsARefusedCredential: a unit whose credential was replaced
// while it followed its subjects has them refused once its stream breaks
// (here the controller restarts). The refusal is reported with the
// credential the subscription carried; once the holder has a new one, the
// subject is subscribed again with it and resumes where it was: a change
// made meanwhile reaches the unit.
func TestGroupRenewsARefusedCredential(t *testing.T) {
	m := newModel(t)
	mux := runMux(t, NewMux(&countingAPI{AgentServiceClient: m.Agent("machine-0")}, nil))
	old := m.Credential("unit-kv/0")
	cred := &renewedCredential{cur: old, refused: make(chan pki.Credential, 16)}
	g := mux.ForRenewableAgent(cred, pb.NewAgentServiceClient(m.Dial(old))).(Grouper).NewGroup()
	runGroup(t, g)
	config, _ := record(t, inGroup(t, g, hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	poll.Until(t, "the listing", func() bool { return len(config.changes()) == 2 })

	// Issued again behind the unit's back, then the stream breaks.
	fresh := m.Credential("unit-kv/0")
	m.Stop()
	m.Start()
	m.setConfig("kv2")
	select {
	case got := <-cred.refused:
		if got != old {
			t.Errorf("Refused(%#v), want the credential replaced", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the refusal of the replaced credential was not reported")
	}
	cred.set(fresh)
	poll.Until(t, "the change made meanwhile", func() bool { return len(config.changes()) == 3 })
	// Resumed after the revision it had: no listing again.
	if got := config.changes(); got[0] != "relisted" || got[2] == "relisted" || !strings.HasPrefix(got[2], "kv@") {
		t.Errorf("kv/0's config = %v, want its listing then the change", got)
	}
	for len(cred.refused) > 0 {
		if got := <-cred.refused; got != old {
			t.Errorf("Refused(%#v) after the renewal, want only the replaced credential refused", got)
		}
	}
}

// renewedCredential is a Credential the test replaces, reporting each
// refusal on refused.
type renewedCredential struct {
	mu      sync.Mutex
	cur     pki.Credential
	refused chan pki.Credential
}

func (r *renewedCredential) Current() pki.Credential {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

func (r *renewedCredential) Refused(c pki.Credential) {
	select {
	case r.refused <- c:
	default:
	}
}

func (r *renewedCredential) set(c pki.Credential) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = c
}
