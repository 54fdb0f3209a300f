package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/state"
)

// rolloutDoc is what ctl rollout status --format json says.
type rolloutDoc struct {
	Service   string `json:"service"`
	Revision  int64  `json:"revision"`
	Previous  int64  `json:"previous"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Reverting int64  `json:"reverting"`
	Permits   int64  `json:"permits"`
	Counts    struct {
		Units, Updated, Updating, Waiting, Denied, Failed int32
	} `json:"counts"`
	Units []struct {
		Name    string `json:"name"`
		Machine string `json:"machine"`
		Current int64  `json:"current"`
		Target  int64  `json:"target"`
		Permit  bool   `json:"permit"`
		Note    string `json:"note"`
		Agent   string `json:"agent"`
	} `json:"units"`
	Decisions []struct {
		Unit     string `json:"unit"`
		Machine  string `json:"machine"`
		Gate     string `json:"gate"`
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	} `json:"decisions"`
}

func rolloutStatus(t *testing.T, s *e2etest.Sandbox, service string) rolloutDoc {
	t.Helper()
	var doc rolloutDoc
	if err := json.Unmarshal([]byte(s.OK(t, "rollout", "status", service, "--format", "json")), &doc); err != nil {
		t.Fatalf("ctl rollout status %s --format json: %v", service, err)
	}
	return doc
}

// waitRollout polls service's rollout until cond holds.
func waitRollout(t *testing.T, s *e2etest.Sandbox, service, what string, timeout time.Duration, cond func(rolloutDoc) bool) rolloutDoc {
	t.Helper()
	return waitRolloutVia(t, s, "", service, what, timeout, cond)
}

// waitRolloutVia is waitRollout through the client config at config.
func waitRolloutVia(t *testing.T, s *e2etest.Sandbox, config, service, what string, timeout time.Duration, cond func(rolloutDoc) bool) rolloutDoc {
	t.Helper()
	var doc rolloutDoc
	poll.Within(t, what, timeout, func() (bool, string) {
		r := s.CtlVia(config, "rollout", "status", service, "--format", "json")
		if r.Code != 0 {
			return false, r.Stderr
		}
		doc = rolloutDoc{}
		if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
			return false, err.Error()
		}
		return cond(doc), r.Stdout
	})
	return doc
}

// rolledTo says whether the rollout is done at revision n, every unit on it.
func rolledTo(n int64) func(rolloutDoc) bool {
	return func(d rolloutDoc) bool {
		if d.State != "done" || d.Revision != n || d.Permits != 0 {
			return false
		}
		for _, u := range d.Units {
			if u.Current != n {
				return false
			}
		}
		return true
	}
}

// permitWatch follows a service's permits in etcd at every revision and
// keeps the most out at once.
type permitWatch struct {
	mu   sync.Mutex
	most int
	seen int
	stop func()
	done chan struct{}
}

func watchPermits(t *testing.T, client *clientv3.Client, ns, service string) *permitWatch {
	t.Helper()
	prefix := ns + state.PermitsPrefix(service)
	ctx, cancel := context.WithCancel(context.Background())
	get, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	w := &permitWatch{stop: cancel, done: make(chan struct{})}
	out := map[string]bool{}
	for _, kv := range get.Kvs {
		out[string(kv.Key)] = true
	}
	go func() {
		defer close(w.done)
		for resp := range client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(get.Header.Revision+1)) {
			if resp.Err() != nil {
				if ctx.Err() == nil {
					t.Errorf("watching %s's permits: %v", service, resp.Err())
				}
				return
			}
			evs := resp.Events
			for i := 0; i < len(evs); {
				rev := evs[i].Kv.ModRevision
				for ; i < len(evs) && evs[i].Kv.ModRevision == rev; i++ {
					if evs[i].Type == clientv3.EventTypePut {
						out[string(evs[i].Kv.Key)] = true
					} else {
						delete(out, string(evs[i].Kv.Key))
					}
				}
				w.mu.Lock()
				w.most, w.seen = max(w.most, len(out)), w.seen+1
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *permitWatch) result() (most, revisions int) {
	w.stop()
	<-w.done
	return w.most, w.seen
}

// startOnEtcd starts an etcd server of the test's own, one member in a
// process of its own (not in the test binary, where the race detector
// and the other tests' work starved it past etcd's request timeout on a
// loaded machine), and a controller on it, returning a client of the
// member and the flags that put a controller on it.
func startOnEtcd(t *testing.T, s *e2etest.Sandbox, extra ...string) (*clientv3.Client, []string) {
	t.Helper()
	if etcdErr != nil {
		t.Fatalf("the etcd server could not be built: %v", etcdErr)
	}
	c := s.StartEtcd(t, e2etest.EtcdConfig{Binary: etcdBin, Members: 1, NoFsync: true})
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	s.OnStop(func() { client.Close() })
	on := c.ControllerFlags(rolloutNS)
	s.StartController(t, append(on, extra...)...)
	return client, on
}

const rolloutNS = "/lifeline/"

// TestRolloutCanaryFailureAndDeadline: with real agents and a policy of
// two units at a time and a canary of one, a refresh moves one unit
// (running upgrade-charm), waits for promote, then moves the rest; a
// configuration whose config-changed fails on purpose fails the rollout
// and reverts it at once, to the spec before, with the same budget and
// no canary; a rollout that cannot finish by its deadline fails, and
// without auto-revert waits, saying why, until aborted. At no revision
// of the model are more than two permits out.
func TestRolloutCanaryFailureAndDeadline(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	client, _ := startOnEtcd(t, s)
	ns := rolloutNS
	s.OK(t, "deploy", olderCharm(t, "kv"), "kv", "-n", "4")
	s.OK(t, "wait", "--timeout", "3m")
	s.OK(t, "set-rollout", "kv", "--max-parallel", "2", "--canary", "1")
	permits := watchPermits(t, client, ns, "kv")

	s.OK(t, "refresh", "kv", "--path", charmPath(t, "kv"))
	doc := waitRollout(t, s, "kv", "the canary moved", 3*time.Minute, func(d rolloutDoc) bool {
		return d.State == "canary" && d.Revision == 2 && d.Counts.Updated == 1 && d.Permits == 0
	})
	if doc.Counts.Waiting != 3 {
		t.Errorf("after the canary: %+v, want 3 units waiting", doc.Counts)
	}
	s.OK(t, "rollout", "promote", "kv")
	waitRollout(t, s, "kv", "every unit on revision 2", 3*time.Minute, rolledTo(2))
	// The agent's "running upgrade-charm hook" is a progress report, which
	// the next one (config-changed's) may replace before it is sent on a
	// busy machine; the status the hook itself sets is always kept.
	if log := s.OK(t, "show-status-log", "kv/0"); !strings.Contains(log, "upgrade-charm") && !strings.Contains(log, "upgraded the charm") {
		t.Errorf("ctl show-status-log kv/0:\n%s\nwant upgrade-charm run", log)
	}

	// A port kv-server cannot listen on: config-changed fails, and the
	// rollout returns to revision 2's spec as revision 4.
	s.OK(t, "config", "kv", "port=70000")
	doc = waitRollout(t, s, "kv", "the failed revision reverted", 4*time.Minute, rolledTo(4))
	if doc.Reverting != 3 {
		t.Errorf("rollout after the failure = %+v, want revision 4 reverting 3", doc)
	}
	if out := s.OK(t, "revisions", "kv", "--show", "4"); !strings.Contains(out, "auto-revert") {
		t.Errorf("ctl revisions kv --show 4:\n%s\nwant an auto-revert", out)
	}
	for _, u := range doc.Units {
		if u.Agent == "error" {
			t.Errorf("unit %s is in error after the revert: %+v", u.Name, u)
		}
	}

	// Never healthy long enough: the deadline fails it, and without
	// auto-revert it waits for the operator.
	s.OK(t, "set-rollout", "kv", "--canary", "0", "--min-healthy", "1h", "--deadline", "10s", "--auto-revert=false")
	s.OK(t, "config", "kv", "port=7171")
	doc = waitRollout(t, s, "kv", "the rollout failed by its deadline", 2*time.Minute, func(d rolloutDoc) bool {
		return d.State == "failed" && d.Revision == 5
	})
	if !strings.Contains(doc.Reason, "deadline") {
		t.Errorf("the failed rollout's reason = %q, want the deadline named", doc.Reason)
	}
	// The abort's rollout runs under the same policy: a deadline of
	// minutes, not the 10 s above, lets it finish on a loaded machine.
	s.OK(t, "set-rollout", "kv", "--min-healthy", "0s", "--deadline", "10m")
	s.OK(t, "rollout", "abort", "kv")
	waitRollout(t, s, "kv", "the aborted rollout back on revision 4's spec", 3*time.Minute, rolledTo(6))

	if most, seen := permits.result(); most > 2 || seen == 0 {
		t.Errorf("permits out at once: at most %d over %d revisions, want at most 2 (max-parallel)", most, seen)
	}
	checkModel(t, client, ns)
}

// checkModel runs the invariant checker over the model in etcd.
func checkModel(t *testing.T, client *clientv3.Client, ns string) {
	t.Helper()
	st, err := state.New(client, state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := state.CheckInvariants(snap); err != nil {
		t.Errorf("the model breaks its invariants: %v", err)
	}
}

// orly is a gate program: it denies every unit on machine 0, asks to
// retry kv/1's first question, and allows the rest.
const orly = `#!/bin/sh
q=$(cat)
case "$q" in
*'"machine":"0"'*) echo '{"decision":"deny","reason":"machine 0 is frozen"}' ;;
*'"unit":"kv/1"'*)
	if [ ! -e "$0.asked" ]; then
		touch "$0.asked"
		echo '{"decision":"retry","reason":"busy","retry_after":1}'
	else
		echo '{"decision":"allow","reason":"ok"}'
	fi ;;
