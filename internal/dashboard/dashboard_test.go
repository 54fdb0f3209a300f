package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestDashboardOverHTTP logs in with links, checks what a viewer and an
// operator see and may do, follows the live stream through a deploy and
// a hook failing, and ends a removed user's session: one controller for
// all of it.
func TestDashboardOverHTTP(t *testing.T) {
	f := start(t)
	admin := f.Operator()
	olga := f.op("olga", pb.UserRole_USER_ROLE_OPERATOR)
	vic := f.op("vic", pb.UserRole_USER_ROLE_VIEWER)

	t.Run("login", func(t *testing.T) {
		c := f.browser()
		if code, body := get(t, c, f.url+"/"); code != http.StatusUnauthorized || !strings.Contains(body, "ctl dashboard") {
			t.Errorf("GET / without a session = %d, want 401 saying how to log in", code)
		}
		link := f.link(olga)
		// Opening the link (as a link's preview would) asks to confirm,
		// and spends nothing.
		for range 2 {
			if code, body := get(t, f.browser(), link); code != 200 || !strings.Contains(body, `id="confirm"`) || strings.Contains(body, "Logged in") {
				t.Fatalf("GET the link = %d %q, want 200, a page asking to confirm", code, body)
			}
		}
		if code, body := f.logIn(c, link); code != 200 || !strings.Contains(body, "Logged in as olga") {
			t.Fatalf("confirm the link = %d %q, want 200, logged in", code, body)
		}
		if code, _ := f.logIn(f.browser(), link); code != http.StatusUnauthorized {
			t.Errorf("confirm the link again = %d, want 401: it works once", code)
		}
		code, body := get(t, c, f.url+"/")
		if code != 200 || !strings.Contains(body, "olga (operator)") {
			t.Errorf("GET / = %d, want the model page for olga", code)
		}
	})

	f.deployKV(admin, 2)
	f.failHook("kv/0")

	t.Run("viewer", func(t *testing.T) {
		c := f.browser()
		f.logIn(c, f.link(vic))
		_, page := get(t, c, f.url+"/")
		if !strings.Contains(page, "kv/0") || strings.Contains(page, `class="resolve"`) {
			t.Errorf("a viewer's page shows kv/0: %t, a Resolved button: %t; want the unit and no button",
				strings.Contains(page, "kv/0"), strings.Contains(page, `class="resolve"`))
		}
		code, unitPage := get(t, c, f.url+"/units/kv/0")
		if code != 200 || !strings.Contains(unitPage, "Status history") || !strings.Contains(unitPage, "cannot bind port 70000") || strings.Contains(unitPage, `class="resolve"`) {
			t.Errorf("a viewer's unit page = %d, history with the hook's output %t, a button %t; want 200, the output, no button",
				code, strings.Contains(unitPage, "cannot bind port 70000"), strings.Contains(unitPage, `class="resolve"`))
		}
		if code, body := f.post(c, "/units/kv/0/resolved", ""); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("POST resolved without the CSRF token = %d %q, want 403", code, body)
		}
		if code, body := f.post(c, "/units/kv/0/resolved", csrfOf(page)); code != http.StatusForbidden || !strings.Contains(body, "user vic (viewer) may not call Resolved") {
			t.Errorf("POST resolved as a viewer = %d %q, want 403", code, body)
		}
		if e := lastAudit(t, f, "Resolved"); e.GetUser() != "vic" || e.GetCode() != 7 {
			t.Errorf("last Resolved audit entry = %v, want vic's, refused (PermissionDenied)", e)
		}
	})

	t.Run("operator", func(t *testing.T) {
		c := f.browser()
		f.logIn(c, f.link(olga))
		_, page := get(t, c, f.url+"/")
		if i, j := strings.Index(page, "kv/0"), strings.Index(page, "kv/1"); i < 0 || j < 0 || i > j || !strings.Contains(page, `class="resolve"`) {
			t.Errorf("an operator's page: kv/0 (in error) at %d, kv/1 at %d, button %t; want kv/0 first with a button", i, j, strings.Contains(page, `class="resolve"`))
		}
		req, _ := http.NewRequest("POST", f.url+"/units/kv/0/resolved", nil)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("X-CSRF-Token", csrfOf(page))
		if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST resolved from another origin = %v %v, want 403", resp.Status, err)
		}
		if code, body := f.post(c, "/units/kv/0/resolved", csrfOf(page)); code != 200 {
			t.Fatalf("POST resolved as an operator = %d %q, want 200", code, body)
		}
		if e := lastAudit(t, f, "Resolved"); e.GetUser() != "olga" || e.GetCode() != 0 || !e.GetChanged() {
			t.Errorf("last Resolved audit entry = %v, want olga's change", e)
		}
	})

	t.Run("live", func(t *testing.T) {
		c := f.browser()
		f.logIn(c, f.link(olga))
		ctx, cancel := context.WithCancel(f.Ctx)
		defer cancel()
		ch := events(ctx, t, c, f.url)
		next(t, ch, 5*time.Second, func(name, data string) bool { return name == "model" && strings.Contains(data, "kv/1") })
		f.Upload(admin, "../../controller/testdata/app")
		start := time.Now()
		if _, err := admin.Deploy(f.Ctx, &pb.DeployRequest{Charm: "app", NumUnits: 1}); err != nil {
			t.Fatal(err)
		}
		next(t, ch, 5*time.Second, func(name, data string) bool { return strings.Contains(data, "app/0") })
		t.Logf("a deploy reached the open page's stream in %s", time.Since(start))
		f.failHook("app/0")
		// After the whole page, a change sends only the rows it changed.
		next(t, ch, 5*time.Second, func(name, data string) bool {
			return name == "rows" && strings.Contains(data, `class="error life-alive" data-unit="app/0"`) && !strings.Contains(data, `data-unit="kv/0"`) &&
				strings.Contains(data, `data-key="service:app"`) && strings.Contains(data, "error: app/0: hook failed")
		})
		// A status the charm set for its service speaks for it, through
		// its units' changes.
		if err := f.State.SetStatus(f.Ctx, state.StatusService, "app", &pb.Status{Status: "active", Message: "set by the charm"}); err != nil {
			t.Fatal(err)
		}
		next(t, ch, 5*time.Second, func(name, data string) bool {
			return name == "rows" && strings.Contains(data, "active: set by the charm")
		})
		if err := f.State.SetStatus(f.Ctx, state.StatusUnit, "app/0", &pb.Status{Status: "blocked", Message: "needs a database"}); err != nil {
			t.Fatal(err)
		}
		_, data := next(t, ch, 5*time.Second, func(name, data string) bool {
			return name == "rows" && strings.Contains(data, `<td class="workload">blocked</td>`)
		})
		if strings.Contains(data, `data-key="service:app"`) {
			t.Errorf("a unit's status changed the row of a service whose charm set its status:\n%s", data)
		}
	})

	t.Run("removed user", func(t *testing.T) {
		rita := f.op("rita", pb.UserRole_USER_ROLE_OPERATOR)
		c := f.browser()
		f.logIn(c, f.link(rita))
		ctx, cancel := context.WithCancel(f.Ctx)
		defer cancel()
		ch := events(ctx, t, c, f.url)
		next(t, ch, 5*time.Second, func(name, _ string) bool { return name == "model" })
		if _, err := admin.RemoveUser(f.Ctx, &pb.RemoveUserRequest{Name: "rita"}); err != nil {
			t.Fatal(err)
		}
		_, why := next(t, ch, 5*time.Second, func(name, _ string) bool { return name == "end" })
		if !strings.Contains(why, "session ended") {
			t.Errorf("the stream ended with %q, want the session's end", why)
		}
		if code, _ := get(t, c, f.url+"/"); code != http.StatusUnauthorized {
			t.Errorf("GET / after the user's removal = %d, want 401", code)
		}
	})
}

// lastAudit is the newest audit entry of rpc.
func lastAudit(t *testing.T, f *fixture, rpc string) *pb.AuditEntry {
	t.Helper()
	entries, _, err := f.State.AuditAfter(f.Ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Rpc == rpc {
			return entries[i]
		}
	}
	return nil
}
