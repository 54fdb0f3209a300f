package manifest

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	"github.com/lifelinehq/lifeline/internal/manifest/plugin"
)

// ExecPlugins runs plugin resources' programs over the plugin protocol
// (package manifest/plugin): one plugin.Program per resource, with the
// resource's plugs, its init answer kept for its state and actions.
type ExecPlugins struct {
	// Verbose and Output are plugin.Program's.
	Verbose bool
	Output  io.Writer

	mu       sync.Mutex
	programs map[string]*plugin.Program
}

// Program is the resource's program.
func (e *ExecPlugins) Program(r *Resource) *plugin.Program {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.programs[r.Name]; ok {
		return p
	}
	plugs := map[string]plugin.Plug{}
	for name, pl := range r.Plugs {
		plugs[name] = plugin.Plug{Path: pl.Path, Writable: pl.Writable}
	}
	p := &plugin.Program{Path: r.Plugin, Plugs: plugs, Verbose: e.Verbose, Output: e.Output}
	if e.programs == nil {
		e.programs = map[string]*plugin.Program{}
	}
	e.programs[r.Name] = p
	return p
}

// Init runs the resource's init and returns its config schema.
func (e *ExecPlugins) Init(ctx context.Context, r *Resource) (json.RawMessage, error) {
	resp, err := e.Program(r).Init(ctx, r.Name, r.Type)
	if err != nil {
		return nil, err
	}
	return resp.ConfigSchema, nil
}

// State runs the resource's state action.
func (e *ExecPlugins) State(ctx context.Context, r *Resource, config map[string]any) (*PluginState, error) {
	resp, err := e.Program(r).State(ctx, r.Name, r.Type, config)
	if err != nil {
		return nil, err
	}
	st := &PluginState{Valid: resp.Status == plugin.StatusValid, State: resp.State, StaleState: resp.StaleState}
	for _, a := range resp.Actions {
		st.Actions = append(st.Actions, PluginAction{Name: a.Name, Description: a.Description,
			Entrypoint: a.Entrypoint, Image: a.Image, Args: a.Args})
	}
	return st, nil
}

// Do runs one of the resource's actions, as its state action listed it.
func (e *ExecPlugins) Do(ctx context.Context, r *Resource, config map[string]any, a PluginAction) error {
	return e.Program(r).Do(ctx, r.Name, r.Type, config, plugin.Action{Name: a.Name, Description: a.Description,
		Entrypoint: a.Entrypoint, Image: a.Image, Args: a.Args})
}
