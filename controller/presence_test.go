package controller_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestPresenceLapsesWithoutPings checks the presence stream's rules: an
// agent that pings stays present; one silent for the timeout is absent
// then, though its stream is still open, and its next ping ends the
// stream DeadlineExceeded, so that it reconnects; closing the stream takes
// the presence away at once.
func TestPresenceLapsesWithoutPings(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	ce := controllertest.New(t, controllertest.Options{Anonymous: true, PresenceTimeout: ttl})
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := ce.State.AddMachines(ce.Ctx, 1)
	ok("AddMachines", err)
	agent := ce.Agent("machine-0")
	present := func() bool {
		t.Helper()
		p, err := ce.State.Presences(ce.Ctx)
		ok("Presences", err)
		return p["machine-0"]
	}
	waitFor := func(what string, want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for present() != want {
			if time.Now().After(deadline) {
				t.Fatalf("machine-0 never became %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	stream, err := agent.Presence(ce.Ctx)
	ok("Presence", err)
	ok("first ping", stream.Send(&pb.PresenceRequest{}))
	resp, err := stream.Recv()
	ok("first answer", err)
	if got, want := time.Duration(resp.PingIntervalMs)*time.Millisecond, ttl/3; got != want {
		t.Fatalf("ping interval %s, want %s", got, want)
	}
	waitFor("present", true)

	// Pinging at the interval for three timeouts keeps it present.
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); {
		time.Sleep(ttl / 3)
		ok("ping", stream.Send(&pb.PresenceRequest{}))
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("a pinging agent's stream ended: %v", err)
		}
		if !present() {
			t.Fatal("a pinging agent went absent")
		}
	}

	// Silent: absent within the timeout (and some slack), stream open.
	silent := time.Now()
	waitFor("absent", false)
	if d := time.Since(silent); d < ttl/2 {
		t.Fatalf("absent %s after its last ping, before the timeout of %s", d, ttl)
	}
	ok("ping after the timeout", stream.Send(&pb.PresenceRequest{}))
	for {
		_, err := stream.Recv()
		if err == nil {
			continue // the answer to the ping before
		}
		wantCode(t, "Recv after the timeout", err, codes.DeadlineExceeded, "no ping from")
		break
	}
	if present() {
		t.Fatal("present again after the stream ended")
	}

	// A new stream makes it present; closing it makes it absent at once.
	stream, err = agent.Presence(ce.Ctx)
	ok("Presence again", err)
	ok("ping", stream.Send(&pb.PresenceRequest{}))
	_, err = stream.Recv()
	ok("answer", err)
	waitFor("present again", true)
	ok("CloseSend", stream.CloseSend())
	start := time.Now()
	waitFor("absent once closed", false)
	if d := time.Since(start); d >= ttl {
		t.Fatalf("absent only %s after its stream closed (the timeout is %s)", d, ttl)
	}
}
