package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// postForm posts a form to path as the page's form would, with the CSRF
// token csrf, and returns the status, the body and the page to go on to.
func (f *fixture) postForm(c *http.Client, path, csrf string, form url.Values) (int, string, string) {
	f.t.Helper()
	if csrf != "" {
		form.Set("csrf", csrf)
	}
	req, _ := http.NewRequest("POST", f.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.url)
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Dashboard-Next")
}

// loggedIn is a browser logged in as the user op calls as, and the CSRF
// token of its session.
func (f *fixture) loggedIn(op pb.OperatorServiceClient) (*http.Client, string) {
	f.t.Helper()
	c := f.browser()
	if code, _ := f.logIn(c, f.link(op)); code != 200 {
		f.t.Fatalf("log in: %d", code)
	}
	_, page := get(f.t, c, f.url+"/")
	return c, csrfOf(page)
}

// TestPagesOverHTTP: the service, operations, operation, audit and
// controllers pages, each as a viewer, an operator and an admin see it;
// an action run from the service page, approved, executed, paused and
// resumed from the operation's page, each through the user's call and
// audited; the operation's live stream showing a pause. One controller
// for all of it.
func TestPagesOverHTTP(t *testing.T) {
	f := start(t)
	admin := f.Operator()
	olga := f.op("olga", pb.UserRole_USER_ROLE_OPERATOR)
	vic := f.op("vic", pb.UserRole_USER_ROLE_VIEWER)
	ada := f.op("ada", pb.UserRole_USER_ROLE_ADMIN)
	f.Upload(admin, "../../examples/charms/kv")
	if _, err := admin.Deploy(f.Ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetConfig(f.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"port": "7071"}}); err != nil {
		t.Logf("SetConfig: %v (the revision history shows no change)", err)
	}
	oc, ocsrf := f.loggedIn(olga)
	vc, vcsrf := f.loggedIn(vic)
	ac, acsrf := f.loggedIn(ada)

	t.Run("service page", func(t *testing.T) {
		code, page := get(t, oc, f.url+"/services/kv")
		for _, want := range []string{`id="rollout-h"`, `data-unit="kv/1"`, `id="config"`, `id="revisions"`, `data-action="reindex"`, `Run reindex`, `href="/units/kv/0"`} {
			if code != 200 || !strings.Contains(page, want) {
				t.Errorf("an operator's service page = %d, has %s: %t", code, want, strings.Contains(page, want))
			}
		}
		_, vpage := get(t, vc, f.url+"/services/kv")
		if !strings.Contains(vpage, `data-action="reindex"`) || strings.Contains(vpage, `form class="act`) {
			t.Errorf("a viewer's service page lists the actions: %t, offers a form: %t; want the list and no form",
				strings.Contains(vpage, `data-action="reindex"`), strings.Contains(vpage, `form class="act`))
		}
		if code, _ := get(t, oc, f.url+"/services/nope"); code != http.StatusNotFound {
			t.Errorf("GET /services/nope = %d, want 404", code)
		}
		_, model := get(t, oc, f.url+"/")
		if !strings.Contains(model, `href="/services/kv"`) {
			t.Errorf("the model page does not link the service's page")
		}
	})

	var opPath string
	t.Run("run and approve", func(t *testing.T) {
		if code, body, _ := f.postForm(vc, "/services/kv/run", vcsrf, url.Values{"action": {"backup"}, "params": {`{"name": "b1"}`}}); code != http.StatusForbidden {
			t.Errorf("a viewer's run = %d %q, want 403", code, body)
		}
		code, body, nextPage := f.postForm(oc, "/services/kv/run", ocsrf, url.Values{"action": {"backup"}, "params": {`{"name": "b1"}`}})
		if code != 200 || !strings.Contains(body, "awaiting-approval") || !strings.HasPrefix(nextPage, "/operations/") {
			t.Fatalf("an operator's run of backup = %d %q next %q, want it awaiting approval", code, body, nextPage)
		}
		opPath = nextPage
		_, page := get(t, oc, f.url+opPath)
		if !strings.Contains(page, `&#34;name&#34;: &#34;b1&#34;`) || strings.Contains(page, `id="approve"`) || !strings.Contains(page, "awaiting approval by") {
			t.Errorf("the requester's page: params %t, an Approve button %t, the reason %t; want the params, no button, the reason",
				strings.Contains(page, `&#34;name&#34;: &#34;b1&#34;`), strings.Contains(page, `id="approve"`), strings.Contains(page, "awaiting approval by"))
		}
		digest := regexp.MustCompile(`<code id="digest">([0-9a-f]+)</code>`).FindStringSubmatch(page)
		if digest == nil {
			t.Fatalf("no digest on the operation's page")
		}
		_, vpage := get(t, vc, f.url+opPath)
		if strings.Contains(vpage, `form class="act"`) {
			t.Errorf("a viewer's operation page has buttons")
		}
		if code, _, _ := f.postForm(vc, opPath+"/approve", vcsrf, url.Values{"digest": {digest[1]}}); code != http.StatusForbidden {
			t.Errorf("a viewer's approval = %d, want 403", code)
		}
		if code, body, _ := f.postForm(oc, opPath+"/approve", ocsrf, url.Values{"digest": {digest[1]}}); code != http.StatusConflict && code != http.StatusForbidden {
			t.Errorf("the requester's own approval = %d %q, want it refused", code, body)
		}
		_, apage := get(t, ac, f.url+opPath)
		if !strings.Contains(apage, `id="approve"`) || !strings.Contains(apage, `name="digest" value="`+digest[1]+`"`) || !strings.Contains(apage, `&#34;name&#34;: &#34;b1&#34;`) {
			t.Fatalf("the approver's page: a button %t with the digest %t and the params %t; want all three",
				strings.Contains(apage, `id="approve"`), strings.Contains(apage, digest[1]), strings.Contains(apage, `&#34;name&#34;: &#34;b1&#34;`))
		}
		if code, body, _ := f.postForm(ac, opPath+"/approve", acsrf, url.Values{"digest": {"0123"}}); code != http.StatusConflict {
			t.Errorf("an approval of another digest = %d %q, want 409", code, body)
		}
		// The requester's open page shows the approval live.
		ctx, cancel := context.WithCancel(f.Ctx)
		defer cancel()
		ch := eventsAt(ctx, t, oc, f.url+"/events?page=operation&id="+strings.TrimPrefix(opPath, "/operations/"))
		next(t, ch, 5*time.Second, func(name, data string) bool { return strings.Contains(data, `class="op-awaiting-approval"`) })
		if code, body, _ := f.postForm(ac, opPath+"/approve", acsrf, url.Values{"digest": {digest[1]}}); code != 200 {
			t.Fatalf("the approver's approval = %d %q, want 200", code, body)
		}
		next(t, ch, 5*time.Second, func(name, data string) bool { return strings.Contains(data, `class="op-approved"`) })
		if e := lastAudit(t, f, "ApproveOperation"); e.GetUser() != "ada" || e.GetCode() != 0 || !e.GetChanged() {
			t.Errorf("last ApproveOperation audit entry = %v, want ada's change", e)
		}
		_, page = get(t, oc, f.url+opPath)
		if !strings.Contains(page, `id="execute"`) {
			t.Errorf("the requester's page of an approved operation has no Execute button")
		}
		if code, body, _ := f.postForm(oc, opPath+"/execute", ocsrf, url.Values{}); code != 200 {
			t.Fatalf("the requester's execute = %d %q, want 200", code, body)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		code, body, opp := f.postForm(oc, "/services/kv/run", ocsrf, url.Values{"action": {"reindex"}, "params": {`{"steps": 5}`}})
		if code != 200 || !strings.Contains(body, "running") {
			t.Fatalf("run reindex = %d %q, want it running", code, body)
		}
		ctx, cancel := context.WithCancel(f.Ctx)
		defer cancel()
		id := strings.TrimPrefix(opp, "/operations/")
		ch := eventsAt(ctx, t, oc, f.url+"/events?page=operation&id="+id)
		await := func(want string) {
			t.Helper()
			deadline := time.After(5 * time.Second)
			var last string
			for {
				select {
				case ev, ok := <-ch:
					if !ok {
						t.Fatalf("the stream ended awaiting %s", want)
					}
					if strings.Contains(ev[1], want) {
						return
					}
					last = ev[0] + ": " + ev[1]
				case <-deadline:
					i := strings.Index(last, `id="tasks"`)
					t.Fatalf("no event with %s within 5 s; the last: %.600s", want, last[max(i, 0):])
				}
			}
		}
		await(`data-task="kv/0" class="task-pending"`)
		_, vpage := get(t, vc, f.url+opp)
		if strings.Contains(vpage, `class="pause"`) {
			t.Errorf("a viewer's page of a running operation has Pause buttons")
		}
		if code, _, _ := f.postForm(vc, opp+"/pause", vcsrf, url.Values{"unit": {"kv/0"}}); code != http.StatusForbidden {
			t.Errorf("a viewer's pause = %d, want 403", code)
		}
		if code, body, _ := f.postForm(oc, opp+"/pause", ocsrf, url.Values{"unit": {"kv/0"}}); code != 200 || !strings.Contains(body, "kv/0 changed") {
			t.Fatalf("pause kv/0 = %d %q, want it changed", code, body)
		}
		await(`data-task="kv/0" class="task-paused"`)
		if e := lastAudit(t, f, "PauseTasks"); e.GetUser() != "olga" || e.GetCode() != 0 {
			t.Errorf("last PauseTasks audit entry = %v, want olga's", e)
		}
		if code, body, _ := f.postForm(oc, opp+"/resume", ocsrf, url.Values{"unit": {"kv/0"}}); code != 200 || !strings.Contains(body, "kv/0 changed") {
			t.Fatalf("resume kv/0 = %d %q, want it changed", code, body)
		}
		await(`data-task="kv/0" class="task-pending"`)
		_, list := get(t, oc, f.url+"/operations?state=running")
		if !strings.Contains(list, `data-op="`+id+`"`) {
			t.Errorf("the running operations' list lacks operation %s", id)
		}
		if code, _ := get(t, oc, f.url+"/operations?state=nonsense"); code != http.StatusBadRequest {
			t.Errorf("GET /operations?state=nonsense = %d, want 400", code)
		}
	})

	t.Run("audit", func(t *testing.T) {
		code, page := get(t, vc, f.url+"/audit?verb=ApproveOperation")
		if code != 200 || !strings.Contains(page, `data-verb="ApproveOperation" data-user="ada"`) || strings.Contains(page, `data-verb="PauseTasks"`) {
			t.Errorf("the audit page filtered by verb = %d, ada's approval %t, other verbs %t\n%s", code, strings.Contains(page, `data-user="ada"`), strings.Contains(page, `data-verb="PauseTasks"`), page)
		}
		_, page = get(t, vc, f.url+"/audit?user=vic")
		if !strings.Contains(page, `data-verb="RunAction" data-user="vic" class="error"`) || strings.Contains(page, `data-user="olga"`) {
			t.Errorf("the audit page filtered by user vic lacks vic's refused RunAction, or shows olga's")
		}
		_, page = get(t, vc, f.url+"/audit?since=1ns")
		if !strings.Contains(page, "No entries match") {
			t.Errorf("the audit page since a nanosecond ago shows entries")
		}
		if code, _ := get(t, vc, f.url+"/audit?since=yesterday"); code != http.StatusBadRequest {
			t.Errorf("GET /audit?since=yesterday = %d, want 400", code)
		}
		// The Audit call filters by verb: one that no method has is
		// refused there.
		if code, body := get(t, vc, f.url+"/audit?verb=kv%2F0"); code != http.StatusBadRequest || !strings.Contains(body, "want a method's name") {
			t.Errorf("GET /audit?verb=kv/0 = %d %q, want 400", code, body)
		}
	})

	t.Run("controllers", func(t *testing.T) {
		code, page := get(t, vc, f.url+"/controllers")
		if code != 200 || !strings.Contains(page, `id="leader"`) {
			t.Errorf("the controllers page = %d %q", code, page)
		}
	})
}
