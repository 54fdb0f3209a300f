package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// modelPrefixes are the keys the model page shows: a change under any of
// them re-renders open pages.
var modelPrefixes = []string{"machines/", "services/", "units/", "relations/", "scopes/", "status/", "cleanups/", "unit-revisions/", "rollouts/"}

// events streams the model page's tables to an open page, as server-sent
// events: the page as it is, then again whenever the model changes, at
// most every Coalesce. The stream follows the model's prefixes through
// the watch hub (polled streams, one goroutine a page) and the session's
// key: it ends when the session does (logout, expiry, the user removed).
func (s *Server) events(w http.ResponseWriter, r *http.Request, se session) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if !s.openStream(se.user) {
		http.Error(w, fmt.Sprintf("too many live pages open (at most %d a user, %d in all): close some", s.cfg.Limits.StreamsPerUser, s.cfg.Limits.Streams), http.StatusTooManyRequests)
		return
	}
	defer s.closeStream(se.user)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The page the stream is for.
	lp, err := s.livePageOf(r.URL.Query(), se)
	if err != nil {
		httpError(w, err)
		return
	}
	prefixes := lp.prefixes

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	after := s.cfg.Hub.Revision()
	if lp.model != nil {
		lp.model.need = after
	}
	var subs []*watchhub.Stream
	defer func() {
		for _, st := range subs {
			st.Close()
		}
	}()
	for _, p := range prefixes {
		st, err := s.cfg.Hub.Polled(ctx, p, true, max(after, 1), poke)
		if err != nil {
			http.Error(w, "cannot follow the model now: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		subs = append(subs, st)
	}
	sessKey := state.DashboardSessionKey(se.user, se.hash)
	sess, err := s.cfg.Hub.Polled(ctx, sessKey, false, max(after, 1), poke)
	if err != nil {
		http.Error(w, "cannot follow the session now: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	subs = append(subs, sess)
	// The session may have ended between the request's check and the
	// watch's start.
	if _, err := s.sessionOf(r); err != nil {
		s.loginNeeded(w, r, err)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	send := func() error {
		start := time.Now()
		name, data, rev, err := lp.push(ctx, s.pages)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "event: %s\nid: %d\n", name, rev)
		for _, line := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
			fmt.Fprintf(w, "data: %s\n", line)
		}
		fmt.Fprint(w, "\n")
		fl.Flush()
		s.logger.Trace("page pushed", "user", se.user, "page", lp.template, "event", name, "bytes", len(data), "revision", rev, "took", time.Since(start))
		return nil
	}
	if err := send(); err != nil {
		s.endStream(w, fl, err)
		return
	}
	keepalive := time.NewTicker(30 * time.Second)
	defer keepalive.Stop()
	var last time.Time
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			fl.Flush()
			continue
		case <-timer:
			timer = nil
			last = time.Now()
			if err := send(); err != nil {
				s.endStream(w, fl, err)
				return
			}
			continue
		case <-wake:
		}
		changed := false
		for i, st := range subs {
			for {
				b, ok, err := st.TryNext(ctx)
				if err != nil {
					s.endStream(w, fl, fmt.Errorf("the model's watch ended: %w", err))
					return
				}
				if !ok {
					break
				}
				if i == len(subs)-1 {
					for _, ev := range b.Events {
						if ev.Type == state.EventDelete {
							s.endStream(w, fl, errors.New("your session ended"))
							return
						}
					}
					continue
				}
				if len(b.Events) > 0 || b.Reset {
					changed = true
					if lp.model != nil {
						lp.model.note(b)
					}
				}
			}
		}
		// The render reads at or past the revision the hub handed the
		// change at (the controller's State has Config.AtLeast), so it
		// goes at once after a quiet spell; a burst renders again at
		// most every Coalesce.
		if changed && timer == nil {
			timer = time.After(max(0, s.cfg.Coalesce-time.Since(last)))
		}
	}
}

// livePage is what a page's stream follows and sends: the prefixes
// whose changes re-render it, the template of its live part, and its
// view, read as the session's user, with the revision it is of; or, for
// the model page, model, which sends only what changed.
type livePage struct {
	prefixes []string
	template string
	view     func(ctx context.Context) (any, int64, error)
	model    *modelStream
}

// push returns the page's next event: its name, data and revision.
func (lp livePage) push(ctx context.Context, pages *template.Template) (string, []byte, int64, error) {
	if lp.model != nil {
		return lp.model.push(ctx)
	}
	data, rev, err := lp.view(ctx)
	if err != nil {
		return "", nil, 0, err
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, lp.template, data); err != nil {
		return "", nil, 0, err
	}
	return "model", b.Bytes(), rev, nil
}

// livePageOf is the page a stream's query names: page=service&name=kv,
// page=operations, page=operation&id=3, page=audit (with the page's
// filters), page=controllers, unit=kv/0; the model (q, its filter)
// otherwise.
func (s *Server) livePageOf(q url.Values, se session) (livePage, error) {
	hubRev := func(v any, err error) (any, int64, error) { return v, s.cfg.Hub.Revision(), err }
	switch page := q.Get("page"); {
	case q.Get("unit") != "":
		unit := q.Get("unit")
		return livePage{unitPrefixes, "unit-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.unitView(ctx, se, unit)) }, nil}, nil
	case page == "service":
		name := q.Get("name")
		return livePage{servicePrefixes, "service-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.serviceView(ctx, se, name)) }, nil}, nil
	case page == "operations":
		st := q.Get("state")
		before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
		return livePage{operationPrefixes, "operations-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.opsView(ctx, se, st, before)) }, nil}, nil
	case page == "operation":
		id, err := strconv.ParseInt(q.Get("id"), 10, 64)
		if err != nil || id <= 0 {
			return livePage{}, invalidf("operation %q: want a number", q.Get("id"))
		}
		return livePage{operationPrefixes, "operation-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.opView(ctx, se, id)) }, nil}, nil
	case page == "audit":
		return livePage{auditPrefixes, "audit-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.auditView(ctx, se, q)) }, nil}, nil
	case page == "controllers":
		return livePage{controllerPrefixes, "controllers-body", func(ctx context.Context) (any, int64, error) { return hubRev(s.controllersView(ctx, se)) }, nil}, nil
	case page == "" || page == "model":
		return livePage{prefixes: modelPrefixes, template: "model-body", model: s.newModelStream(se, q.Get("q"))}, nil
	default:
		return livePage{}, notFoundf("no live page %q", page)
	}
}

// endStream tells the page why its stream ends, and ends it.
func (s *Server) endStream(w http.ResponseWriter, fl http.Flusher, why error) {
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", strings.ReplaceAll(why.Error(), "\n", " "))
	fl.Flush()
}
