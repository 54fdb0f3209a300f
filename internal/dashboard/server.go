package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

//go:embed web
var webFS embed.FS

// Limits bound what the dashboard serves.
type Limits struct {
	// Requests is how many requests a session, and an address, may make a
	// second on average, and Burst at once.
	Requests float64
	Burst    int
	// Streams bounds the live pages open at once, and StreamsPerUser one
	// user's.
	Streams        int
	StreamsPerUser int
}

func (l Limits) withDefaults() Limits {
	if l.Requests == 0 {
		l.Requests = 20
	}
	if l.Burst == 0 {
		l.Burst = 60
	}
	if l.Streams == 0 {
		l.Streams = 256
	}
	if l.StreamsPerUser == 0 {
		l.StreamsPerUser = 16
	}
	return l
}

// Config configures a Server.
type Config struct {
	API    API
	State  *state.State
	Hub    *watchhub.Hub
	Logger hclog.Logger
	// SessionTTL is how long a session lasts; 12 h when zero.
	SessionTTL time.Duration
	// Coalesce is the least time between two renders of an open page;
	// 200 ms when zero.
	Coalesce time.Duration
	Limits   Limits
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case c.API == nil:
		return errors.New("dashboard: no API")
	case c.State == nil:
		return errors.New("dashboard: no state")
	case c.Hub == nil:
		return errors.New("dashboard: no watch hub")
	case c.SessionTTL < 0 || c.SessionTTL > state.MaxDashboardSessionTTL:
		return fmt.Errorf("dashboard: session lifetime %s: want up to %s", c.SessionTTL, state.MaxDashboardSessionTTL)
	}
	return nil
}

// Server serves the dashboard.
type Server struct {
	cfg    Config
	logger hclog.Logger
	pages  *template.Template
	// limits rate-limit requests by session and by address; streams
	// counts the live pages open, by user.
	limits limiters
	// reads shares the model page streams' Status reads.
	reads   statusReads
	mu      sync.Mutex
	streams map[string]int
	total   int
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Coalesce == 0 {
		cfg.Coalesce = 200 * time.Millisecond
	}
	cfg.Limits = cfg.Limits.withDefaults()
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, logger: cfg.Logger.Named("dashboard"), pages: pages, streams: map[string]int{},
		limits: limiters{rate: rate.Limit(cfg.Limits.Requests), burst: cfg.Limits.Burst}}, nil
}

func parsePages() (*template.Template, error) {
	pages, err := template.New("").Funcs(funcs).ParseFS(webFS, "web/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard templates: %w", err)
	}
	return pages, nil
}

// Handler is the dashboard's HTTP handler; the caller serves it over TLS.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(mustSub(webFS, "web/static"))))
	mux.HandleFunc("GET /login", s.confirmLogin)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("GET /{$}", s.withSession(s.modelPage))
	mux.HandleFunc("GET /events", s.withSession(s.events))
	mux.HandleFunc("GET /units/{service}/{n}", s.withSession(s.unitPage))
	mux.HandleFunc("POST /units/{service}/{n}/resolved", s.withSession(s.checked(s.resolved)))
	mux.HandleFunc("GET /services/{name}", s.withSession(s.servicePage))
	mux.HandleFunc("POST /services/{name}/run", s.withSession(s.checked(s.runAction)))
	mux.HandleFunc("POST /services/{name}/rollout/{verb}", s.withSession(s.checked(s.steerRollout)))
	mux.HandleFunc("GET /operations", s.withSession(s.opsPage))
	mux.HandleFunc("GET /operations/{id}", s.withSession(s.opPage))
	mux.HandleFunc("POST /operations/{id}/{verb}", s.withSession(s.checked(s.opVerb)))
	mux.HandleFunc("GET /audit", s.withSession(s.auditPage))
	mux.HandleFunc("GET /controllers", s.withSession(s.controllersPage))
	mux.HandleFunc("POST /logout", s.withSession(s.checked(s.logout)))
	return s.secure(mux)
}

