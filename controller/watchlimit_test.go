package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestSlowWatchStreamsOfOneCredentialAreCut: one machine's credential
// opens watch streams it never reads, each with 400 subscriptions as its
// unit to the unit's peer relation, while the unit rewrites its 60 KiB
// settings. The streams past the credential's limit are refused; the
// others are cut (ResourceExhausted) once the changes held for them pass
// their budgets, and what the watch hub holds never goes far past the
// credential's budget. Another machine's agent is answered throughout,
// and once the streams are gone the hub holds nothing. Without the
// budgets, the hub queued up to 4,096 changes for every subscription and
// never cut a stream.
func TestSlowWatchStreamsOfOneCredentialAreCut(t *testing.T) {
	const (
		streams = 20
		// A response of the peer relation's scope carries the members'
		// settings versions, some bytes: with 400 subscriptions a stream
		// fills its flow-control window (1 MiB) in 50 writes or so, past
		// which the controller can send it nothing more and queues.
		subscriptions = 400
		writes        = 200
		// The default limits.
		credentialBytes = 128 << 20
		maxStreams      = 16
	)
	// The agents' write budgets off: kv/0 writes as fast as it can.
	e := controllertest.New(t, controllertest.Options{Budgets: controller.Budgets{Writes: -1, Bytes: -1}})
	if _, err := e.State.AddMachines(e.Ctx, 2); err != nil {
		t.Fatal(err)
	}
	eps := []*pb.Endpoint{{Name: "cluster", Interface: "kv-peers", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL}}
	ch, err := e.State.AddCharm(e.Ctx, &pb.Charm{Name: "kv", Endpoints: eps}, []byte("kv charm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.AddService(e.Ctx, state.AddServiceArgs{Name: "kv", Endpoints: eps,
		Charm: &pb.CharmRef{Name: ch.Name, Revision: ch.Revision, Sha256: ch.Sha256}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.AddUnits(e.Ctx, "kv", 1, state.Placement{Machine: "0"}); err != nil {
		t.Fatal(err)
	}
	peer, err := e.State.RelationByKey(e.Ctx, "kv:cluster")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.State.EnterScope(e.Ctx, peer.Id, "kv/0", map[string]string{"v": "0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Minute)
	defer cancel()

	// The attacker: machine 0's agent, and the credential it has issued
	// for its unit.
	machine := e.Agent("machine-0")
	issued, err := machine.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/0"}})
	if err != nil {
		t.Fatalf("IssueUnitCredentials: %v", err)
	}
	unitCred := pki.Credential{Tag: issued.GetCredentials()[0].GetTag(), Secret: issued.GetCredentials()[0].GetSecret()}
	unit := pb.NewAgentServiceClient(e.Dial(unitCred))
	as := &pb.AgentCredential{Tag: unitCred.Tag, Secret: unitCred.Secret}
	var opened []pb.AgentService_WatchManyClient
	for range streams {
		s, err := machine.WatchMany(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for id := range int64(subscriptions) {
			if err := s.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{
				Id: id + 1, As: as, Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: peer.Id}},
			}}}); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("subscribe: %v", err)
			}
		}
		opened = append(opened, s)
	}
	other := e.Agent("machine-1")
	big := strings.Repeat("x", 60<<10)
	var mostHeld int64
	for i := 0; i < writes && e.Hub().Stats().CutsStream+e.Hub().Stats().CutsParent < maxStreams; i++ {
		if _, err := unit.UpdateSettings(ctx, &pb.UpdateSettingsRequest{Unit: "kv/0", Updates: []*pb.SettingsUpdate{{
			Relation: peer.Id, Set: map[string]string{"v": string(rune('a'+i%26)) + big},
		}}}); err != nil {
			t.Fatalf("UpdateSettings %d: %v", i, err)
		}
		if _, err := other.GetMachine(ctx, &pb.GetMachineRequest{Machine: "1"}); err != nil {
			t.Errorf("another machine's GetMachine during the attack: %v", err)
		}
		mostHeld = max(mostHeld, e.Hub().Stats().Held)
	}

	// Every stream ends: refused past the credential's limit on streams,
	// cut past its budgets.
	var refused, cut int
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, s := range opened {
		wg.Go(func() {
			var err error
			for err == nil {
				_, err = s.Recv()
			}
			mu.Lock()
			defer mu.Unlock()
			st, _ := status.FromError(err)
			switch {
			case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "watch streams open"):
				refused++
			case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "fell too far behind"):
				cut++
			default:
				t.Errorf("an attacking stream ended with %v, want ResourceExhausted: refused or cut", err)
			}
		})
	}
	wg.Wait()
	if refused != streams-maxStreams || cut != maxStreams {
		t.Errorf("%d streams refused and %d cut, want %d and %d", refused, cut, streams-maxStreams, maxStreams)
	}
	// At most a revision's changes for each stream past the budget: a
	// stream is cut when it is behind.
	if limit := int64(credentialBytes + maxStreams*subscriptions*(61<<10)); mostHeld > limit {
		t.Errorf("the watch hub held %d MiB at most during the attack, want at most %d MiB", mostHeld>>20, limit>>20)
	}
	if st := e.Hub().Stats(); st.CutsStream+st.CutsParent != maxStreams || st.MostHeld > credentialBytes+subscriptions*(61<<10) {
		t.Errorf("hub Stats() = %+v, want %d cuts, no stream past the credential's budget by more than a revision", st, maxStreams)
	}
	poll.UntilSays(t, "the hub to hold nothing once the streams ended", func() (bool, string) {
		held := e.Hub().Stats().Held
		return held == 0, fmt.Sprintf("it holds %d bytes", held)
	})
	// The credential opens streams again, within its limit.
	s, err := machine.WatchMany(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{
		Id: 1, Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_Machine{Machine: "0"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.Recv(); err != nil || !resp.GetWatch().GetRelisted() {
		t.Errorf("a new stream after the cuts: %v, %v; want its listing", resp, err)
	}
}
