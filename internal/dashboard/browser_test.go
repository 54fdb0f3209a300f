package dashboard_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The browser tests drive headless Chromium through chromedp: the page's
// JavaScript (the live stream, the filter, the buttons) runs only in a
// browser, and chromedp talks to Chromium's DevTools protocol from Go
// alone, without Node or a WebDriver server, so it runs under go test.

var screenshots = flag.String("screenshots", "", "directory to keep the browser tests' screenshots in (default: the test's temporary directory)")

// chromium is the browser binary found, or "" when there is none.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless browser of its own (its own cookies) at
// width×height, closed when the test ends.
func newBrowser(t *testing.T, exe string, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in CI
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.WindowSize(width, height),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	return ctx
}

// run runs steps in the browser within a deadline.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		// Say where the page was and what it said, to see why.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		where, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + ": " + document.body.innerText.slice(0, 2000)`))
		t.Fatalf("%s: %v\nthe page: %s", what, err, where)
	}
}

// value runs an action that returns a value, within a deadline.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitTrue polls a JavaScript expression until it is true, within a
// deadline.
func waitTrue(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	poll.Until(t, what, func() bool { return value(t, ctx, what, chromedp.Evaluate[bool](expr)) })
}

// shot saves a screenshot of the page as name.png.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// TestDashboardInChromium: log in with a link; a deploy shows on the open
// page; a unit going to error shows first, live; a viewer sees no
// buttons and is refused when posting directly; an operator's Resolved
// works and is audited; a removed user's page ends and its next request
// is refused. One controller for all of it.
func TestDashboardInChromium(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no chromium, chromium-browser, google-chrome or google-chrome-stable binary on PATH: the browser tests need one (CI installs Debian's chromium)")
	}
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := start(t)
	admin := f.Operator()
	olga := f.op("olga", pb.UserRole_USER_ROLE_OPERATOR)
	vic := f.op("vic", pb.UserRole_USER_ROLE_VIEWER)
	f.deployKV(admin, 3)

	op := newBrowser(t, exe, 1280, 900)
	t.Run("login", func(t *testing.T) {
		run(t, op, "log in", chromedp.Navigate(f.link(olga)), click(`#confirm`),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-unit="kv/2"]`)),
			chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
		who := value(t, op, "read the header", textOf(`.who`))
		if who != "olga (operator)" {
			t.Errorf("header names %q, want olga (operator)", who)
		}
	})

	t.Run("deploy shows", func(t *testing.T) {
		f.Upload(admin, "../../controller/testdata/app")
		start := time.Now()
		if _, err := admin.Deploy(f.Ctx, &pb.DeployRequest{Charm: "app", NumUnits: 2}); err != nil {
			t.Fatal(err)
		}
		run(t, op, "wait for app/1", chromedp.WaitVisible(chromedp.CSS(`tr[data-unit="app/1"]`)))
		t.Logf("the deploy showed on the open page %s after the Deploy call returned", time.Since(start))
	})

	t.Run("error shows first, live", func(t *testing.T) {
		start := time.Now()
		f.failHook("app/1")
		run(t, op, "wait for app/1 in error", chromedp.WaitVisible(chromedp.CSS(`tr.error[data-unit="app/1"] button.resolve`)))
		t.Logf("the hook's failure showed on the open page %s after it was reported", time.Since(start))
		first := value(t, op, "read the first unit", chromedp.AttributeValue(chromedp.CSS(`#units tbody tr`), "data-unit")).Value
		if first != "app/1" {
			t.Errorf("first unit listed = %s, want app/1, in error", first)
		}
		shot(t, op, dir, "model")
		run(t, op, "filter", chromedp.SendKeys(chromedp.CSS(`#filter`), "kv/"))
		shown := value(t, op, "count the rows shown", chromedp.Evaluate[int](`document.querySelectorAll('#units tbody tr:not([hidden])').length`))
		if shown != 3 {
			t.Errorf("rows shown for the filter kv/ = %d, want 3", shown)
		}
		value(t, op, "clear the filter", chromedp.Evaluate[int](`(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); return 0 })()`))
	})

	t.Run("a push patches the row alone", func(t *testing.T) {
		// Mark every row, filter, then put kv/1 in error: its row is
		// replaced (unmarked) and moves up among those in error, the
		// others stay the same elements, and the filter still holds.
		value(t, op, "mark the rows", chromedp.Evaluate[int](`(() => { document.querySelectorAll('#model tr[data-key]').forEach(tr => { tr.dataset.mark = "1" }); return 0 })()`))
		run(t, op, "filter", chromedp.SendKeys(chromedp.CSS(`#filter`), "kv/"))
		f.failHook("kv/1")
		waitTrue(t, op, "kv/1 in error", `!!document.querySelector('tr.error[data-unit="kv/1"]')`)
		got := value(t, op, "read the rows", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#units tbody tr[data-unit]')).map(tr => tr.dataset.unit + (tr.dataset.mark ? "" : " new") + (tr.hidden ? " hidden" : ""))`))
		want := []string{"app/1 hidden", "kv/1 new", "app/0 hidden", "kv/0", "kv/2"}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("unit rows after kv/1's failure = %q, want %q", got, want)
		}
		if v := value(t, op, "read the filter", chromedp.Evaluate[string](`document.getElementById("filter").value`)); v != "kv/" {
			t.Errorf("filter after the push = %q, want kv/", v)
		}
		if unmarked := value(t, op, "count the other rows replaced", chromedp.Evaluate[int](`document.querySelectorAll('#model tr[data-key]:not([data-mark])').length`)); unmarked != 2 {
			t.Errorf("rows replaced by the push = %d, want 2 (kv/1's and its service's)", unmarked)
		}
		value(t, op, "clear the filter", chromedp.Evaluate[int](`(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); return 0 })()`))
		if err := f.State.SetStatus(f.Ctx, state.StatusUnitAgent, "kv/1", &pb.Status{Status: "idle"}); err != nil {
			t.Fatal(err)
		}
		waitTrue(t, op, "kv/1 out of error", `!document.querySelector('tr.error[data-unit="kv/1"]')`)
	})

	t.Run("viewer", func(t *testing.T) {
		f.failHook("kv/0")
		b := newBrowser(t, exe, 1280, 900)
		run(t, b, "log in", chromedp.Navigate(f.link(vic)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`tr.error[data-unit="kv/0"]`)))
		buttons := value(t, b, "look for buttons", chromedp.Evaluate[int](`document.querySelectorAll('button.resolve').length`))
		status := value(t, b, "post directly", chromedp.Evaluate[int](
			`fetch("/units/kv/0/resolved", {method: "POST", headers: {"X-CSRF-Token": document.body.dataset.csrf}}).then(r => r.status)`, chromedp.EvalAwaitPromise))
		if buttons != 0 || status != 403 {
			t.Errorf("a viewer's page: %d Resolved buttons, a direct post answered %v; want none and 403", buttons, status)
		}
		if e := lastAudit(t, f, "Resolved"); e.GetUser() != "vic" || e.GetCode() != 7 {
			t.Errorf("last Resolved audit entry = %v, want vic's refusal", e)
		}
		shot(t, b, dir, "model-viewer")
	})

	t.Run("operator resolves", func(t *testing.T) {
		run(t, op, "press Resolved on app/1",
			click(`tr[data-unit="app/1"] button.resolve`),
			chromedp.WaitVisible(chromedp.CSS(`#notice`)))
		notice := value(t, op, "read the notice", textOf(`#notice`))
		if !strings.Contains(notice, "app/1 marked resolved") {
			t.Errorf("notice after Resolved = %q, want it marked resolved", notice)
		}
		if e := lastAudit(t, f, "Resolved"); e.GetUser() != "olga" || e.GetCode() != 0 || !e.GetChanged() || e.GetSummary() != "resolved app/1" {
			t.Errorf("last Resolved audit entry = %v, want olga's change", e)
		}
	})

	t.Run("unit page", func(t *testing.T) {
		f.failHook("kv/2")
		// The page re-renders with kv/2 in error before the link is
		// clicked: a click on the row the stream is replacing misses.
		run(t, op, "kv/2 in error", chromedp.WaitVisible(chromedp.CSS(`tr.error[data-unit="kv/2"]`)))
		run(t, op, "open kv/2", click(`a[href="/units/kv/2"]`),
			chromedp.WaitVisible(chromedp.CSS(`#history-h`)), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)),
			click(`details summary`), chromedp.WaitVisible(chromedp.CSS(`details pre`)))
		out := value(t, op, "read the hook's output", textOf(`details pre`))
		if !strings.Contains(out, "cannot bind port 70000") {
			t.Errorf("hook output shown = %q, want the failed hook's", out)
		}
		shot(t, op, dir, "unit")
		// Live: the workload's next status shows without a reload.
		if err := f.State.SetStatus(f.Ctx, state.StatusUnit, "kv/2", &pb.Status{Status: "blocked", Message: "waiting for a port"}); err != nil {
			t.Fatal(err)
		}
		waitTrue(t, op, "the new status shown", `document.getElementById("model").textContent.includes("waiting for a port")`)
		run(t, op, "back to the model", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
	})

	browserPages(t, f, exe, dir, op, admin, olga, vic)

	t.Run("phone", func(t *testing.T) {
		b := newBrowser(t, exe, 390, 844)
		run(t, b, "log in", chromedp.Navigate(f.link(olga)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`tr[data-unit="app/1"]`)))
		shot(t, b, dir, "model-phone")
	})

	t.Run("removed user", func(t *testing.T) {
		rita := f.op("rita", pb.UserRole_USER_ROLE_OPERATOR)
		b := newBrowser(t, exe, 1280, 900)
		run(t, b, "log in", chromedp.Navigate(f.link(rita)), click(`#confirm`), chromedp.WaitVisible(chromedp.CSS(`body[data-revision]`)))
		if _, err := admin.RemoveUser(f.Ctx, &pb.RemoveUserRequest{Name: "rita"}); err != nil {
			t.Fatal(err)
		}
		run(t, b, "wait for the stream's end", chromedp.WaitVisible(chromedp.CSS(`body[data-ended="1"]`)))
		notice := value(t, b, "read the notice", textOf(`#notice`))
		if !strings.Contains(notice, "session ended") {
			t.Errorf("notice = %q, want the session's end", notice)
		}
		shot(t, b, dir, "session-ended")
		run(t, b, "reload", chromedp.Navigate(f.url+"/"))
		body := value(t, b, "read the page", chromedp.Text(chromedp.CSS(`body`)))
		if !strings.Contains(body, "ctl dashboard") {
			t.Errorf("the page after the user's removal says %q, want how to log in", body)
		}
	})
}

// click clicks the element sel matches, once visible, in one script run:
// a live page may replace the element between chromedp's finding a node
// and clicking it ("Could not find node with given id"); a script's
// querySelector and click run together, with nothing in between.
func click(sel string) chromedp.Action[chromedp.Void] {
	eval := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("nothing matches " + %q); e.click(); return true; })()`, sel, sel))
	return chromedp.Steps(chromedp.WaitVisible(chromedp.CSS(sel)), func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := eval(ctx, t)
		return chromedp.Void{}, err
	})
}

// textOf reads the text of the element sel matches, once visible, in one
// script run, as click does: a live page may replace the element between
// chromedp's finding a node and reading it.
func textOf(sel string) chromedp.Action[string] {
	eval := chromedp.Evaluate[string](fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("nothing matches " + %q); return e.innerText; })()`, sel, sel))
	wait := chromedp.WaitVisible(chromedp.CSS(sel))
	return func(ctx context.Context, t *chromedp.Target) (string, error) {
		if _, err := wait(ctx, t); err != nil {
			return "", err
		}
		return eval(ctx, t)
	}
}
