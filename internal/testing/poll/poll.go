package poll

import (
	"strings"
	"testing"
	"time"
)

// Bound is how long Until and UntilSays wait before they fail the test.
const Bound = time.Minute

// A condition is asked at once, then after 10 ms, doubling to every
// 250 ms: what comes at once is seen at once, and a slow condition (one
// that runs ctl, say) is not asked in a busy loop.
const (
	firstPause = 10 * time.Millisecond
	maxPause   = 250 * time.Millisecond
)

// teardownTime is how long before the test binary's deadline (go test
// -timeout) a wait gives up, so that the test fails with its cleanups
// run and its processes stopped, rather than the binary panicking with
// them left running.
const teardownTime = 2 * time.Minute

// Until asks cond until it holds, failing the test after Bound with what
// it waited for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	UntilSays(t, what, func() (bool, string) { return cond(), "" })
}

// UntilSays is Until with a condition that says where things stand: the
// failure quotes what it last said.
func UntilSays(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	Within(t, what, Bound, cond)
}

// Within is UntilSays with a bound of its own: a deadline the code
// promises, or a wait known to be long (a cluster's processes starting).
// Near the test binary's deadline it gives up early (teardownTime).
func Within(t testing.TB, what string, bound time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok && end.Add(-teardownTime).Before(deadline) {
			deadline = end.Add(-teardownTime)
			bound = time.Until(deadline).Round(time.Second)
		}
	}
	for pause := firstPause; ; pause = min(2*pause, maxPause) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			switch {
			case strings.Contains(last, "\n"):
				t.Fatalf("timed out after %s waiting for %s; last:\n%s", bound, what, last)
			case last != "":
				t.Fatalf("timed out after %s waiting for %s: %s", bound, what, last)
			}
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(pause)
	}
}
