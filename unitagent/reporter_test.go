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
	t.Cleanup(cancel)
	go r.run(ctx)
	return r, ctx
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
	r := newReporter(api, "kv/0", hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx)

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
	defer cancel()
	go r.run(ctx)

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
	defer cancel()
	go r.run(ctx)

	r.set(&pb.Status{Status: "error", Message: "hook failed"})
	<-api.calls // on its way
	r.set(&pb.Status{Status: "idle"})
	close(api.release)
	go func() {
		for range api.calls {
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
	time.Sleep(3 * statusLinger)
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
func TestReporterPacesHookProgressByTheController(t *testing.T) {
	api := &statusRecorder{delay: 100 * time.Millisecond}
	r, ctx := runReporter(t, api, time.Millisecond)

	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.flush(ctx)
	acked := time.Now()
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	time.Sleep(5 * statusLinger / 2)
	if got, want := api.got(), []string{"executing:running install hook"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q: the next report held back %v", got, want, progressPace*api.delay)
	}
	r.flush(ctx)
	if got := api.got(); len(got) != 2 || got[1] != "executing:running start hook" {
		t.Fatalf("sent %q, want the start hook's report at last", got)
	}
	if d := time.Since(acked); d < progressPace*api.delay {
		t.Errorf("the next report went after %v, want %v at least", d, progressPace*api.delay)
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
	time.Sleep(3 * statusLinger)
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.progressEnded()
	time.Sleep(3 * statusLinger)
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
	start := time.Now()
	r.flush(ctx)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("flush waited %v for a declined report", d)
	}
	time.Sleep(3 * statusLinger)
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
	began := time.Now()
	r.progress(&pb.Status{Status: "executing", Message: "running install hook"})
	r.progressEnded()
	r.progress(&pb.Status{Status: "executing", Message: "running start hook"})
	r.flush(ctx)
	if got, want := api.got(), []string{"idle:", "executing:running start hook"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q: the run shown with the hook it runs", got, want)
	}
	if d := time.Since(began); d > 10*statusLinger {
		t.Errorf("the run was shown after %v, want about %v", d, statusLinger)
	}

	// A quick run, over before the report settles, goes unreported.
	r.set(&pb.Status{Status: "idle", Message: "again"})
	r.flush(ctx)
	r.progress(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.progressEnded()
	r.set(&pb.Status{Status: "idle", Message: "again"})
	r.flush(ctx)
	time.Sleep(2 * statusLinger)
	if got, want := api.got(), []string{"idle:", "executing:running start hook", "idle:again"}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
}
