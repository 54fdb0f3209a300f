package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The dashboard probe (-dashboard-probe N), once every unit runs: the
// harness logs in to the controller's dashboard as a browser does (a
// login link from DashboardLogin, its page, the confirming POST with the
// dashboard's Origin, the session cookie kept), opens the model page's
// live stream (GET /events, server-sent events), and then makes N changes
// one after another, each a unit's workload status with a message of its
// own, written as its agent's report would be. Each is timed from the
// write's return (its commit) to the end of the first event of the
// stream that carries it: an event whose id, the revision the page was
// rendered at, is past the revision before the write, and which shows
// the message (the whole page, "model", or the rows that changed,
// "rows").

// dashResults are the dashboard probe's figures.
type dashResults struct {
	// Samples is how many changes were timed.
	Samples int `json:"samples"`
	// ChangeToPageP50 and ChangeToPageMax are the median and the longest
	// time from a change's commit to the end of the event carrying it.
	ChangeToPageP50 float64 `json:"change_to_page_p50_s"`
	ChangeToPageMax float64 `json:"change_to_page_max_s"`
	// FirstEventSeconds is the time from opening the stream to the end
	// of its first event (the page as it is), and PageBytes that event's
	// size: the whole model's page.
	FirstEventSeconds float64 `json:"first_event_seconds"`
	PageBytes         int64   `json:"page_bytes"`
}

func (d *dashResults) print(row func(k, format string, v ...any)) {
	row("dashboard: a change to an open page", "p50 %.3f s, max %.3f s (%d changes, each a unit's status, from its commit to the event carrying it)",
		d.ChangeToPageP50, d.ChangeToPageMax, d.Samples)
	row("dashboard: the model page", "%.0f KiB, its stream's first event %.2f s after opening it", float64(d.PageBytes)/1024, d.FirstEventSeconds)
}

// dashGap is the quiet between two changes: more than the dashboard's
// least time between two renders of a page (200 ms), so that each change
// finds the page idle, as a person's change would.
const dashGap = 500 * time.Millisecond

// probeDashboard logs in to ctl's dashboard, opens the model page's
// stream and times samples changes, each to a unit of service (units of
// it, named service/0 up), through it.
func probeDashboard(ctx context.Context, ctl *controllerProc, st *state.State, service string, units, samples int) (*dashResults, error) {
	c, base, err := dashboardLogin(ctx, ctl)
	if err != nil {
		return nil, fmt.Errorf("dashboard login: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := time.Now()
	stream, err := openStream(sctx, c, base+"/events")
	if err != nil {
		return nil, err
	}
	defer stream.close()
	first, err := stream.next()
	if err != nil {
		return nil, fmt.Errorf("the model page's first event: %w", err)
	}
	res := &dashResults{FirstEventSeconds: time.Since(opened).Seconds(), PageBytes: int64(len(first.data))}
	say("the dashboard's model page: %.0f KiB, its first event after %.2f s", float64(res.PageBytes)/1024, res.FirstEventSeconds)

	var took []float64
	for i := range samples {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(dashGap):
		}
		unit := fmt.Sprintf("%s/%d", service, (i*7919)%units)
		// The full stop ends the number: probe 1 is not probe 10.
		msg := fmt.Sprintf("dashboard probe %d.", i)
		before, err := st.Revision(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.SetStatus(ctx, state.StatusUnit, unit, &pb.Status{Status: "active", Message: msg}); err != nil {
			return nil, fmt.Errorf("set %s's status: %w", unit, err)
		}
		committed := time.Now()
		for {
			ev, err := stream.next()
			if err != nil {
				return nil, fmt.Errorf("waiting for %s's status on the page: %w", unit, err)
			}
			if ev.name == "end" {
				return nil, fmt.Errorf("the model page's stream ended: %s", ev.data)
			}
			if (ev.name == "model" || ev.name == "rows") && ev.id > before && bytes.Contains(ev.data, []byte(msg)) {
				took = append(took, ev.at.Sub(committed).Seconds())
				break
			}
		}
	}
	res.Samples = len(took)
	res.ChangeToPageP50 = percentile(took, 0.5)
	res.ChangeToPageMax = percentile(took, 1)
	say("  a unit's status reached the open page in %.3f s (p50), %.3f s at most, of %d changes", res.ChangeToPageP50, res.ChangeToPageMax, res.Samples)
	return res, nil
}

// dashboardLogin logs in to ctl's dashboard as a browser does, and
// returns a client holding the session's cookie and the dashboard's URL.
func dashboardLogin(ctx context.Context, ctl *controllerProc) (*http.Client, string, error) {
	link, err := ctl.op.DashboardLogin(ctx, &pb.DashboardLoginRequest{})
	if err != nil {
		return nil, "", err
	}
	if link.LoginUrl == "" {
		return nil, "", errors.New("the controller serves no dashboard")
	}
	u, err := url.Parse(link.LoginUrl)
	if err != nil {
		return nil, "", err
	}
	base := u.Scheme + "://" + u.Host
	// The dashboard's certificate is the controller's: the model's CA
	// signs it, for the controllers' name.
	tc, err := pki.ClientTLSConfig([]byte(ctl.cfg.CACert), apiclient.ServerName)
	if err != nil {
		return nil, "", err
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, "", err
	}
	c := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	// The link's page asks to confirm; its form posts the link back.
	if _, err := httpDo(ctx, c, "GET", link.LoginUrl, "", nil); err != nil {
		return nil, "", err
	}
	form := u.Query().Encode()
	if _, err := httpDo(ctx, c, "POST", base+"/login", base, strings.NewReader(form)); err != nil {
		return nil, "", err
	}
	return c, base, nil
}

// httpDo makes a request (a form's POST when body is given, from origin)
// and returns its page, or an error for a status other than 200.
func httpDo(ctx context.Context, c *http.Client, method, target, origin string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, firstLine(page))
	}
	return page, nil
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

// sseStream reads a page's server-sent events.
type sseStream struct {
	body io.ReadCloser
	r    *bufio.Reader
}

// sseEvent is one event: its name, id (the revision its page is of) and
// data (its lines joined), and when its last line arrived.
type sseEvent struct {
	name string
	id   int64
	data []byte
	at   time.Time
}

func openStream(ctx context.Context, c *http.Client, target string) (*sseStream, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", target, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		page, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", req.URL.Path, resp.Status, firstLine(page))
	}
	return newSSEStream(resp.Body), nil
}

func newSSEStream(body io.ReadCloser) *sseStream {
	return &sseStream{body: body, r: bufio.NewReaderSize(body, 64<<10)}
}

func (s *sseStream) close() { s.body.Close() }

// next reads the stream's next event; comments (keepalives) are skipped.
// A line may be of any length: a page of 10,000 units is megabytes.
func (s *sseStream) next() (sseEvent, error) {
	var ev sseEvent
	var data bytes.Buffer
	for {
		line, err := s.r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		switch {
		case len(line) == 0:
			if ev.name == "" && data.Len() == 0 {
				continue // the end of a comment
			}
			ev.data, ev.at = data.Bytes(), time.Now()
			return ev, nil
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event: ")):
			ev.name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("id: ")):
			ev.id, _ = strconv.ParseInt(string(line[len("id: "):]), 10, 64)
		case bytes.HasPrefix(line, []byte("data: ")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(line[len("data: "):])
		}
	}
}