// maxRequestBody bounds what a request may send; MaxHeaderBytes (for
// the caller's http.Server) its headers.
const (
	maxRequestBody = 16 << 10
	MaxHeaderBytes = 32 << 10
)

// cookieName is the session cookie's: user.secret.
const cookieName = "lifeline_session"

// session is a request's logged-in user.
type session struct {
	user   string
	secret string
	hash   string
}

// csrf is the token a session's state-changing requests carry: derived
// from the session's secret, which only the HttpOnly cookie holds, so
// that any controller checks it and another site cannot make it.
func (se session) csrf() string {
	sum := sha256.Sum256([]byte("lifeline-dashboard-csrf:" + se.secret))
	return hex.EncodeToString(sum[:16])
}

// secure sets the headers every answer carries, and rate-limits by the
// client's address.
func (s *Server) secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Strict-Transport-Security", "max-age=31536000")
		if !s.limits.allow("addr:" + clientAddr(r)) {
			http.Error(w, "too many requests from your address: try again in a moment", http.StatusTooManyRequests)
			return
		}
		// No request needs more than a small form.
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
		h.ServeHTTP(w, r)
	})
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// withSession serves h for a request with a live session, rate-limited
// by session; a request without one is answered 401 with how to log in.
func (s *Server) withSession(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se, err := s.sessionOf(r)
		if err != nil {
			s.loginNeeded(w, r, err)
			return
		}
		if !s.limits.allow("session:" + se.hash) {
			http.Error(w, "too many requests in this session: try again in a moment", http.StatusTooManyRequests)
			return
		}
		h(w, r, se)
	}
}

// sessionOf reads the request's session from etcd: a removed user's, an
// expired one or one logged out is not there.
func (s *Server) sessionOf(r *http.Request) (session, error) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, errors.New("not logged in")
	}
	i := strings.LastIndexByte(c.Value, '.')
	if i <= 0 {
		return session{}, errors.New("not logged in")
	}
	se := session{user: c.Value[:i], secret: c.Value[i+1:]}
	if !names.ValidUser(se.user) || se.secret == "" {
		return session{}, errors.New("not logged in")
	}
	se.hash = controller.DashboardDigest(se.secret)
	if _, err := s.cfg.State.DashboardSession(r.Context(), se.user, se.hash, time.Now()); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return session{}, errors.New("your session ended (logged out, expired, or your user was removed)")
		}
		return session{}, err
	}
	return se, nil
}

func (s *Server) loginNeeded(w http.ResponseWriter, r *http.Request, why error) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	s.render(w, "login.html", map[string]any{"Why": why.Error()})
}

// checked serves h for a state-changing request only when it carries
// the session's CSRF token and, when the browser names one, comes from
// this origin.
func (s *Server) checked(h func(http.ResponseWriter, *http.Request, session)) func(http.ResponseWriter, *http.Request, session) {
	return func(w http.ResponseWriter, r *http.Request, se session) {
		if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" {
			tok = r.PostFormValue("csrf")
		}
		if subtle.ConstantTimeCompare([]byte(tok), []byte(se.csrf())) != 1 {
			http.Error(w, "missing or wrong CSRF token: reload the page", http.StatusForbidden)
			return
		}
		h(w, r, se)
	}
}

// loginLink reads a login link's user and token, from its query (GET)
// or the confirming form (POST).
func loginLink(user, token string) (string, string, error) {
	if !names.ValidUser(user) || token == "" || len(token) > 128 {
		return "", "", errors.New("this login link is malformed")
	}
	return user, token, nil
}

// confirmLogin answers a login link's GET with a page that asks to log
// in, whose button posts the link: a GET spends nothing, so that a
// link's preview (a chat's, a mail scanner's) does not use it up.
func (s *Server) confirmLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	user, token, err := loginLink(r.URL.Query().Get("user"), r.URL.Query().Get("token"))
	if err != nil {
		s.loginNeeded(w, r, err)
		return
	}
	s.render(w, "confirm.html", map[string]any{"User": user, "Token": token})
}