*) echo '{"decision":"allow","reason":"ok"}' ;;
esac
`

// TestRolloutGate: a gate program asked before each unit moves: the unit
// it denies keeps its revision and its status says why, the one it asks
// to retry moves once asked again; a gate that fails (exit 3) holds every
// unit (fail closed), shown as retry, until the policy drops it.
func TestRolloutGate(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	gate := filepath.Join(s.Dir, "orly")
	if err := os.WriteFile(gate, []byte(orly), 0o755); err != nil {
		t.Fatal(err)
	}
	s.StartController(t, "--rollout-gate", "orly="+gate, "--rollout-gate", "broken=exit 3")
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "3")
	s.OK(t, "wait", "--timeout", "3m")
	s.OK(t, "set-rollout", "kv", "--gate", "orly")
	s.OK(t, "config", "kv", "port=7171")
	frozen := ""
	doc := waitRollout(t, s, "kv", "every unit off machine 0 moved, the one on it denied", 3*time.Minute, func(d rolloutDoc) bool {
		moved := 0
		for _, u := range d.Units {
			switch {
			case u.Machine == "0" && u.Current == 1 && strings.Contains(u.Note, `gate "orly" denied: machine 0 is frozen`):
				frozen = u.Name
			case u.Machine != "0" && u.Current == 2:
				moved++
			}
		}
		return frozen != "" && moved == len(d.Units)-1
	})
	verdicts := map[string]bool{}
	for _, dec := range doc.Decisions {
		verdicts[dec.Unit+" "+dec.Decision] = true
	}
	if !verdicts[frozen+" deny"] || !verdicts["kv/1 retry"] || !verdicts["kv/1 allow"] {
		t.Errorf("gate decisions %+v, want %s denied and kv/1 retried then allowed", doc.Decisions, frozen)
	}
	if st := s.OK(t, "status"); !strings.Contains(st, "rev 2 (2/3)") {
		t.Errorf("ctl status:\n%s\nwant kv at rev 2 (2/3): the denied unit waits", st)
	}

	// A gate that fails holds every unit: fail closed.
	s.OK(t, "set-rollout", "kv", "--gate", "broken")
	s.OK(t, "config", "kv", "port=7272")
	waitRollout(t, s, "kv", "the broken gate's retries recorded", 2*time.Minute, func(d rolloutDoc) bool {
		for _, dec := range d.Decisions {
			if dec.Gate == "broken" && dec.Decision == "retry" {
				return true
			}
		}
		return false
	})
	if doc := rolloutStatus(t, s, "kv"); doc.Counts.Updated != 0 {
		t.Errorf("with a failing gate %d units moved, want none", doc.Counts.Updated)
	}
	s.OK(t, "set-rollout", "kv", "--gate", "none")
	waitRollout(t, s, "kv", "every unit on revision 3 once the gate is dropped", 3*time.Minute, rolledTo(3))
}

// TestRolloutSurvivesLeaderDeath: the controller running the rollout
// worker is killed mid-rollout; the other, elected, finishes it, with
// never more permits out than the policy allows and none lost or doubled
// (the invariant checker counts them against the rollout's count).
func TestRolloutSurvivesLeaderDeath(t *testing.T) {
	// Not parallel: two controllers, and the leader killed mid-rollout,
	// kept apart from the parallel tests' load.
	needCharms(t)
	s := newSandbox(t)
	client, on := startOnEtcd(t, s)
	ns := rolloutNS
	s.StartController(t, on...)
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "6")
	s.OK(t, "wait", "--timeout", "3m")
	s.OK(t, "set-rollout", "kv", "--max-parallel", "2", "--min-healthy", "2s")
	permits := watchPermits(t, client, ns, "kv")
	s.OK(t, "config", "kv", "port=7171")
	waitRollout(t, s, "kv", "a unit moved", 2*time.Minute, func(d rolloutDoc) bool { return d.Counts.Updated >= 1 })
	var leader, survivor *e2etest.Controller
	for _, c := range s.Controllers() {
		if log, _ := os.ReadFile(c.Log()); leader == nil && strings.Contains(string(log), "elected to run the singleton workers") {
			leader = c
		} else {
			survivor = c
		}
	}
	if leader == nil || survivor == nil {
		t.Fatal("no controller says it was elected")
	}
	leader.Kill(t)
	waitRolloutVia(t, s, survivor.ClientConfig(), "kv", "every unit on revision 2 after the leader's death", 4*time.Minute, rolledTo(2))
	if most, _ := permits.result(); most > 2 {
		t.Errorf("at most %d permits out at once, want 2", most)
	}
	checkModel(t, client, ns)
}
