package faults

import (
	"context"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/state"
)

// namespace is where the model lives in the test's etcd cluster.
const namespace = "/lifeline/"

// fixture is a model on a real etcd cluster: a sandbox, a 3-member etcd
// cluster over TLS, the controllers the test starts on it, and the test's
// own client of the cluster, through which it reads the model (never
// writes it) and checks its invariants.
type fixture struct {
	*e2etest.Sandbox
	etcd   *e2etest.EtcdCluster
	client *clientv3.Client
	st     *state.State
	mon    *statetest.Monitor
	opts   fixtureOptions
	// abort, when set, is asked at every status poll of waitModel: an
	// error ends the test at once (a fault injector that went wrong).
	abort func() error
}

type fixtureOptions struct {
	// provider is the controllers' --provider; local when empty.
	provider string
	// presence is the controllers' --presence-timeout; 5 s when zero.
	presence time.Duration
	// monitor checks the invariants at every committed revision while
	// the test runs (check stops it and reports).
	monitor bool
	// coalesce folds the revisions that come within this long of each
	// other into one check of the invariants (statetest.Options): for
	// the full sizes, whose models are too big to check at every
	// revision as fast as they change.
	coalesce time.Duration
}

// newFixture starts the etcd cluster and a client of it; the test then
// starts its controllers (startController). Everything stops when the test
// ends, the controllers and their machines first.
func newFixture(t *testing.T, opts fixtureOptions) *fixture {
	t.Helper()
	if opts.provider == "" {
		opts.provider = "local"
	}
	if opts.presence == 0 {
		opts.presence = 5 * time.Second
	}
	s := e2etest.NewSandbox(t, bins)
	s.KeepOnFailure = *keepFlag
	f := &fixture{Sandbox: s, opts: opts}
	f.etcd = s.StartEtcd(t, e2etest.EtcdConfig{Binary: etcdBin})
	client, err := f.etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(func() { client.Close() })
	f.client = client
	if f.st, err = state.New(client, state.Config{Namespace: namespace}); err != nil {
		t.Fatal(err)
	}
	if opts.monitor {
		f.mon = statetest.StartWith(t, f.st, statetest.Options{CoalesceWithin: opts.coalesce})
		s.OnStop(f.mon.Halt)
	}
	return f
}

// startController starts one more controller of the model: the cluster's
// endpoints and client certificate, the namespace, the provider and the
// presence timeout, and extra flags. The first one writes the client
// config that ctl reads.
func (f *fixture) startController(t *testing.T, extra ...string) *e2etest.Controller {
	t.Helper()
	args := append(f.etcd.ControllerFlags(namespace),
		"--provider", f.opts.provider, "--presence-timeout", f.opts.presence.String())
	return f.StartController(t, append(args, extra...)...)
}

// snapshot reads the whole model at one revision.
func (f *fixture) snapshot(t *testing.T) *state.Snapshot {
	t.Helper()
	var snap *state.Snapshot
	poll.Within(t, "a snapshot of the model", time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		snap, err = f.st.Snapshot(ctx)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return snap
}

// checkModel checks the invariants on a snapshot and, with the monitor
// on, at every revision committed since the test began (the monitor then
// stops); it records the checks in r.
func (f *fixture) checkModel(t *testing.T, r *run) *state.Snapshot {
	t.Helper()
	snap := f.snapshot(t)
	if err := state.CheckInvariants(snap); err != nil {
		t.Errorf("invariants at revision %d: %v", snap.Revision, err)
	} else {
		r.checked("state.CheckInvariants on the final snapshot")
	}
	if f.mon != nil {
		failed := t.Failed()
		f.mon.StopAt(t, snap)
		revs, checks := f.mon.Revisions(), f.mon.Checks()
		r.count("monitor: revisions with changes, life order checked at each", revs)
		r.count("monitor: invariant checks", checks)
		if !failed && !t.Failed() {
			if checks == revs {
				r.checked("invariants and life order at every committed revision (statetest.Monitor)")
			} else {
				r.checked(fmt.Sprintf("life order and unique ids at every committed revision; invariants at %d of %d (revisions within %s of each other checked together)", checks, revs, f.opts.coalesce))
			}
		}
		f.mon = nil
	}
	return snap
}

// checkNoPanic fails the test when a controller that the test did not
// stop is not running, or a controller's or machine agent's log mentions a
// panic.
func (f *fixture) checkNoPanic(t *testing.T, r *run) {
	t.Helper()
	ok := true
	for _, c := range f.Controllers() {
		if !c.Running() && !c.Stopped() {
			t.Errorf("controller %d is not running", c.Index)
			ok = false
		}
	}
	logs, _ := filepath.Glob(filepath.Join(f.Dir, "data*", "controller.log"))
	agents, _ := filepath.Glob(filepath.Join(f.Dir, "data*", "machines", "*", "agent.log"))
	outs, _ := filepath.Glob(filepath.Join(f.Dir, "data*", "machines", "*", "agent.out"))
	agents = append(agents, outs...) // a crash's trace
	for _, p := range append(logs, agents...) {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if i := strings.Index(string(data), "panic"); i >= 0 {
			end := min(len(data), i+2000)
			t.Errorf("%s mentions a panic:\n%s", p, data[max(0, i-200):end])
			ok = false
		}
	}
	if ok {
		r.checked("controllers running; no panic in the controller's or any machine agent's log")
	}
}

// settled says whether every unit is settled (idle and running, or in an
// error state its hook's retries ran out into) and nothing is dying, as
// ctl wait judges.
func settled(doc *e2etest.StatusDoc) bool {
	for _, m := range doc.Machines {
		if m.Life != "alive" {
			return false
		}
	}
	for _, svc := range doc.Services {
		if svc.Life != "alive" {
			return false
		}
		for _, u := range svc.Units {
			if u.Life != "alive" || !(u.Agent == "idle" && u.State == "running" || u.Agent == "error" && strings.HasSuffix(u.State, "-error")) {
				return false
			}
		}
	}
	for _, r := range doc.Relations {
		if r.Life != "alive" {
			return false
		}
	}
	return true
}

// waitModel polls the status until cond holds, checking on every poll
// that nothing dying lacks a reported blocker. Polls that fail (the
// controller or etcd recovering) are retried.
func (f *fixture) waitModel(t *testing.T, what string, timeout time.Duration, cond func(*e2etest.StatusDoc) bool) *e2etest.StatusDoc {
	t.Helper()
	var last *e2etest.StatusDoc
	var stranded []string
	poll.Within(t, what, timeout, func() (bool, string) {
		if f.abort != nil {
			if err := f.abort(); err != nil {
				t.Fatalf("while waiting for %s: %v", what, err)
			}
		}
		doc, err := f.TryStatus()
		if err != nil {
			return false, err.Error()
		}
		last = doc
		if s := doc.Stranded(); len(s) > 0 && stranded == nil {
			stranded = s
		}
		return cond(doc), doc.String()
	})
	if stranded != nil {
		t.Errorf("while waiting for %s, status showed entities dying without what they wait for: %v", what, stranded)
	}
	return last
}