// login exchanges a one-time link, posted by its confirming page, for a
// session cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	// The confirming page's form posts with Origin "null" (its
	// Referrer-Policy is no-referrer); another site's is refused.
	if o := r.Header.Get("Origin"); o != "" && o != "null" && o != "https://"+r.Host {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	user, token, err := loginLink(r.PostFormValue("user"), r.PostFormValue("token"))
	if err != nil {
		s.loginNeeded(w, r, err)
		return
	}
	secret, err := newSecret()
	if err != nil {
		http.Error(w, "cannot make a session", http.StatusInternalServerError)
		return
	}
	now := time.Now()
	_, err = s.cfg.State.UseDashboardLogin(r.Context(), user, controller.DashboardDigest(token), controller.DashboardDigest(secret), now, s.cfg.SessionTTL)
	if err != nil {
		if errors.Is(err, state.ErrNotFound) {
			s.loginNeeded(w, r, errors.New("this login link was used already, has expired, or its user was removed"))
			return
		}
		s.logger.Warn("dashboard login failed", "user", user, "error", err)
		http.Error(w, "cannot log in now: try again", http.StatusServiceUnavailable)
		return
	}
	s.logger.Info("dashboard login", "user", user, "addr", clientAddr(r))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: user + "." + secret, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, Expires: now.Add(s.cfg.SessionTTL)})
	// A page that moves on to the model by its script, and says who
	// logged in where the script does not run.
	s.render(w, "loggedin.html", map[string]any{"User": user})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, se session) {
	if err := s.cfg.State.EndDashboardSession(r.Context(), se.user, se.hash); err != nil {
		http.Error(w, "cannot log out now: try again", http.StatusServiceUnavailable)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	s.loginNeeded(w, r, errors.New("logged out"))
}

// resolved marks a unit in error resolved (retry its hook), as ctl
// resolved does: authorized and audited as the user's Resolved call.
func (s *Server) resolved(w http.ResponseWriter, r *http.Request, se session) {
	unit := r.PathValue("service") + "/" + r.PathValue("n")
	req := &pb.ResolvedRequest{Unit: unit}
	_, err := s.cfg.API.CallAs(r.Context(), se.user, "Resolved", req, func(ctx context.Context) (any, error) {
		return s.cfg.API.Resolved(ctx, req)
	})
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "%s marked resolved: its failed hook runs again\n", unit)
}

// httpError answers a call's error with the HTTP status of its gRPC
// code and its one-line message.
func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange:
		code = http.StatusBadRequest
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		code = http.StatusConflict
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	case codes.Unavailable, codes.DeadlineExceeded:
		code = http.StatusServiceUnavailable
	}
	http.Error(w, status.Convert(err).Message(), code)
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages.ExecuteTemplate(w, name, data); err != nil {
		s.logger.Warn("render a dashboard page", "page", name, "error", err)
	}
}

// limiters rate-limit requests by key (a session, an address).
type limiters struct {
	rate  rate.Limit
	burst int
	mu    sync.Mutex
	by    map[string]*rate.Limiter
}

// maxLimiters bounds the keys kept: past it they start again.
const maxLimiters = 10000

func (l *limiters) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil || len(l.by) >= maxLimiters {
		l.by = map[string]*rate.Limiter{}
	}
	lim := l.by[key]
	if lim == nil {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.by[key] = lim
	}
	return lim.Allow()
}

// openStream counts a live page of user's, when within the bounds.
func (s *Server) openStream(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.cfg.Limits.Streams || s.streams[user] >= s.cfg.Limits.StreamsPerUser {
		return false
	}
	s.total++
	s.streams[user]++
	return true
}

func (s *Server) closeStream(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.streams[user]--; s.streams[user] == 0 {
		delete(s.streams, user)
	}
}
