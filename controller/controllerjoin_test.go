package controller_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// joinEnv is a controller that holds kek, and a client of its
// ControllerJoinService without a credential, as a controller being
// added has none.
func joinEnv(t *testing.T, kek pki.KEK) (*env, pb.ControllerJoinServiceClient) {
	ce := controllertest.New(t, controllertest.Options{KEK: kek})
	e := &env{Env: ce, t: t, ctx: ce.Ctx, st: ce.State, addr: ce.Addr, ca: ce.CA}
	return e, pb.NewControllerJoinServiceClient(e.dial(pki.Credential{}))
}

func addController(t *testing.T, e *env, validFor time.Duration) pki.ControllerJoin {
	t.Helper()
	resp, err := e.admin().AddController(e.ctx, &pb.AddControllerRequest{ValidForMs: validFor.Milliseconds()})
	must(t, "AddController", err)
	j, err := pki.DecodeControllerJoin(resp.Token)
	must(t, "DecodeControllerJoin", err)
	return j
}

// A controller join token, issued by the operator, gives the
// key-encryption key once; a wrong secret neither works nor uses it up.
func TestControllerJoinTokenWorksOnce(t *testing.T) {
	kek, err := pki.NewKEK()
	must(t, "NewKEK", err)
	e, join := joinEnv(t, kek)

	before := time.Now()
	resp, err := e.admin().AddController(e.ctx, &pb.AddControllerRequest{})
	must(t, "AddController", err)
	j, err := pki.DecodeControllerJoin(resp.Token)
	must(t, "DecodeControllerJoin", err)
	if j.CACert != string(e.ca.CertPEM()) || len(j.Controllers) == 0 || j.Controllers[0] != e.addr {
		t.Errorf("the token names controllers %v and its CA %t, want %s and the controller's CA", j.Controllers, j.CACert == string(e.ca.CertPEM()), e.addr)
	}
	if d := time.Unix(0, resp.ExpiresUnixNano).Sub(before); d < time.Hour || d > time.Hour+time.Minute {
		t.Errorf("AddController() expires in %s, want an hour", d)
	}

	_, err = join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: j.ID, Secret: strings.Repeat("A", 43)})
	wantCode(t, "JoinController with a wrong secret", err, codes.Unauthenticated, "wrong secret")
	got, err := join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: j.ID, Secret: j.Secret})
	must(t, "JoinController", err)
	if !bytes.Equal(got.Kek, kek.Bytes()) {
		t.Errorf("JoinController answered another key")
	}
	_, err = join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: j.ID, Secret: j.Secret})
	wantCode(t, "JoinController twice", err, codes.Unauthenticated, "used already")
	_, err = join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: "x", Secret: j.Secret})
	wantCode(t, "JoinController of a malformed id", err, codes.Unauthenticated, "not a controller join token")

	// Only the operator issues tokens.
	must(t, "AddMachines", func() error {
		_, err := e.admin().AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1})
		return err
	}())
	_, err = pb.NewOperatorServiceClient(e.conn("machine-0")).AddController(e.ctx, &pb.AddControllerRequest{})
	wantCode(t, "AddController by a machine's agent", err, codes.PermissionDenied, "")
	_, err = pb.NewOperatorServiceClient(e.dial(pki.Credential{})).AddController(e.ctx, &pb.AddControllerRequest{})
	wantCode(t, "AddController without a credential", err, codes.Unauthenticated, "")
	for _, d := range []time.Duration{time.Millisecond, 25 * time.Hour} {
		_, err = e.admin().AddController(e.ctx, &pb.AddControllerRequest{ValidForMs: d.Milliseconds()})
		wantCode(t, "AddController valid for "+d.String(), err, codes.InvalidArgument, "valid from 1s to 24h0m0s")
	}
}

// A token past its expiry is refused, even while etcd still holds it.
func TestControllerJoinTokenExpires(t *testing.T) {
	kek, err := pki.NewKEK()
	must(t, "NewKEK", err)
	e, join := joinEnv(t, kek)
	secret, err := pki.NewSecret()
	must(t, "NewSecret", err)
	const id = "00000000000000ee"
	must(t, "AddControllerJoin", e.st.AddControllerJoin(e.ctx, id, &pb.ControllerJoin{
		SecretHash: pki.HashSecret(secret), ExpiresUnixNano: time.Now().Add(-time.Second).UnixNano(),
	}))
	_, err = join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: id, Secret: secret})
	wantCode(t, "JoinController with an expired token", err, codes.Unauthenticated, "expired at")
}

// A controller that holds no key-encryption key refuses, leaving the token
// for one that has it.
func TestControllerJoinWithoutKEKLeavesTheToken(t *testing.T) {
	e, join := joinEnv(t, pki.KEK{})
	j := addController(t, e, time.Minute)
	_, err := join.JoinController(e.ctx, &pb.JoinControllerRequest{TokenId: j.ID, Secret: j.Secret})
	wantCode(t, "JoinController of a controller without the key", err, codes.FailedPrecondition, "ask another controller")
	err = e.st.UseControllerJoin(e.ctx, j.ID, func(*pb.ControllerJoin) error { return nil })
	if errors.Is(err, state.ErrNotFound) {
		t.Errorf("the refusal used the token up")
	}
	must(t, "UseControllerJoin", err)
}
