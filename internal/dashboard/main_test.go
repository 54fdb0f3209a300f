package dashboard_test

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/dashboard"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// fixture is a controller with its dashboard served over TLS on loopback.
type fixture struct {
	*controllertest.Env
	t   testing.TB
	hs  *httptest.Server
	url string
}

func start(t testing.TB) *fixture {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + lis.Addr().String()
	e := controllertest.New(t, controllertest.Options{DashboardURL: url})
	d, err := dashboard.New(dashboard.Config{API: e.Server(), State: e.State, Hub: e.Hub(),
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(d.Handler())
	hs.Listener.Close()
	hs.Listener = lis
	hs.EnableHTTP2 = true
	// Browsers drop connections they opened ahead; the server's log of
	// each is noise.
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return &fixture{Env: e, t: t, hs: hs, url: url}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// op is an OperatorService client of user, made with role.
func (f *fixture) op(user string, role pb.UserRole) pb.OperatorServiceClient {
	return pb.NewOperatorServiceClient(f.Dial(f.User(user, role)))
}

// link asks for a login link as ctl dashboard does.
func (f *fixture) link(op pb.OperatorServiceClient) string {
	f.t.Helper()
	resp, err := op.DashboardLogin(f.Ctx, &pb.DashboardLoginRequest{})
	if err != nil {
		f.t.Fatalf("DashboardLogin: %v", err)
	}
	return resp.LoginUrl
}

// logIn opens a login link in c as a browser does: the link's page,
// then its confirming post. It returns the post's status and page.
func (f *fixture) logIn(c *http.Client, link string) (int, string) {
	f.t.Helper()
	code, page := get(f.t, c, link)
	if code != 200 || !strings.Contains(page, `id="confirm"`) {
		return code, page
	}
	u, err := url.Parse(link)
	if err != nil {
		f.t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", f.url+"/login", strings.NewReader(u.Query().Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.url)
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("POST /login: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// browser is an HTTP client with a cookie jar, trusting the test's
// server.
func (f *fixture) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	c := *f.hs.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func get(t testing.TB, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post posts to path as the page would, with the CSRF token csrf.
func (f *fixture) post(c *http.Client, path, csrf string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.url+path, nil)
	req.Header.Set("Origin", f.url)
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// csrfOf is the CSRF token a model page carries.
func csrfOf(page string) string {
	_, after, _ := strings.Cut(page, `data-csrf="`)
	tok, _, _ := strings.Cut(after, `"`)
	return tok
}

// deployKV uploads the test charm kv and deploys n units of it.
func (f *fixture) deployKV(op pb.OperatorServiceClient, n int) {
	f.t.Helper()
	f.Upload(op, "../../controller/testdata/kv")
	if _, err := op.Deploy(f.Ctx, &pb.DeployRequest{Charm: "kv", NumUnits: int32(n)}); err != nil {
		f.t.Fatalf("Deploy: %v", err)
	}
}

// failHook reports unit's hook failed, as its agent would.
func (f *fixture) failHook(unit string) {
	f.t.Helper()
	if err := f.State.SetStatus(f.Ctx, state.StatusUnitAgent, unit, &pb.Status{Status: "error", Message: `hook failed: "install"`, Data: map[string]string{"state": "install-error", "output": "installing kv\nkv: cannot bind port 70000"}}); err != nil {
		f.t.Fatalf("SetStatus: %v", err)
	}
}

// events reads a page's live stream, sending each event on the channel
// it returns until the stream ends.
func events(ctx context.Context, t testing.TB, c *http.Client, url string) <-chan [2]string {
	t.Helper()
	return eventsAt(ctx, t, c, url+"/events")
}

// eventsAt reads the live stream at url (a page's: /events?page=...).
func eventsAt(ctx context.Context, t testing.TB, c *http.Client, url string) <-chan [2]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("GET /events = %s, want 200", resp.Status)
	}
	out := make(chan [2]string, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		var name string
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data.WriteString(strings.TrimPrefix(line, "data: ") + "\n")
			case line == "" && name != "":
				out <- [2]string{name, data.String()}
				name = ""
				data.Reset()
			}
		}
	}()
	return out
}

// next waits for the stream's next event that satisfies ok.
func next(t testing.TB, ch <-chan [2]string, within time.Duration, ok func(name, data string) bool) (string, string) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("the stream ended before the event awaited")
			}
			if ok(ev[0], ev[1]) {
				return ev[0], ev[1]
			}
		case <-deadline:
			t.Fatalf("no event awaited within %s", within)
		}
	}
}
