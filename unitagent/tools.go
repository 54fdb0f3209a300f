package unitagent

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/names"
)

// toolServer runs hooks, and serves their hook tools over the unit's
// socket, or its machine's.
type toolServer struct {
	srv    *hooks.Server
	served chan struct{} // closed when Serve has returned; nil when shared
}

// hookResult is how a hook's run ended, as the executor needs it.
type hookResult struct {
	ok        bool
	why       string
	lastLines []string
	// took is how long the hook's process ran.
	took time.Duration
	// missing are the Juju hook tools the hook called that Lifeline does
	// not provide (hooks.MissingTools).
	missing []string
}

func (a *Agent) startTools(ctx context.Context) (*toolServer, error) {
	if a.cfg.Tools != nil {
		return &toolServer{srv: a.cfg.Tools}, nil
	}
	if err := a.store.makeDir(); err != nil {
		return nil, fmt.Errorf("hook tools: %w", err)
	}
	srv, err := hooks.NewServer(hooks.ServerConfig{Socket: filepath.Join(a.cfg.DataDir, "agent.sock"), Logger: a.logger})
	if err != nil {
		return nil, fmt.Errorf("hook tools: %w", err)
	}
	t := &toolServer{srv: srv, served: make(chan struct{})}
	go func() {
		defer close(t.served)
		if err := srv.Serve(ctx); err != nil && ctx.Err() == nil {
			a.logger.Warn("hook tool server stopped", "error", err)
		}
	}()
	return t, nil
}

// close stops the server, unless shared, and waits for the tool calls in
// flight.
func (t *toolServer) close() {
	if t.served == nil {
		return
	}
	t.srv.Close()
	<-t.served
}

// run runs op's hook with hc behind its tools.
func (t *toolServer) run(ctx context.Context, a *Agent, op *hookOp, hc *hookContext) (hookResult, error) {
	h, err := t.srv.Begin(hc)
	if err != nil {
		return hookResult{}, err
	}
	defer t.srv.End(h.ID)
	env := map[string]string{
		hooks.EnvUnitName:  a.cfg.Unit,
		hooks.EnvService:   names.UnitService(a.cfg.Unit),
		hooks.EnvMachineID: hc.machine,
		hooks.EnvHookName:  op.Hook,
		hooks.EnvCharmDir:  a.charmDir(),
		hooks.EnvSession:   a.cfg.DataDir,
	}
	if a.cfg.PrincipalDir != "" {
		env[hooks.EnvPrincipalSession] = a.cfg.PrincipalDir
	}
	for k, v := range h.Env {
		env[k] = v
	}
	if op.isRelationHook() {
		env[hooks.EnvRelation] = op.Endpoint
		env[hooks.EnvRelationID] = relationID(op.Endpoint, op.Relation)
		if op.Remote != "" {
			env[hooks.EnvRemoteUnit] = op.Remote
		}
		if op.RemoteService != "" {
			env[hooks.EnvRemoteService] = op.RemoteService
		} else if u := cmp.Or(op.Remote, op.Departing); u != "" {
			env[hooks.EnvRemoteService] = names.UnitService(u)
		}
		if op.Departing != "" {
			env[hooks.EnvDepartingUnit] = op.Departing
		}
	}
	hooks.JujuEnv(env, hc.principal)
	// Every line is looked at, not only the tail: a tool missing early in
	// a long hook is still told.
	var (
		mu       sync.Mutex // Lines runs for stdout and stderr at once
		notFound []string
		started  bool // set by Run, in this goroutine, once the hook started
	)
	res, err := hooks.Run(ctx, hooks.Spec{
		Unit: a.cfg.Unit, Hook: op.Hook, Path: filepath.Join("hooks", op.Hook),
		CharmDir: a.charmDir(), ToolsDir: a.cfg.ToolsDir, Env: env,
		Timeout: a.cfg.HookTimeout, Logger: a.logger,
		Started: func(pgid int) { started = true; a.recordHookGroup(pgid) },
		Lines: func(_, line string) {
			if strings.HasSuffix(line, "not found") {
				mu.Lock()
				if len(notFound) < hooks.MaxMissingTools*4 {
					notFound = append(notFound, line)
				}
				mu.Unlock()
			}
		},
	})
	if started {
		a.forgetHookGroup()
	}
	mu.Lock()
	missing := hooks.MissingTools(notFound)
	mu.Unlock()
	a.cfg.HookMetrics.observe(op.Hook, res, err)
	if res.Skipped {
		return hookResult{ok: true, why: res.String()}, nil
	}
	return hookResult{ok: err == nil && res.Succeeded(), why: res.String(), lastLines: res.Tail, took: res.Duration, missing: missing}, err
}
