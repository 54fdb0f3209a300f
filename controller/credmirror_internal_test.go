package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// The mirror holds every stored credential's hash, follows changes, and
// knows nothing once the hub stops.
func TestCredMirrorFollowsTheCredentials(t *testing.T) {
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	_, before, err := pki.NewCredential("admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.BootstrapAdmin(ctx, before); err != nil {
		t.Fatal(err)
	}
	hub, err := watchhub.New(watchhub.Config{Source: st})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(hctx); close(done) }()
	defer func() { stop(); <-done }()

	m := newCredMirror(hub, hclog.NewNullLogger())
	ran := make(chan struct{})
	go func() { m.run(context.Background()); close(ran) }() // ends with the hub
	waitFor := func(what string, ok func(hash string, found bool) bool) {
		t.Helper()
		poll.UntilSays(t, "the mirror of admin to have "+what, func() (bool, string) {
			h, found := m.lookup("admin")
			return ok(h, found), fmt.Sprintf("mirror of admin = %q, %v", h, found)
		})
	}
	waitFor("the hash stored before it started", func(h string, found bool) bool { return found && h == before })

	_, after, err := pki.NewCredential("admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetUserCredential(ctx, "admin", after); err != nil {
		t.Fatal(err)
	}
	waitFor("the replacing hash", func(h string, found bool) bool { return found && h == after })

	if err := st.RevokeCredential(ctx, "admin"); err != nil {
		t.Fatal(err)
	}
	waitFor("nothing once revoked", func(_ string, found bool) bool { return !found })

	if err := st.SetUserCredential(ctx, "admin", before); err != nil {
		t.Fatal(err)
	}
	waitFor("the hash set again", func(h string, found bool) bool { return found && h == before })
	stop()
	<-done
	waitFor("nothing once the hub stopped", func(_ string, found bool) bool { return !found })
	<-ran
}
