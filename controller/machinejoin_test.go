package controller_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestJoinTokenJoinsOnce: a manual machine's join token, presented
// without a credential, stores the credential its host made, once: the
// host's calls then work with it. The token again (a second host), a
// token with the wrong secret, an expired one, are refused and change
// nothing; a new token (ctl join-token) joins again, replacing the
// machine's credential.
func TestJoinTokenJoinsOnce(t *testing.T) {
	e := newEnvWithAddresses(t)
	op := e.admin()
	resp, err := op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true})
	must(t, "AddMachines --manual", err)
	if len(resp.JoinTokens) != 1 {
		t.Fatalf("AddMachines --manual gave %d tokens, want 1", len(resp.JoinTokens))
	}
	id := resp.Machines[0].Id
	tok, err := pki.DecodeJoinToken(resp.JoinTokens[0])
	must(t, "DecodeJoinToken", err)
	if tok.Machine != id || tok.Controllers[0] != e.Addr || time.Until(tok.Expires) <= 0 || time.Until(tok.Expires) > time.Hour {
		t.Errorf("join token = %v, want machine %s, controller %s, expiring within the hour", tok, id, e.Addr)
	}
	joiner := pb.NewMachineJoinServiceClient(e.dial(pki.Credential{}))
	join := func(tok pki.JoinToken) (pki.Credential, error) {
		cred, hash, err := pki.NewCredential("machine-" + tok.Machine)
		must(t, "NewCredential", err)
		_, err = joiner.JoinMachine(e.ctx, &pb.JoinMachineRequest{Machine: tok.Machine, TokenSecret: tok.Secret, CredentialHash: hash})
		return cred, err
	}
	works := func(cred pki.Credential) error {
		_, err := pb.NewAgentServiceClient(e.dial(cred)).GetMachine(e.ctx, &pb.GetMachineRequest{Machine: id})
		return err
	}

	wrong := tok
	wrong.Secret, _ = pki.NewSecret()
	_, err = join(wrong)
	wantCode(t, "Join with the wrong secret", err, codes.Unauthenticated, "is not valid")
	_, err = joiner.JoinMachine(e.ctx, &pb.JoinMachineRequest{Machine: id, TokenSecret: tok.Secret, CredentialHash: "sha256:nope"})
	wantCode(t, "Join with a malformed hash", err, codes.InvalidArgument, "malformed secret hash")

	first, err := join(tok)
	must(t, "Join", err)
	must(t, "a call with the joined credential", works(first))
	second, err := join(tok)
	wantCode(t, "Join with the token used", err, codes.Unauthenticated, "used already")
	wantCode(t, "a call with the credential of the refused join", works(second), codes.Unauthenticated, "not valid")
	must(t, "a call with the first join's credential, after the refused one", works(first))

	// An expired token is refused; a new one joins, and replaces the
	// machine's credential.
	short, err := op.IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: id, TtlMs: 1})
	must(t, "IssueJoinToken", err)
	stok, err := pki.DecodeJoinToken(short.JoinToken)
	must(t, "DecodeJoinToken", err)
	for time.Now().Before(stok.Expires.Add(time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	_, err = join(stok)
	wantCode(t, "Join with an expired token", err, codes.Unauthenticated, "expired at")
	again, err := op.IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: id})
	must(t, "IssueJoinToken", err)
	atok, err := pki.DecodeJoinToken(again.JoinToken)
	must(t, "DecodeJoinToken", err)
	rejoined, err := join(atok)
	must(t, "Join with a new token", err)
	must(t, "a call with the new credential", works(rejoined))
	wantCode(t, "a call with the credential replaced", works(first), codes.Unauthenticated, "not valid")

	// Only manual machines have join tokens; bad ttls are refused.
	provided, err := op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1})
	must(t, "AddMachines", err)
	_, err = op.IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: provided.Machines[0].Id})
	wantCode(t, "IssueJoinToken of a provided machine", err, codes.FailedPrecondition, "not a manual machine")
	_, err = op.IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: id, TtlMs: (8 * 24 * time.Hour).Milliseconds()})
	wantCode(t, "IssueJoinToken for eight days", err, codes.InvalidArgument, "at most 168h0m0s")
	_, err = op.IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: "9"})
	wantCode(t, "IssueJoinToken of a missing machine", err, codes.NotFound, "machine 9 not found")
	// An agent may not join anything, nor ask for tokens.
	_, err = pb.NewOperatorServiceClient(e.dial(rejoined)).IssueJoinToken(e.ctx, &pb.IssueJoinTokenRequest{Machine: id})
	wantCode(t, "IssueJoinToken as the machine", err, codes.PermissionDenied, "may not call IssueJoinToken")
}

// TestSecondAgentInstanceIsFenced: a machine's presence is held by one
// agent instance. A second instance's presence is refused while the first
// is present, as are the unit credentials it asks for; the first's next
// run, naming it as the instance before, takes the machine over at once,
// and the first's stream ends at its next ping, its reconnection refused.
func TestSecondAgentInstanceIsFenced(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	upload(t, e.ctx, op, "testdata/kv")
	_, err := op.Deploy(e.ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1})
	must(t, "Deploy", err)
	u, err := e.st.Unit(e.ctx, "kv/0")
	must(t, "Unit", err)
	agent := pb.NewAgentServiceClient(e.dial(e.Credential("machine-" + u.MachineId)))
	present := func(instance, previous string) (pb.AgentService_PresenceClient, error) {
		ctx, cancel := context.WithCancel(e.ctx)
		t.Cleanup(cancel)
		stream, err := agent.Presence(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&pb.PresenceRequest{Instance: instance, PreviousInstance: previous}); err != nil {
			return nil, err
		}
		_, err = stream.Recv()
		return stream, err
	}
	issue := func(instance string) error {
		_, err := agent.IssueUnitCredentials(e.ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/0"}, Instance: instance})
		return err
	}
	wantCode(t, "IssueUnitCredentials of an instance not present", issue("a"), codes.FailedPrecondition, "is not present")
	first, err := present("a", "")
	must(t, "Presence of instance a", err)
	must(t, "IssueUnitCredentials of instance a", issue("a"))
	_, err = present("b", "")
	wantCode(t, "Presence of instance b while a is present", err, codes.FailedPrecondition, `another agent of machine `+u.MachineId+` is present (instance "a")`)
	wantCode(t, "IssueUnitCredentials of instance b", issue("b"), codes.FailedPrecondition, `instance "a", not "b"`)

	// a's next run takes over at once; a's stream ends at its next ping
	// (once this controller has seen the key change) and a is refused.
	_, err = present("a2", "a")
	must(t, "Presence of instance a2, after a", err)
	must(t, "IssueUnitCredentials of instance a2", issue("a2"))
	poll.UntilSays(t, "the stream of the instance taken over to stop answering pings", func() (bool, string) {
		must(t, "ping", first.Send(&pb.PresenceRequest{}))
		_, err = first.Recv()
		return err != nil, "it still answers"
	})
	wantCode(t, "the ping of the instance taken over", err, codes.Unavailable, "changed since this stream took it")
	_, err = present("a", "")
	wantCode(t, "Presence of instance a again", err, codes.FailedPrecondition, `(instance "a2")`)
	// An agent that names no instance is not fenced (as before instances).
	_, err = present("", "")
	must(t, "Presence without an instance", err)
}
