package state_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/state"
)

// dashHash is the hash state keeps of a dashboard secret.
func dashHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func TestDashboardLoginWorksOnceAndEndsWithItsUser(t *testing.T) {
	st, ctx := newState(t)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	addUser(t, ctx, st, "alice", operator, time.Now())
	now := time.Now()
	link, sess := dashHash("link"), dashHash("sess")

	wantErr(t, "AddDashboardLogin(nobody)", st.AddDashboardLogin(ctx, "nobody", link, now.Add(time.Minute)), state.ErrNotFound, "", "user nobody not found or not registered")
	wantErr(t, "AddDashboardLogin(bad hash)", st.AddDashboardLogin(ctx, "alice", "xyz", now.Add(time.Minute)), state.ErrInvalid, "", "invalid dashboard secret hash: want 64 lowercase hex digits")
	must(t, "AddDashboardLogin", st.AddDashboardLogin(ctx, "alice", link, now.Add(time.Minute)))

	_, err := st.UseDashboardLogin(ctx, "alice", link, sess, now.Add(2*time.Minute), time.Hour)
	wantErr(t, "UseDashboardLogin(expired)", err, state.ErrNotFound, "", "the dashboard login link is not valid: used already, expired, or never issued (ctl dashboard makes another)")
	got, err := st.UseDashboardLogin(ctx, "alice", link, sess, now, time.Hour)
	must(t, "UseDashboardLogin", err)
	if got.User != "alice" || got.ExpiresUnixNano != now.Add(time.Hour).UnixNano() {
		t.Errorf("UseDashboardLogin = %v, want alice's, expiring in an hour", got)
	}
	_, err = st.UseDashboardLogin(ctx, "alice", link, dashHash("again"), now, time.Hour)
	wantErr(t, "UseDashboardLogin(used)", err, state.ErrNotFound, "", "the dashboard login link is not valid: used already, expired, or never issued (ctl dashboard makes another)")

	if _, err := st.DashboardSession(ctx, "alice", sess, now); err != nil {
		t.Fatalf("DashboardSession = %v, want the session", err)
	}
	_, err = st.DashboardSession(ctx, "alice", sess, now.Add(2*time.Hour))
	wantErr(t, "DashboardSession(expired)", err, state.ErrNotFound, "", "no dashboard session: logged out, expired, or its user removed")

	must(t, "AddDashboardLogin", st.AddDashboardLogin(ctx, "alice", dashHash("link2"), now.Add(time.Minute)))
	must(t, "RemoveUser", st.RemoveUser(ctx, "alice"))
	_, err = st.DashboardSession(ctx, "alice", sess, now)
	wantErr(t, "DashboardSession(removed user)", err, state.ErrNotFound, "", "no dashboard session: logged out, expired, or its user removed")
}

func TestDashboardSessionsPerUserAreBounded(t *testing.T) {
	st, ctx := newState(t)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	now := time.Now()
	var first string
	for i := range state.MaxDashboardSessionsPerUser + 2 {
		link, sess := dashHash(fmt.Sprint("l", i)), dashHash(fmt.Sprint("s", i))
		if i == 0 {
			first = sess
		}
		must(t, "AddDashboardLogin", st.AddDashboardLogin(ctx, "admin", link, now.Add(time.Minute)))
		_, err := st.UseDashboardLogin(ctx, "admin", link, sess, now.Add(time.Duration(i)*time.Millisecond), time.Hour)
		must(t, "UseDashboardLogin", err)
	}
	_, err := st.DashboardSession(ctx, "admin", first, now)
	wantErr(t, "DashboardSession(oldest)", err, state.ErrNotFound, "", "no dashboard session: logged out, expired, or its user removed")
	for i := range state.MaxDashboardLoginsPerUser {
		must(t, "AddDashboardLogin", st.AddDashboardLogin(ctx, "admin", dashHash(fmt.Sprint("m", i)), now.Add(time.Minute)))
	}
	err = st.AddDashboardLogin(ctx, "admin", dashHash("one too many"), now.Add(time.Minute))
	if !errors.Is(err, state.ErrRefused) {
		t.Errorf("AddDashboardLogin past the bound = %v, want ErrRefused", err)
	}
}

// TestDashboardRandomized makes, uses and ends dashboard logins and
// sessions from several goroutines while users come and go, with the
// monitor checking the invariants (a link's and a session's user exists,
// the bounds) at every revision. Then no link made more than one session.
func TestDashboardRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mon := statetest.Start(t, st)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	users := []string{"alice", "bob"}
	var sessions atomic.Int64
	var wins sync.Map // link hash -> successful uses
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var links []string
			for i := range 80 {
				user := users[rng.IntN(len(users))]
				now := time.Now()
				switch rng.IntN(6) {
				case 0:
					_, err := st.AddUser(ctx, state.NewUser{Name: user, Role: operator, CreatedBy: "admin", SecretHash: "s", Expires: now.Add(time.Hour)})
					if err == nil {
						_, _ = st.Register(ctx, user, secretIs("s"), "h-"+user)
					}
				case 1:
					_ = st.RemoveUser(ctx, user)
				case 2, 3:
					h := dashHash(fmt.Sprint(seed, w, i))
					if st.AddDashboardLogin(ctx, user, h, now.Add(time.Minute)) == nil {
						links = append(links, user+"/"+h)
					}
				default:
					if len(links) == 0 {
						continue
					}
					l := links[rng.IntN(len(links))]
					u, h := l[:len(l)-65], l[len(l)-64:]
					// Two at once: at most one wins.
					var inner sync.WaitGroup
					for j := range 2 {
						inner.Go(func() {
							_, err := st.UseDashboardLogin(ctx, u, h, dashHash(fmt.Sprint(l, i, j)), time.Now(), time.Hour)
							if err == nil {
								sessions.Add(1)
								n, _ := wins.LoadOrStore(h, new(atomic.Int64))
								n.(*atomic.Int64).Add(1)
							} else if !errors.Is(err, state.ErrNotFound) {
								t.Errorf("UseDashboardLogin: %v", err)
							}
						})
					}
					inner.Wait()
				}
			}
		})
	}
	wg.Wait()
	wins.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n > 1 {
			t.Errorf("link %s made %d sessions, want 1", k, n)
		}
		return true
	})
	mon.Stop(t)
	t.Logf("%d sessions made, %d revisions checked", sessions.Load(), mon.Revisions())
}
