package unitagent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// statusRecorder is the one method of the API the reporter calls.
type statusRecorder struct {
	API
	mu   sync.Mutex
	sent []string
	seqs []int64
	// calls, when set, receives each call's status before it is recorded,
	// and release lets it go on.
	calls   chan string
	release chan struct{}
	// delay, when set, is how long each call takes.
	delay time.Duration
	// busy declines progress reports, as a busy controller does; made
	// counts every call.
	busy bool
	made int
}

func (s *statusRecorder) SetUnitStatus(_ context.Context, req *pb.SetUnitStatusRequest, _ ...grpc.CallOption) (*pb.SetUnitStatusResponse, error) {
	time.Sleep(s.delay)
	if s.calls != nil {
		s.calls <- req.Status.Status
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.made++
	if s.busy && req.Progress {
		return nil, status.Error(codes.ResourceExhausted, "the controller is busy: progress report declined")
	}
	s.sent = append(s.sent, req.Status.Status+":"+req.Status.Message)
	s.seqs = append(s.seqs, req.Status.Seq)
	return &pb.SetUnitStatusResponse{}, nil
}

// runReporter runs a reporter to api, its progress reports spaced by
// every, until the test ends.
func runReporter(t *testing.T, api API, every time.Duration) (*reporter, context.Context) {
	t.Helper()
	r := newReporter(api, "kv/0", hclog.NewNullLogger())
	r.progressEvery = every
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() { defer close(done); r.run(ctx) }()
	return r, ctx
}

// waitHeld waits until the reporter holds back a progress report for its
// pace, and returns its message.
func waitHeld(t *testing.T, r *reporter) string {
	t.Helper()
	var held string
	poll.Until(t, "a progress report held back", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.held == nil {
			return false
		}
		held = r.held.Message
		return true
	})
	return held
}

// pending says whether the reporter has a status the controller has not
// acknowledged (nor declined).
func pending(r *reporter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keep) > 0 || !r.settled(r.want)
}

