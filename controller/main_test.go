package controller_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// env is a controller served over TLS on loopback, with its own namespace
// (controllertest), under the short names these tests use.
type env struct {
	*controllertest.Env
	t    *testing.T
	ctx  context.Context
	st   *state.State
	addr string
	ca   *pki.CA
}

func newEnv(t *testing.T) *env { return startEnv(t, false) }

// newEnvWithAddresses is newEnv with a controller that knows its address
// and CA, as a real one does, so that it can make join tokens.
func newEnvWithAddresses(t *testing.T) *env { return startEnv(t, true) }

func startEnv(t *testing.T, withAddresses bool) *env {
	t.Helper()
	return newEnvWith(t, controllertest.Options{Anonymous: !withAddresses})
}

// newEnvWith is newEnv with the controller's options.
func newEnvWith(t *testing.T, opts controllertest.Options) *env {
	t.Helper()
	ce := controllertest.New(t, opts)
	return &env{Env: ce, t: t, ctx: ce.Ctx, st: ce.State, addr: ce.Addr, ca: ce.CA}
}

// conn dials the controller as tag, storing a fresh credential for it
// (the entity must exist).
func (e *env) conn(tag string) *grpc.ClientConn { return e.Dial(e.Credential(tag)) }

func (e *env) dial(cred pki.Credential) *grpc.ClientConn { return e.Dial(cred) }

func (e *env) admin() pb.OperatorServiceClient { return pb.NewOperatorServiceClient(e.conn("admin")) }

func (e *env) agent(tag string) pb.AgentServiceClient { return pb.NewAgentServiceClient(e.conn(tag)) }

// wantCode checks err's status code and that its message says msg.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != code {
		t.Fatalf("%s = %v, want code %v", what, err, code)
	}
	if msg != "" && !contains(s.Message(), msg) {
		t.Errorf("%s = %q, want it to say %q", what, s.Message(), msg)
	}
}
