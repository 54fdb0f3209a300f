package hooks

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Context is what the hook tools of one hook run act on. The unit agent
// implements it, one value per hook run, and hands it to Server.Begin.
//
// The server never calls one Context's methods concurrently (a hook's tool
// calls, even those run in parallel, take turns), and calls none after
// Server.End returns. The ctx of a call ends when the hook ends (End) or
// the server stops; methods that wait on the network must honour it.
//
// Relation ids are in the tools' form, "<endpoint>:<id>" ("db:3"), and
// errors are one lowercase sentence (`relation db:9 not found`), which the
// tool prints after its name, exiting 1.
type Context interface {
	// UnitName is the name of the hook's unit, "kv/0".
	UnitName() string
	// RelationIDs returns the ids of the unit's relations on endpoint, or
	// of all its relations when endpoint is "".
	RelationIDs(ctx context.Context, endpoint string) ([]string, error)
	// RelationGet returns unit's settings in relation relationID; unit is
	// the hook's own unit (whose settings include this hook's relation-set
	// changes so far) or a member of the relation.
	RelationGet(ctx context.Context, relationID, unit string) (map[string]string, error)
	// RelationSet buffers changes to the hook's own unit's settings in
	// relation relationID: set these keys, delete those in unset. The agent
	// commits the buffered changes only if the hook succeeds. Later calls
	// override earlier ones key by key. Changes whose values would pass
	// MaxSettingsBytes are refused and leave the buffer as it was.
	RelationSet(ctx context.Context, relationID string, set map[string]string, unset []string) error
	// RelationList returns the remote units of relation relationID that the
	// hook's unit has seen join (and not yet depart).
	RelationList(ctx context.Context, relationID string) ([]string, error)
	// Config returns the service's configuration: every option of the
	// charm, with a nil value (or one with no value set) for an option that
	// has none.
	Config(ctx context.Context) (map[string]*pb.ConfigValue, error)
	// UnitAddress returns the unit's address of kind "private-address" or
	// "public-address".
	UnitAddress(ctx context.Context, kind string) (string, error)
	// SetWorkloadStatus sets the unit's workload status at once, whatever
	// the hook's outcome. status is one of maintenance, blocked, waiting,
	// active.
	SetWorkloadStatus(ctx context.Context, status, message string) error
	// WorkloadStatus returns the unit's workload status.
	WorkloadStatus(ctx context.Context) (status, message string, err error)
	// Log writes a message of the hook's into the agent's log; level is one
	// of trace, debug, info, warn, error.
	Log(level, message string)
}

// The ends of a tool call's ctx, which the tool reports as its error.
var (
	errHookEnded    = errors.New("the hook ended while this tool ran")
	errServerClosed = errors.New("the unit agent is stopping")
)

// errExpired is what a tool prints for a context id that is not, or no
// longer, valid.
const errExpired = "context expired: this hook tool was called outside the hook that received it"

const (
	// maxSocketPath is the longest path a unix socket may have on Linux.
	maxSocketPath = 107
	// connTimeout bounds reading a request and writing a response.
	connTimeout = 10 * time.Second
)

// ContextDirName is the directory, beside the socket, that holds the
// hooks' context files (EnvContextFile), unless ServerConfig.ContextDir
// names another.
const ContextDirName = "hook-contexts"

// maxContextFile bounds what a tool reads of its context file.
const maxContextFile = 256

// ServerConfig configures a Server.
type ServerConfig struct {
	// Socket is the absolute path of the unix socket to listen on, inside
	// the agent's data directory (which must exist and should be private
	// to the agent's user); at most 107 bytes long.
	Socket string
	// ContextDir is the directory of the hooks' context files, made with
	// mode 0700 when the first hook begins, and emptied of an earlier
	// agent's files when the Server starts: ContextDirName beside Socket
	// when empty.
	ContextDir string
	// Logger receives the server's own messages (each tool call at debug
	// level). Nil discards them.
	Logger hclog.Logger
}

// Validate checks the configuration.
func (c ServerConfig) Validate() error {
	switch {
	case c.Socket == "":
		return errors.New("hook tool socket: no path")
	case !filepath.IsAbs(c.Socket):
		return fmt.Errorf("hook tool socket %q is not an absolute path", c.Socket)
	case len(c.Socket) > maxSocketPath:
		return fmt.Errorf("hook tool socket %s is %d bytes long: a unix socket's path is at most %d", c.Socket, len(c.Socket), maxSocketPath)
	case c.ContextDir != "" && !filepath.IsAbs(c.ContextDir):
		return fmt.Errorf("hook context directory %q is not an absolute path", c.ContextDir)
	}
	return nil
}

