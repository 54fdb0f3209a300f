package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/internal/version"
)

// Default timeouts of a run, when the Program sets none.
const (
	DefaultTimeout       = 60 * time.Second
	DefaultActionTimeout = 10 * time.Minute
)

// Program is a plugin: the program that implements a manifest's `exec:`
// resource type, and what it is handed when it runs. Its zero caches are
// ready to use; a Program is safe for concurrent use once its fields are
// set, and must not be copied after its first use.
type Program struct {
	// Path is the program: what Deployster calls the resource's image.
	// Relative to the working directory when not absolute.
	Path string
	// Dir is the plugin's directory: its runs' working directory, and
	// what an action's image is relative to. Path's directory when empty.
	Dir string
	// Plugs are the host paths offered to the plugin, by plug name. Only
	// plugs the plugin declares in its init answer may be given, and
	// every plug it declares as not optional must be.
	Plugs map[string]Plug
	// Timeout bounds a run of init or of the state action;
	// DefaultTimeout when zero.
	Timeout time.Duration
	// ActionTimeout bounds a run of an action; DefaultActionTimeout when
	// zero.
	ActionTimeout time.Duration
	// Verbose is sent to the plugin, and copies the stderr of its init
	// and state runs to Output.
	Verbose bool
	// Version is the Lifeline version sent to the plugin;
	// internal/version's when empty.
	Version string
	// Output receives an action's stdout and stderr as it runs (and,
	// when Verbose, the stderr of init and state runs). Nil discards
	// them; an error keeps the stderr tail either way.
	Output io.Writer

	mu    sync.Mutex
	inits map[[2]string]*InitResponse
}

// Plug is a host path offered to a plugin.
type Plug struct {
	// Path is the file or directory. It must exist when the plugin runs.
	Path string
	// Writable allows the plugin to write to it. A plug the plugin
	// declares writable must be given writable.
	Writable bool
}

// PlugEnv is the environment variable through which a plugin finds the
// plug name: LIFELINE_PLUG_ and the name in upper case, '-' as '_'.
func PlugEnv(name string) string {
	return "LIFELINE_PLUG_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// stdinMessage is what a plugin reads on stdin. Config is absent for init.
type stdinMessage struct {
	Name    string          `json:"name"`
	Type    string          `json:"type"`
	Version string          `json:"version"`
	Verbose bool            `json:"verbose"`
	Config  json.RawMessage `json:"config,omitempty"`
}

// Init runs the plugin with no arguments and returns its init answer,
// checked against the protocol, its config schema compiled, and the
// Program's plugs checked against the plugs it declares. The answer is
// kept: State and Do reuse it for the same name and type, and so does a
// second Init. The answer is shared: callers must not modify it.
func (p *Program) Init(ctx context.Context, name, typ string) (*InitResponse, error) {
	key := [2]string{name, typ}
	p.mu.Lock()
	r := p.inits[key]
	p.mu.Unlock()
	if r != nil {
		return r, nil
	}
	fail := p.failer(name, "init")
	exe, err := p.exe("")
	if err != nil {
		return nil, fail(err, "")
	}
	in, err := json.Marshal(stdinMessage{Name: name, Type: typ, Version: p.version(), Verbose: p.Verbose})
	if err != nil {
		return nil, fail(fmt.Errorf("%w: %v", ErrInvalidConfig, err), "")
	}
	res, err := run(ctx, runSpec{
		exe: exe, dir: p.dir(exe), env: p.env(nil), stdin: in,
		timeout: or(p.Timeout, DefaultTimeout), capture: true, out: p.verboseOut(),
	})
	if err != nil {
		return nil, fail(err, res.stderr)
	}
	r, err = decodeInit(res.stdout)
	if err != nil {
		return nil, fail(err, res.stderr)
	}
	r.plugin, r.resource = p.Path, name
	if r.schema, err = compileSchema(r.ConfigSchema); err != nil {
		return nil, fail(violation("config_schema", "%v", err), res.stderr)
	}
	r.StateAction = r.StateActionSpec.commandLine(filepath.Base(p.Path))
	if _, err := p.plugs(r); err != nil {
		return nil, fail(err, "")
	}
	p.mu.Lock()
	if p.inits == nil {
		p.inits = map[[2]string]*InitResponse{}
	}
	p.inits[key] = r
	p.mu.Unlock()
	return r, nil
}

// State runs the plugin's state action for a resource with its config
// (templates rendered) and returns the answer, checked against the
// protocol. It runs Init first unless its answer is kept. A config that
// does not match the plugin's schema is refused without running anything.
func (p *Program) State(ctx context.Context, name, typ string, config map[string]any) (*StateResponse, error) {
	r, in, plugs, err := p.prepare(ctx, name, typ, config, "state")
	if err != nil {
		return nil, err
	}
	fail := p.failer(name, "state")
	res, err := p.runAction(ctx, r.StateActionSpec, in, plugs, or(p.Timeout, DefaultTimeout), true)
	if err != nil {
		return nil, fail(err, res.stderr)
	}
	s, err := decodeState(res.stdout)
	if err != nil {
		return nil, fail(err, res.stderr)
	}
	return s, nil
}

// Do runs one action of a resource, as a state answer listed it, with the
// same stdin as the state action. Its output goes to Output; it succeeds
// when it exits 0. It runs Init first unless its answer is kept.
func (p *Program) Do(ctx context.Context, name, typ string, config map[string]any, a Action) error {
	step := "action " + a.Name
	_, in, plugs, err := p.prepare(ctx, name, typ, config, step)
	if err != nil {
		return err
	}
	res, err := p.runAction(ctx, a, in, plugs, or(p.ActionTimeout, DefaultActionTimeout), false)
	if err != nil {
		return p.failer(name, step)(err, res.stderr)
	}
	return nil
}

// prepare is what State and Do share: the init answer, the config checked
// and encoded into the stdin message, and the plugs to hand over.
func (p *Program) prepare(ctx context.Context, name, typ string, config map[string]any, step string) (*InitResponse, []byte, []givenPlug, error) {
	r, err := p.Init(ctx, name, typ)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := p.failer(name, step)
	if errs := r.validate(config, name); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
			if e, ok := err.(*Error); ok {
				msgs[i] = e.Field + ": " + strings.TrimPrefix(e.Err.Error(), ErrInvalidConfig.Error()+": ")
			}
		}
		return nil, nil, nil, fail(fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(msgs, "; ")), "")
	}
	if config == nil {
		config = map[string]any{}
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, nil, nil, fail(fmt.Errorf("%w: %v", ErrInvalidConfig, err), "")
	}
	in, err := json.Marshal(stdinMessage{Name: name, Type: typ, Version: p.version(), Verbose: p.Verbose, Config: cfg})
	if err != nil {
		return nil, nil, nil, fail(fmt.Errorf("%w: %v", ErrInvalidConfig, err), "")
	}
	if len(in) > MaxInput {
		return nil, nil, nil, fail(fmt.Errorf("%w: %d bytes as JSON, over the %d-byte limit", ErrInvalidConfig, len(in), MaxInput), "")
	}
	plugs, err := p.plugs(r)
	if err != nil {
		return nil, nil, nil, fail(err, "")
	}
	return r, in, plugs, nil
}

