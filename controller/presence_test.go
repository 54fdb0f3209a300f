package controller_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// presenceEnv is a controller whose agents' presence lapses after ttl,
// with machine-0's agent.
type presenceEnv struct {
	t     *testing.T
	ce    *controllertest.Env
	agent pb.AgentServiceClient
}

func newPresenceEnv(t *testing.T, ttl time.Duration) *presenceEnv {
	t.Helper()
	ce := controllertest.New(t, controllertest.Options{Anonymous: true, PresenceTimeout: ttl})
	if _, err := ce.State.AddMachines(ce.Ctx, 1); err != nil {
		t.Fatalf("AddMachines: %v", err)
	}
	return &presenceEnv{t: t, ce: ce, agent: ce.Agent("machine-0")}
}

// present says whether the controller records machine-0 present.
func (e *presenceEnv) present() bool {
	e.t.Helper()
	p, err := e.ce.State.Presences(e.ce.Ctx)
	if err != nil {
		e.t.Fatalf("Presences: %v", err)
	}
	return p["machine-0"]
}

// waitFor waits until machine-0 is present, or absent.
func (e *presenceEnv) waitFor(what string, want bool) {
	e.t.Helper()
	poll.Until(e.t, "machine-0 "+what, func() bool { return e.present() == want })
}

// open opens a presence stream, pings once and reads the answer.
func (e *presenceEnv) open() (grpc.BidiStreamingClient[pb.PresenceRequest, pb.PresenceResponse], *pb.PresenceResponse) {
	e.t.Helper()
	stream, err := e.agent.Presence(e.ce.Ctx)
	if err != nil {
		e.t.Fatalf("Presence: %v", err)
	}
	if err := stream.Send(&pb.PresenceRequest{}); err != nil {
		e.t.Fatalf("first ping: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		e.t.Fatalf("first answer: %v", err)
	}
	return stream, resp
}

// TestPresenceLapsesWithoutPings checks the presence stream's rules: an
// agent that pings stays present; one silent for the timeout is absent
// then, though its stream is still open, and its next ping ends the
// stream DeadlineExceeded, so that it reconnects.
func TestPresenceLapsesWithoutPings(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	e := newPresenceEnv(t, ttl)
	stream, resp := e.open()
	if got, want := time.Duration(resp.PingIntervalMs)*time.Millisecond, ttl/3; got != want {
		t.Fatalf("ping interval %s, want %s", got, want)
	}
	e.waitFor("present", true)

	// Pinging at the interval, over three timeouts, keeps it present.
	for range 9 {
		time.Sleep(ttl / 3)
		if err := stream.Send(&pb.PresenceRequest{}); err != nil {
			t.Fatalf("ping: %v", err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("a pinging agent's stream ended: %v", err)
		}
		if !e.present() {
			t.Fatal("a pinging agent went absent")
		}
	}

	// Silent: absent, stream open; the next ping ends the stream.
	e.waitFor("absent", false)
	if err := stream.Send(&pb.PresenceRequest{}); err != nil {
		t.Fatalf("ping after the timeout: %v", err)
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue // the answer to the ping before
		}
		wantCode(t, "Recv after the timeout", err, codes.DeadlineExceeded, "no ping from")
		break
	}
	if e.present() {
		t.Fatal("present again after the stream ended")
	}

	// A new stream makes it present again.
	e.open()
	e.waitFor("present again", true)
}

// TestPresenceEndsWithItsStream: closing the presence stream takes the
// presence away at once, not when the timeout lapses (an hour here).
func TestPresenceEndsWithItsStream(t *testing.T) {
	e := newPresenceEnv(t, time.Hour)
	stream, _ := e.open()
	e.waitFor("present", true)
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	e.waitFor("absent once its stream closed", false)
}
