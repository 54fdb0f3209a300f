package controller

import (
	"context"
	"crypto/tls"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// The operator's calls write ahead of the agents' queued writes
// (state.WithPriority); an agent's calls queue as before.
func TestOperatorCallsGoAhead(t *testing.T) {
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	hub, err := watchhub.New(watchhub.Config{Source: st})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{State: st, Watches: hub, TLS: &tls.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tag, method string
		ahead       bool
	}{
		{"admin", "/lifeline.v1.OperatorService/DestroyMachine", true},
		{"machine-" + ms[0].Id, "/lifeline.v1.AgentService/EnsureMachineDead", false},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			cred, hash, err := pki.NewCredential(tc.tag)
			if err != nil {
				t.Fatal(err)
			}
			if tc.tag == "admin" {
				err = st.BootstrapAdmin(ctx, hash)
			} else {
				err = st.SetCredential(ctx, tc.tag, hash)
			}
			if err != nil {
				t.Fatal(err)
			}
			kv, err := cred.GetRequestMetadata(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cctx := metadata.NewIncomingContext(ctx, metadata.New(kv))
			var ahead bool
			_, err = s.unaryInterceptor(cctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(ctx context.Context, _ any) (any, error) {
				ahead = state.HasPriority(ctx)
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if ahead != tc.ahead {
				t.Errorf("%s calling %s: state.HasPriority = %v, want %v", tc.tag, tc.method, ahead, tc.ahead)
			}
		})
	}
}