// runAction runs a (the state action or another) with the plugs handed
// over, and refuses the run if it changed a plug given read-only.
func (p *Program) runAction(ctx context.Context, a Action, in []byte, plugs []givenPlug, timeout time.Duration, capture bool) (runResult, error) {
	exe, err := p.exe(a.Image)
	if err != nil {
		return runResult{}, err
	}
	var args []string
	if a.Entrypoint != "" {
		args = append(args, a.Entrypoint)
	}
	args = append(args, a.Args...)
	before := fingerprints(plugs)
	out := p.Output
	if capture {
		out = p.verboseOut()
	}
	res, err := run(ctx, runSpec{
		exe: exe, args: args, dir: p.dir(p.mustAbs()), env: p.env(plugs), stdin: in,
		timeout: timeout, capture: capture, out: out,
	})
	if err != nil {
		return res, err
	}
	if err := checkUnchanged(plugs, before); err != nil {
		return res, err
	}
	return res, nil
}

// failer returns a function that puts an error in an *Error for this
// plugin, resource and step, taking the field from a protocol violation.
func (p *Program) failer(resource, step string) func(err error, stderr string) error {
	return func(err error, stderr string) error {
		e := &Error{Plugin: p.Path, Resource: resource, Step: step, Err: err, Stderr: stderr}
		if fe, ok := err.(*fieldError); ok {
			e.Field = fe.field
			e.Err = fmt.Errorf("%w: %s", ErrProtocol, fe.msg)
		}
		return e
	}
}

// exe resolves the program to run: image relative to the plugin's
// directory, or the plugin's own program when image is empty.
func (p *Program) exe(image string) (string, error) {
	if p.Path == "" {
		return "", fmt.Errorf("%w: no program given", ErrNotRunnable)
	}
	self, err := filepath.Abs(p.Path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotRunnable, err)
	}
	switch {
	case image == "":
		return self, nil
	case filepath.IsAbs(image):
		return filepath.Clean(image), nil
	}
	return filepath.Join(p.dir(self), image), nil
}

func (p *Program) mustAbs() string {
	abs, err := filepath.Abs(p.Path)
	if err != nil {
		return p.Path
	}
	return abs
}

func (p *Program) dir(exe string) string {
	if p.Dir != "" {
		if abs, err := filepath.Abs(p.Dir); err == nil {
			return abs
		}
		return p.Dir
	}
	return filepath.Dir(exe)
}

func (p *Program) version() string {
	if p.Version != "" {
		return p.Version
	}
	return version.Get().Version
}

func (p *Program) verboseOut() io.Writer {
	if p.Verbose {
		return p.Output
	}
	return nil
}

// env is a run's whole environment: PATH and HOME passed through (PATH a
// plain default when unset), and one variable per plug.
func (p *Program) env(plugs []givenPlug) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{"PATH=" + path}
	if home := os.Getenv("HOME"); home != "" {
		env = append(env, "HOME="+home)
	}
	for _, g := range plugs {
		env = append(env, PlugEnv(g.name)+"="+g.path)
	}
	return env
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