// Server is the unit agent's end of the hook tools: it listens on a unix
// socket and answers the tools' calls, each on behalf of the hook run
// whose context id it presents (Begin, End). It is safe for concurrent
// use.
type Server struct {
	socket     string
	contextDir string
	logger     hclog.Logger
	ln         *net.UnixListener
	wg         sync.WaitGroup // the connections' handlers

	mu             sync.Mutex
	closed         bool
	contextDirMade bool
	contexts       map[string]*hookContext
	conns          map[net.Conn]context.CancelCauseFunc
}

// hookContext is one hook run's Context, between Begin and End.
type hookContext struct {
	c Context
	// file holds the context id for the hook's tools.
	file string
	// turn is held while a call runs: calls take turns, and End waits for
	// the running one.
	turn sync.Mutex
	// ended and cancel (the running call's) are guarded by Server.mu.
	ended  bool
	cancel context.CancelCauseFunc
}

// NewServer listens on cfg.Socket, created with mode 0600. A stale socket
// left there by an earlier agent is removed first; a socket some process
// still answers on, or a file that is not a socket, is an error. Serve
// answers the calls; Close stops listening.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	path := cfg.Socket
	if fi, err := os.Stat(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("hook tool socket: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("hook tool socket: %s is not a directory", filepath.Dir(path))
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("hook tool socket: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("hook tool socket: %s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("hook tool socket: remove the stale one: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("hook tool socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hook tool socket: %w", err)
	}
	contextDir := cfg.ContextDir
	if contextDir == "" {
		contextDir = filepath.Join(filepath.Dir(path), ContextDirName)
	}
	if err := clearContextDir(contextDir); err != nil {
		ln.Close()
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Server{
		socket:     path,
		contextDir: contextDir,
		logger:     logger,
		ln:         ln,
		contexts:   map[string]*hookContext{},
		conns:      map[net.Conn]context.CancelCauseFunc{},
	}, nil
}

// Socket returns the socket's path, for the hooks' LIFELINE_AGENT_SOCKET.
func (s *Server) Socket() string { return s.socket }

// clearContextDir removes the files an earlier agent left in dir, if it
// exists: their hooks are over.
func clearContextDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hook context directory: %w", err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("hook context directory: %w", err)
		}
	}
	return nil
}

// makeContextDir makes the context directory, private to the agent's user
// (0700), unless made already: an agent that runs no hook makes none.
func (s *Server) makeContextDir() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.contextDirMade {
		return nil
	}
	if err := os.MkdirAll(s.contextDir, 0o700); err != nil {
		return fmt.Errorf("hook context directory: %w", err)
	}
	if err := os.Chmod(s.contextDir, 0o700); err != nil {
		return fmt.Errorf("hook context directory: %w", err)
	}
	s.contextDirMade = true
	return nil
}

// Hook is a hook run registered with a Server (Begin).
type Hook struct {
	// ID is the hook's context id, for End.
	ID string
	// Env is what the hook's environment needs for its tools to reach the
	// Server: EnvAgentSocket and EnvContextFile.
	Env map[string]string
}

