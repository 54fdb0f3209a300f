package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/state"
	"github.com/lifelinehq/lifeline/watchhub"
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
	// The page the stream is for: the model (filtered), or one unit.
	filter, unit := r.URL.Query().Get("q"), r.URL.Query().Get("unit")
	prefixes, page := modelPrefixes, "model-body"
	if unit != "" {
		prefixes, page = unitPrefixes, "unit-body"
	}

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	after := s.cfg.Hub.Revision()
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
		var data any
		var rev int64
		if unit != "" {
			v, err := s.unitView(ctx, se, unit)
			if err != nil {
				return err
			}
			data, rev = v, s.cfg.Hub.Revision()
		} else {
			v, err := s.view(ctx, se, filter)
			if err != nil {
				return err
			}
			data, rev = v, v.Revision
		}
		var b bytes.Buffer
		if err := s.pages.ExecuteTemplate(&b, page, data); err != nil {
			return err
		}
		fmt.Fprintf(w, "event: model\nid: %d\n", rev)
		for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
			fmt.Fprintf(w, "data: %s\n", line)
		}
		fmt.Fprint(w, "\n")
		fl.Flush()
		s.logger.Trace("page pushed", "user", se.user, "page", page, "revision", rev, "took", time.Since(start))
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
				}
			}
		}
		if changed && timer == nil {
			timer = time.After(max(0, s.cfg.Coalesce-time.Since(last)))
		}
	}
}

// endStream tells the page why its stream ends, and ends it.
func (s *Server) endStream(w http.ResponseWriter, fl http.Flusher, why error) {
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", strings.ReplaceAll(why.Error(), "\n", " "))
	fl.Flush()
}
