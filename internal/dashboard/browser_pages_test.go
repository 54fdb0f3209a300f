package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// browserPages runs the browser tests of the service, operations, audit
// and controllers pages on TestDashboardInChromium's controller, with
// real agents: a machine agent in this process runs the test charms'
// hooks and actions. op is olga's browser (an operator), on the model
// page.
func browserPages(t *testing.T, f *fixture, exe, dir string, op context.Context, admin, olga, vic pb.OperatorServiceClient) {
	m := f.runMachine(t)
	f.Upload(admin, "testdata/long")
	f.Upload(admin, "testdata/broken")
	if _, err := admin.Deploy(f.Ctx, &pb.DeployRequest{Charm: "long", NumUnits: 1, To: m}); err != nil {
		t.Fatal(err)
	}

	t.Run("a real hook failure shows live", func(t *testing.T) {
		run(t, op, "the model page", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
		start := time.Now()
		if _, err := admin.Deploy(f.Ctx, &pb.DeployRequest{Charm: "broken", NumUnits: 1, To: m}); err != nil {
			t.Fatal(err)
		}
		run(t, op, "wait for broken/0 in error", chromedp.WaitVisible(chromedp.CSS(`tr.error[data-unit="broken/0"]`)))
		t.Logf("broken/0's failed install hook showed on the open page %s after the Deploy call", time.Since(start))
		run(t, op, "open broken/0", chromedp.Navigate(f.url+"/units/broken/0"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			click(`details summary`), chromedp.WaitVisible(chromedp.CSS(`details pre`)))
		out := value(t, op, "read the hook's output", textOf(`details pre`))
		if !strings.Contains(out, "the disk is full") {
			t.Errorf("hook output shown = %q, want the install hook's", out)
		}
		shot(t, op, dir, "unit-error")
	})

	t.Run("service page", func(t *testing.T) {
		run(t, op, "open long's page", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS(`a[href="/services/long"]`)),
			click(`a[href="/services/long"]`), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-action="steps"] form.run`)))
		waitTrue(t, op, "long/0 installed", `document.querySelector('#units tr[data-unit="long/0"]').textContent.includes("installed")`)
		shot(t, op, dir, "service")
	})

	t.Run("operator pauses and resumes a task", func(t *testing.T) {
		run(t, op, "run steps from the service page",
			chromedp.SendKeys(chromedp.CSS(`#params-steps`), `{"steps": 400, "step-ms": 100}`),
			click(`tr[data-action="steps"] button`),
			chromedp.WaitVisible(chromedp.CSS(`#tasks`)), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.WaitVisible(chromedp.CSS(`tr.task-running[data-task="long/0"] button.pause`)))
		waitTrue(t, op, "the log tail shows a step", `(document.querySelector('pre[data-log="long/0"]') || {textContent: ""}).textContent.includes("step 2 of 400")`)
		shot(t, op, dir, "operation-running")
		start := time.Now()
		run(t, op, "pause long/0", click(`tr[data-task="long/0"] button.pause`),
			chromedp.WaitVisible(chromedp.CSS(`tr.task-paused[data-task="long/0"] button.resume`)))
		t.Logf("the paused task showed paused %s after the click", time.Since(start))
		if e := lastAudit(t, f, "PauseTasks"); e.GetUser() != "olga" || e.GetCode() != 0 || !e.GetChanged() {
			t.Errorf("last PauseTasks audit entry = %v, want olga's change", e)
		}
		shot(t, op, dir, "operation-paused")
		run(t, op, "resume long/0", click(`tr[data-task="long/0"] button.resume`),
			chromedp.WaitVisible(chromedp.CSS(`tr.task-running[data-task="long/0"]`)))
		waitTrue(t, op, "the log says it resumed", `document.querySelector('pre[data-log="long/0"]').textContent.includes("resuming after step")`)
		run(t, op, "stop it", click(`#stop-all`), chromedp.WaitVisible(chromedp.CSS(`tr.task-stopped[data-task="long/0"]`)))
	})

	// ada, an admin, approves and rejects in a browser of her own.
	adaOp := f.op("ada", pb.UserRole_USER_ROLE_ADMIN)
	ada := newBrowser(t, exe, 1280, 900)

	t.Run("approver approves", func(t *testing.T) {
		run(t, op, "run wipe from the service page", chromedp.Navigate(f.url+"/services/long"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.SendKeys(chromedp.CSS(`#params-wipe`), `{"reason": "browser test"}`),
			click(`tr[data-action="wipe"] button`),
			chromedp.WaitVisible(chromedp.CSS(`#op-state.op-awaiting-approval`)))
		if n := value(t, op, "look for Approve", chromedp.Evaluate[int](`document.querySelectorAll('#approve').length`)); n != 0 {
			t.Errorf("the requester's page offers Approve")
		}
		path := value(t, op, "the operation's path", chromedp.Evaluate[string](`location.pathname`))
		run(t, ada, "log in", chromedp.Navigate(f.link(adaOp)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.Navigate(f.url+path), chromedp.WaitVisible(chromedp.CSS(`#approve`)))
		params := value(t, ada, "read the parameters", textOf(`#params`))
		digest := value(t, ada, "read the digest", textOf(`#digest`))
		if !strings.Contains(params, `"reason": "browser test"`) || len(digest) < 16 {
			t.Errorf("the approver sees parameters %q and digest %q, want the exact parameters and the digest", params, digest)
		}
		shot(t, ada, dir, "operation-approve")
		run(t, ada, "approve", click(`#approve`), chromedp.WaitVisible(chromedp.CSS(`#op-state.op-approved`)))
		if e := lastAudit(t, f, "ApproveOperation"); e.GetUser() != "ada" || e.GetCode() != 0 || !e.GetChanged() {
			t.Errorf("last ApproveOperation audit entry = %v, want ada's change", e)
		}
		// The requester's open page shows the approval live, and Execute.
		run(t, op, "execute", chromedp.WaitVisible(chromedp.CSS(`#execute`)), click(`#execute`),
			chromedp.WaitVisible(chromedp.CSS(`tr.task-done[data-task="long/0"]`)))

		// A viewer sees no buttons, and is refused posting directly.
		b := newBrowser(t, exe, 1280, 900)
		run(t, b, "log in", chromedp.Navigate(f.link(vic)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.Navigate(f.url+path), chromedp.WaitVisible(chromedp.CSS(`#tasks`)))
		forms := value(t, b, "look for buttons", chromedp.Evaluate[int](`document.querySelectorAll('form.act').length`))
		status := value(t, b, "post directly", chromedp.Evaluate[int](
			`fetch(location.pathname + "/resume", {method: "POST", headers: {"X-CSRF-Token": document.body.dataset.csrf}}).then(r => r.status)`, chromedp.EvalAwaitPromise))
		if forms != 0 || status != 403 {
			t.Errorf("a viewer's operation page: %d forms, a direct post answered %d; want none and 403", forms, status)
		}
		shot(t, b, dir, "operation-viewer")
	})

	t.Run("approver rejects", func(t *testing.T) {
		run(t, op, "run wipe again", chromedp.Navigate(f.url+"/services/long"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.SendKeys(chromedp.CSS(`#params-wipe`), `{"reason": "to be rejected"}`),
			click(`tr[data-action="wipe"] button`),
			chromedp.WaitVisible(chromedp.CSS(`#op-state.op-awaiting-approval`)))
		if n := value(t, op, "look for Reject", chromedp.Evaluate[int](`document.querySelectorAll('#reject').length`)); n != 0 {
			t.Errorf("the requester's page (an operator's) offers Reject")
		}
		path := value(t, op, "the operation's path", chromedp.Evaluate[string](`location.pathname`))
		run(t, ada, "reject", chromedp.Navigate(f.url+path), chromedp.WaitVisible(chromedp.CSS(`#reject`)),
			chromedp.SendKeys(chromedp.CSS(`#reason`), "not today"), click(`#reject`),
			chromedp.WaitVisible(chromedp.CSS(`#op-state.op-rejected`)))
		if e := lastAudit(t, f, "RejectOperation"); e.GetUser() != "ada" || e.GetCode() != 0 || !e.GetChanged() {
			t.Errorf("last RejectOperation audit entry = %v, want ada's change", e)
		}
		// The requester's open page shows the rejection live, and why.
		run(t, op, "the rejection shows", chromedp.WaitVisible(chromedp.CSS(`#op-state.op-rejected`)))
		waitTrue(t, op, "the reason shows", `document.getElementById("model").textContent.includes("by ada: not today")`)
		shot(t, op, dir, "operation-rejected")
	})

	t.Run("rollout buttons", func(t *testing.T) {
		// A canary of one unit: no rollout worker runs beside the test's
		// controller, so the rollout waits in its canary until steered.
		if _, err := admin.SetRolloutPolicy(f.Ctx, &pb.SetRolloutPolicyRequest{Service: "long", Canary: ptr(int64(1))}); err != nil {
			t.Fatal(err)
		}
		run(t, op, "long's page", chromedp.Navigate(f.url+"/services/long"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
		if n := value(t, op, "look for rollout buttons", chromedp.Evaluate[int](`document.querySelectorAll('button[id^="rollout-"]').length`)); n != 0 {
			t.Errorf("a done rollout's page offers %d rollout buttons, want none", n)
		}
		if _, err := admin.SetConfig(f.Ctx, &pb.SetConfigRequest{Service: "long", Set: map[string]string{"greeting": "hello"}}); err != nil {
			t.Fatal(err)
		}
		rolloutIs := func(what, state string) {
			t.Helper()
			waitTrue(t, op, what, fmt.Sprintf(`(document.querySelector("#rollout .rollout-state") || {textContent: ""}).textContent === %q`, state))
		}
		rolloutIs("the canary shows live", "canary")
		for _, step := range []struct{ button, verb, rpc, state string }{
			{"#rollout-pause", "pause", "PauseRollout", "paused"},
			{"#rollout-resume", "resume", "ResumeRollout", "canary"},
			{"#rollout-promote", "promote", "PromoteRollout", "rolling"},
			{"#rollout-abort", "abort", "AbortRollout", "rolling"},
		} {
			run(t, op, "press "+step.button, click(step.button))
			waitTrue(t, op, step.verb+" answered", fmt.Sprintf(`document.getElementById("notice").textContent.includes("long's rollout: %s done")`, step.verb))
			rolloutIs("the rollout "+step.state+" after "+step.verb, step.state)
			if e := lastAudit(t, f, step.rpc); e.GetUser() != "olga" || e.GetCode() != 0 || !e.GetChanged() {
				t.Errorf("last %s audit entry = %v, want olga's change", step.rpc, e)
			}
			if step.verb == "pause" {
				shot(t, op, dir, "service-rollout-paused")
			}
		}
		// The abort made revision 3 of revision 1's spec, rolled out
		// without a canary.
		waitTrue(t, op, "revision 3 shows", `document.querySelector('#revisions tr[data-revision="3"]') !== null`)
		if n := value(t, op, "look for Promote", chromedp.Evaluate[int](`document.querySelectorAll('#rollout-promote').length`)); n != 0 {
			t.Errorf("a rolling rollout's page offers Promote")
		}
		// A viewer sees the rollout and no buttons.
		b := newBrowser(t, exe, 1280, 900)
		run(t, b, "log in", chromedp.Navigate(f.link(vic)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			chromedp.Navigate(f.url+"/services/long"), chromedp.WaitVisible(chromedp.CSS(`#rollout`)))
		if n := value(t, b, "look for rollout buttons", chromedp.Evaluate[int](`document.querySelectorAll('button[id^="rollout-"]').length`)); n != 0 {
			t.Errorf("a viewer's service page offers %d rollout buttons, want none", n)
		}
	})

	t.Run("operations, audit and controllers pages", func(t *testing.T) {
		run(t, op, "operations", chromedp.Navigate(f.url+"/operations"), chromedp.WaitVisible(chromedp.CSS(`#ops tr[data-op]`)))
		shot(t, op, dir, "operations")
		run(t, op, "audit", chromedp.Navigate(f.url+"/audit?verb=PauseTasks"), chromedp.WaitVisible(chromedp.CSS(`#audit tr[data-verb="PauseTasks"]`)))
		if n := value(t, op, "count other verbs", chromedp.Evaluate[int](`document.querySelectorAll('#audit tr[data-verb]:not([data-verb="PauseTasks"])').length`)); n != 0 {
			t.Errorf("the audit page filtered by PauseTasks shows %d other entries", n)
		}
		shot(t, op, dir, "audit")
		run(t, op, "controllers", chromedp.Navigate(f.url+"/controllers"), chromedp.WaitVisible(chromedp.CSS(`#leader`)))
		shot(t, op, dir, "controllers")
		run(t, op, "back to the model", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
	})
}

func ptr[T any](v T) *T { return &v }