// Begin registers c for a hook run about to start: the tools' calls that
// present its context id act on c until End. The id is written to a file
// of its own (mode 0600, in the Server's context directory, under a random
// name) that the hook's environment names (Hook.Env); the hook's tools,
// and those its child processes run, read it from there.
func (s *Server) Begin(c Context) (Hook, error) {
	if err := s.makeContextDir(); err != nil {
		return Hook{}, err
	}
	id := rand.Text()
	file := filepath.Join(s.contextDir, rand.Text())
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Hook{}, fmt.Errorf("hook context: %w", err)
	}
	_, err = f.WriteString(id + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(file)
		return Hook{}, fmt.Errorf("hook context: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contexts[id] = &hookContext{c: c, file: file}
	return Hook{ID: id, Env: map[string]string{EnvAgentSocket: s.socket, EnvContextFile: file}}, nil
}

// End expires context id once its hook has ended: its context file is
// removed, later calls presenting it are refused, a call still running
// (from a process the hook left behind) has its ctx cancelled, and End
// waits for it to return. After End the server calls none of the Context's
// methods, so the agent may commit its buffered relation settings. Ending
// an unknown id does nothing.
func (s *Server) End(id string) {
	s.mu.Lock()
	hc := s.contexts[id]
	delete(s.contexts, id)
	if hc != nil {
		hc.ended = true
		if hc.cancel != nil {
			hc.cancel(errHookEnded)
		}
	}
	s.mu.Unlock()
	if hc != nil {
		if err := os.Remove(hc.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.logger.Warn("remove a hook's context file", "error", err)
		}
		// Wait for the running call, if there is one.
		hc.turn.Lock()
		defer hc.turn.Unlock()
	}
}

// Serve answers the tools' calls until ctx ends or Close is called, then
// closes the listener (removing the socket), cancels the calls still
// running and returns nil once their handlers have returned.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	delay := time.Duration(0)
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				break
			}
			// Out of file descriptors, most likely: wait and retry.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger.Warn("accept a hook tool call", "error", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		s.wg.Add(1)
		go s.handle(ctx, conn)
	}
	s.wg.Wait()
	return nil
}

// Close stops listening and removes the socket, and cancels the calls
// still running. Serve returns once their handlers have. Closing twice
// does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for conn, cancel := range s.conns {
		cancel(errServerClosed)
		conn.Close()
	}
	return err
}

// handle answers one connection: one request, one response.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[conn] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()

	_ = conn.SetDeadline(time.Now().Add(connTimeout))
	var resp response
	req, err := readRequest(conn)
	if err != nil {
		resp = response{Stderr: fmt.Sprintf("%s: %v\n", req.name(), err), Code: 1}
	} else {
		_ = conn.SetDeadline(time.Time{}) // a call may wait on the controller
		resp = s.serve(ctx, cancel, req)
		_ = conn.SetDeadline(time.Now().Add(connTimeout))
	}
	line, err := json.Marshal(resp)
	if err != nil {
		line, _ = json.Marshal(response{Stderr: fmt.Sprintf("%s: encode the answer: %v\n", req.name(), err), Code: 1})
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		s.logger.Debug("answer a hook tool call", "tool", req.Tool, "error", err)
	}
}

// readRequest reads one request line.
func readRequest(r io.Reader) (request, error) {
	var req request
	rd := bufio.NewReader(io.LimitReader(r, MaxRequestBytes))
	b, err := rd.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(b) == MaxRequestBytes {
			return req, fmt.Errorf("request too large: at most %d bytes", MaxRequestBytes)
		}
		return req, fmt.Errorf("read the request: %w", err)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return request{}, fmt.Errorf("bad request: %w", err)
	}
	if req.Version != protocolVersion {
		return req, fmt.Errorf("protocol version %d, but the unit agent speaks %d: the lifelined binary changed under a running agent", req.Version, protocolVersion)
	}
	return req, nil
}

// name is the tool's name for error messages.
func (r request) name() string {
	if r.Tool == "" || !IsTool(r.Tool) {
		return "hook tool"
	}
	return r.Tool
}

// serve runs one tool call on behalf of its context; cancel ends the
// call's ctx.
func (s *Server) serve(ctx context.Context, cancel context.CancelCauseFunc, req request) response {
	t, ok := tools()[req.Tool]
	if !ok {
		return response{Stderr: fmt.Sprintf("hook tool: unknown tool %q\n", req.Tool), Code: 1}
	}
	expired := response{Stderr: req.Tool + ": " + errExpired + "\n", Code: 1}
	s.mu.Lock()
	hc := s.contexts[req.ContextID]
	s.mu.Unlock()
	if hc == nil {
		return expired
	}
	hc.turn.Lock()
	defer hc.turn.Unlock()
	s.mu.Lock()
	if hc.ended {
		s.mu.Unlock()
		return expired
	}
	hc.cancel = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		hc.cancel = nil
		s.mu.Unlock()
	}()
	var stdout, stderr bytes.Buffer
	code := t.invoke(ctx, hc.c, req, &stdout, &stderr)
	s.logger.Debug("hook tool", "unit", hc.c.UnitName(), "tool", req.Tool, "code", code)
	return response{Stdout: stdout.String(), Stderr: stderr.String(), Code: code}
}