func (s *statusRecorder) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// Quick steps are reported where they end up; a status with a hook's
// output or an error is sent even when another follows at once.
func TestReporterCoalescesButKeepsHistory(t *testing.T) {
	api := &statusRecorder{}
	r, ctx := runReporter(t, api, progressEvery)

	r.set(&pb.Status{Status: "executing", Message: "running install hook"})
	r.set(&pb.Status{Status: "executing", Message: "running start hook"})
	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	if got := api.got(); len(got) != 1 || got[0] != "idle:" {
		t.Fatalf("three quick statuses sent as %q, want only the last", got)
	}

	r.set(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.set(&pb.Status{Status: "executing", Message: "ran config-changed hook", Data: map[string]string{"output": "hello"}})
	r.set(&pb.Status{Status: "error", Message: `hook failed: "start"`})
	r.set(&pb.Status{Status: "idle", Message: "again"})
	r.flush(ctx)
	want := []string{"idle:", "executing:ran config-changed hook", `error:hook failed: "start"`, "idle:again"}
	got := api.got()
	if len(got) != len(want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
}

// Every report carries a seq higher than the one before, so that the
// controller can tell a report delayed past a newer one; setting the
// same status again sends nothing.
func TestReporterOrdersReports(t *testing.T) {
	api := &statusRecorder{}
	r := newReporter(api, "kv/0", hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()

	for _, st := range []string{"executing", "error", "idle", "idle", "error", "idle"} {
		r.set(&pb.Status{Status: st})
		r.flush(ctx)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if want := []string{"executing:", "error:", "idle:", "error:", "idle:"}; len(api.sent) != len(want) {
		t.Fatalf("sent %q, want %q", api.sent, want)
	}
	for i, seq := range api.seqs {
		if seq == 0 || i > 0 && seq <= api.seqs[i-1] {
			t.Fatalf("reports sent with seqs %v, want every one above the one before", api.seqs)
		}
	}
}

// A status worth keeping that is being sent when the next one is set is
// sent once, not again from the queue of kept statuses.
func TestReporterSendsAKeptStatusOnce(t *testing.T) {
	api := &statusRecorder{calls: make(chan string), release: make(chan struct{})}
	r := newReporter(api, "kv/0", hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	// The calls after the first go on at once: a goroutine takes them
	// until the reporter has stopped.
	stopDrain, drained := make(chan struct{}), make(chan struct{})
	defer func() { cancel(); <-done; close(stopDrain); <-drained }()

	r.set(&pb.Status{Status: "error", Message: "hook failed"})
	<-api.calls // on its way
	r.set(&pb.Status{Status: "idle"})
	close(api.release)
	go func() {
		defer close(drained)
		for {
			select {
			case <-api.calls:
			case <-stopDrain:
				return
			}
		}
	}()
	r.flush(ctx)
	if got, want := api.got(), []string{"error:hook failed", "idle:"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}

// Reports that only say which hook runs are spaced: one follows the last
// such report only after progressEvery, the latest in place of those set
// meanwhile; any other report is not held back by them.
func TestReporterSpacesHookProgress(t *testing.T) {
	api := &statusRecorder{}
	r, ctx := runReporter(t, api, time.Hour)

	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	if got, want := waitHeld(t, r), "running start hook"; got != want {
		t.Fatalf("held back %q, want %q: the latest in place of the others", got, want)
	}
	if got, want := api.got(), []string{"executing:running install hook"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q: later progress held back", got, want)
	}
	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	// After a report of another kind, progress goes as any report does.
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.flush(ctx)
	want := []string{"executing:running install hook", "idle:", "executing:running config-changed hook"}
	if got := api.got(); !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}

// Progress reports are spaced by the controller's pace too: one that took
// a while to be acknowledged holds the next back progressPace times as
// long, when that is longer than progressEvery.
func TestProgressHold(t *testing.T) {
	for _, c := range []struct {
		every, took, since, want time.Duration
	}{
		{every: time.Millisecond, took: 100 * time.Millisecond, since: 0, want: progressPace * 100 * time.Millisecond},
		{every: time.Millisecond, took: 100 * time.Millisecond, since: 400 * time.Millisecond, want: progressPace*100*time.Millisecond - 400*time.Millisecond},
		{every: 2 * time.Second, took: 10 * time.Millisecond, since: time.Second, want: time.Second},
		{every: 2 * time.Second, took: time.Second, since: 11 * time.Second, want: -time.Second},
	} {
		if got := progressHold(c.every, c.took, c.since); got != c.want {
			t.Errorf("progressHold(%v, %v, %v) = %v, want %v", c.every, c.took, c.since, got, c.want)
		}
	}
}

// A progress report after one the controller was slow to acknowledge is
// held back by the controller's pace, though progressEvery has passed,
// and goes once that is over.
func TestReporterPacesHookProgressByTheController(t *testing.T) {
	api := &statusRecorder{delay: 100 * time.Millisecond}
	r, ctx := runReporter(t, api, time.Millisecond)

	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.flush(ctx)
	r.mu.Lock()
	took := r.sentTook
	r.mu.Unlock()
	if took < api.delay {
		t.Fatalf("the reporter measured the controller's answer as %v, want %v at least", took, api.delay)
	}
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	if got, want := waitHeld(t, r), "running start hook"; got != want {
		t.Fatalf("held back %q, want %q", got, want)
	}
	if got, want := api.got(), []string{"executing:running install hook"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q: the next report held back", got, want)
	}
	r.flush(ctx)
	if got := api.got(); len(got) != 2 || got[1] != "executing:running start hook" {
		t.Fatalf("sent %q, want the start hook's report at last", got)
	}
}

// A hook's report not sent by the time the hook ends is dropped when the
// controller already shows the agent executing: it would name a hook no
// longer running. The first of a run of hooks, after idle, is sent.
func TestReporterDropsTheReportOfAHookEnded(t *testing.T) {
	api := &statusRecorder{}
	r, ctx := runReporter(t, api, 0) // no spacing: what is not sent was dropped

	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.progressEnded()
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	r.progressEnded()
	if pending(r) {
		t.Fatal("the start hook's report still to send once the hook ended")
	}
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.progressEnded()
	if pending(r) {
		t.Fatal("the config-changed hook's report still to send once the hook ended")
	}
	r.set(&pb.Status{Status: "idle", Message: "done"})
	r.flush(ctx)
	want := []string{"idle:", "executing:running install hook", "idle:done"}
	if got := api.got(); !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}

// A progress report the controller declines, busy, is not sent again: the
// next report replaces it, and waiting for the reports to settle does not
// wait for it. The first report of a run of hooks is no progress: it says
// the agent is executing, and is recorded busy or not.
func TestReporterLetsADeclinedProgressReportGo(t *testing.T) {
	api := &statusRecorder{busy: true}
	r, ctx := runReporter(t, api, 0)

	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	r.flush(ctx)
	// Declined, it settles the reports: flush waits for nothing more, and
	// it is not sent again.
	if pending(r) {
		t.Error("the declined report is still to send")
	}
	r.set(&pb.Status{Status: "idle", Message: "done"})
	r.flush(ctx)
	if got, want := api.got(), []string{"idle:", "executing:running install hook", "idle:done"}; !slices.Equal(got, want) {
		t.Fatalf("recorded %q, want %q", got, want)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.made != 4 {
		t.Errorf("%d calls, want 4: the declined report sent once", api.made)
	}
}

// A run of hooks shows as executing as soon as the report settles (a
// run that ends sooner is reported where it ends): no grace hides it.
func TestReporterShowsARunOfHooks(t *testing.T) {
	api := &statusRecorder{}
	r, ctx := runReporter(t, api, time.Hour)
	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.progressEnded()
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	r.flush(ctx)
	if got, want := api.got(), []string{"idle:", "executing:running start hook"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q: the run shown with the hook it runs", got, want)
	}

	// A quick run, over before the report settles, goes unreported.
	r.set(&pb.Status{Status: "idle", Message: "again"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.progressEnded()
	r.set(&pb.Status{Status: "idle", Message: "again"})
	if pending(r) {
		t.Fatal("a report still to send, back where the controller's copy is")
	}
	r.flush(ctx)
	if got, want := api.got(), []string{"idle:", "executing:running start hook", "idle:again"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}
