package faults

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestSlowWatchReaders: one machine's credential opens many watch
// streams it never reads, each with many subscriptions, as its unit
// fnode/0, to the scope of fnode/0's relation with fsrv/0, the machine's
// other unit, while fsrv/0 rewrites its 60 KiB settings as fast as the
// controller takes them. The streams past the credential's limit are
// refused, the others cut once what they hold passes their budgets (the
// controller's defaults); meanwhile another agent's calls keep answering
// (their p99 recorded) and the operator destroys a machine. Once the
// attacker leaves, the controller's memory returns within twice its
// baseline, and the invariants held.
func TestSlowWatchReaders(t *testing.T) {
	skipWhenSoaking(t)
	runSlowWatchReaders(t, currentSizes())
}

func runSlowWatchReaders(t *testing.T, sz sizes) {
	r := newRun(t, "watch streams never read, one credential", sz)
	r.size("streams opened", sz.slowStreams)
	r.size("subscriptions a stream", sz.slowSubs)
	r.size("settings size (KiB)", 60)
	r.size("seconds of writes at least", int(sz.slowFor.Seconds()))
	// The agents' write budgets off: fsrv/0 writes as fast as the
	// controller takes it, the streams' budgets are what is tried here.
	f := newResourceFixture(t, sz, "--agent-writes-per-second", "0", "--agent-write-bytes-per-minute", "0")
	attacker, attackerConn := f.addMachine(t)
	agentMachine, agentConn := f.addMachine(t)
	spare, _ := f.addMachine(t)
	f.OK(t, "deploy", testCharm("fsrv"), "--to", attacker)
	f.OK(t, "deploy", testCharm("fnode"), "--to", attacker)
	f.OK(t, "add-relation", "fnode", "fsrv")
	doc := f.waitModel(t, "the relation", time.Minute, func(doc *e2etest.StatusDoc) bool { return len(doc.Relations) == 1 })
	var rel int64
	for _, rd := range doc.Relations {
		rel = rd.ID
	}

	// The attacker's agent: its units' credentials, their scopes entered.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	machine := pb.NewAgentServiceClient(attackerConn)
	issued, err := machine.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"fsrv/0", "fnode/0"}})
	if err != nil {
		t.Fatalf("IssueUnitCredentials: %v", err)
	}
	unit := map[string]pb.AgentServiceClient{}
	var fnode *pb.AgentCredential
	for _, c := range issued.GetCredentials() {
		cfg, err := pki.ReadClientConfig(f.Config)
		if err != nil {
			t.Fatal(err)
		}
		acfg := apiclient.FromClientConfig(cfg)
		acfg.Credential = pki.Credential{Tag: c.GetTag(), Secret: c.GetSecret()}
		conn, err := apiclient.Dial(acfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		unit[c.GetUnit()] = pb.NewAgentServiceClient(conn)
		if c.GetUnit() == "fnode/0" {
			fnode = &pb.AgentCredential{Tag: c.GetTag(), Secret: c.GetSecret()}
		}
		if _, err := unit[c.GetUnit()].EnterScope(ctx, &pb.EnterScopeRequest{Relation: rel, Unit: c.GetUnit(), Settings: map[string]string{"v": "0"}}); err != nil {
			t.Fatalf("EnterScope(%s): %v", c.GetUnit(), err)
		}
	}
	// The baseline under the other agent's calls, which go on through
	// the attack.
	calls := f.startAgentCalls(agentMachine, agentConn)
	base := f.baseline(t, r)
	peak := f.watchPeak()

	// The attack: streams never read, then the writes.
	actx, leave := context.WithCancel(ctx)
	defer leave()
	for range sz.slowStreams {
		s, err := machine.WatchMany(actx)
		if err != nil {
			t.Fatal(err)
		}
		for id := range int64(sz.slowSubs) {
			if err := s.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{
				Id: id + 1, As: fnode, Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: rel}},
			}}}); err != nil {
				if errors.Is(err, io.EOF) {
					break // refused: its status waits, unread
				}
				t.Fatalf("subscribe: %v", err)
			}
		}
	}
	r.inject("watch streams opened and never read")
	// Writes for the attack's length, and on until a stream is cut
	// (the streams' flow-control windows must fill first, however slowly
	// a loaded machine writes), four times as long at most.
	big := strings.Repeat("x", 60<<10)
	start := time.Now()
	cuts := func() int {
		body, err := f.scrape()
		if err != nil {
			return 0
		}
		return int(metric(body, `lifeline_watch_streams_cut_total{limit="stream"}`) + metric(body, `lifeline_watch_streams_cut_total{limit="credential"}`) + metric(body, `lifeline_watch_streams_cut_total{limit="total"}`))
	}
	writes := 0
	for ; time.Since(start) < 4*sz.slowFor && (time.Since(start) < sz.slowFor || writes%10 != 0 || cuts() == 0); writes++ {
		if _, err := unit["fsrv/0"].UpdateSettings(ctx, &pb.UpdateSettingsRequest{Unit: "fsrv/0", Updates: []*pb.SettingsUpdate{{
			Relation: rel, Set: map[string]string{"v": string(rune('a'+writes%26)) + big},
		}}}); err != nil {
			t.Fatalf("UpdateSettings %d: %v", writes, err)
		}
		if writes == 50 {
			f.operatorDestroys(t, r, spare, "slow watch readers")
		}
	}
	r.count("settings written", writes)
	checkAgentCalls(t, r, calls, "slow watch readers")
	r.count("seconds of writes", int(time.Since(start).Seconds()))
	body, err := f.scrape()
	if err != nil {
		t.Fatal(err)
	}
	cut := cuts()
	refused := int(metric(body, "lifeline_watch_streams_refused_total"))
	r.count("streams cut", cut)
	r.count("streams refused (past the credential's limit)", refused)
	r.count("most held for one stream (MiB)", int(metric(body, "lifeline_watch_held_bytes_stream_max"))>>20)
	if cut == 0 || refused != max(0, sz.slowStreams-16) {
		t.Errorf("%d streams cut and %d refused, want some cut and %d refused", cut, refused, max(0, sz.slowStreams-16))
	} else {
		r.checked("the streams past the credential's limit refused, the others cut past their budgets")
	}
	leave() // the attacker goes
	f.checkMemoryReturns(t, r, base, peak.stop(), "slow watch readers")
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}
