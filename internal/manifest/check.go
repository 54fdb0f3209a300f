package manifest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Plugins runs the programs of a manifest's exec:PATH resources.
type Plugins interface {
	// Init asks the resource's program for its configuration's schema
	// (nil or empty: any configuration).
	Init(ctx context.Context, r *Resource) (schema json.RawMessage, err error)
	// State asks it for the resource's state under config.
	State(ctx context.Context, r *Resource, config map[string]any) (*PluginState, error)
}

// PluginState is a plugin's answer to its state action.
type PluginState struct {
	// Valid says the resource matches its configuration; State is then
	// its state. Otherwise StaleState is its current state (nil when it
	// does not exist) and Actions what would make it valid.
	Valid      bool
	State      map[string]any
	StaleState map[string]any
	Actions    []PluginAction
}

// PluginAction is one action a plugin asks for.
type PluginAction struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Entrypoint  string   `json:"entrypoint,omitempty"`
	Image       string   `json:"image,omitempty"`
	Args        []string `json:"args,omitempty"`
}

// Options are what checking and planning a manifest take beside it.
type Options struct {
	// Vars are variables given beside the file (--var-file, --var), each
	// merged over the file's and those before it.
	Vars []map[string]any
	// Plugins runs plugin resources; nil refuses them.
	Plugins Plugins
}

// Charm is a service resource's charm as read from its directory.
type Charm struct {
	// Path is the charm's directory, resolved against the manifest's.
	Path  string
	Charm *charm.Charm
	// Digest is the hex SHA-256 of the charm packed (charm.Pack, which is
	// deterministic): what the model records of a service's charm.
	Digest string
	schema *jsonschema.Schema
}

// Checked is a manifest found valid before anything touched the model:
// its resources in dependency order, each configuration valid against its
// schema as far as it is known without the model.
type Checked struct {
	Manifest *Manifest
	// Vars are the variables templates see, merged.
	Vars map[string]any
	// Order is the resources' names in dependency order.
	Order []string
	// Charms are the service resources' charms, by resource name.
	Charms  map[string]*Charm
	schemas map[string]*jsonschema.Schema
	plugins Plugins
	// mu guards Charms and schemas once Check returns, for PlanResource
	// called from several goroutines; byPath is the charms read, by
	// directory.
	mu     sync.Mutex
	byPath map[string]*Charm
}

// charmOf is a service resource's charm; nil while not known.
func (c *Checked) charmOf(name string) *Charm {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Charms[name]
}

// schema is a resource's schema.
func (c *Checked) schema(name string) *jsonschema.Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.schemas[name]
}

// setCharm records a service resource's charm, read once its directory is
// known, and its schema.
func (c *Checked) setCharm(name string, ch *Charm) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Charms[name] = ch
	c.schemas[name] = ch.schema
}

// Check validates a manifest before anything touches the model: the
// variables, the dependency graph (a cycle is refused naming it), every
// template, and every configuration against its schema (a service's from
// its charm's config.yaml, a built-in type's own, a plugin's from its
// init answer). Values that read a dependency's state are unknown here and
// checked by Plan. Every problem is listed (an *Errors), each naming the
// resource and the field.
func Check(ctx context.Context, m *Manifest, opts Options) (*Checked, error) {
	errs := &Errors{}
	c := &Checked{Manifest: m, Charms: map[string]*Charm{}, schemas: map[string]*jsonschema.Schema{}, plugins: opts.Plugins,
		byPath: map[string]*Charm{}}
	vars, err := m.WithVariables(opts.Vars...)
	if err != nil {
		errs.List = append(errs.List, err.(*Errors).List...)
		vars = m.Variables
	}
	c.Vars = vars
	order, err := m.Order()
	if err != nil {
		errs.List = append(errs.List, err.(*Errors).List...)
	}
	c.Order = order
	builtins := map[string]*jsonschema.Schema{}
	for typ, doc := range builtinSchemas {
		sch, err := compileSchema(typ, []byte(doc))
		if err != nil {
			return nil, fmt.Errorf("the %s type's schema: %w", typ, err)
		}
		builtins[typ] = sch
	}
	for _, name := range m.Names {
		r := m.Resources[name]
		field := "resources." + name
		config, rerrs := Render(r.Config, c.context(r, nil), field+".config")
		errs.List = append(errs.List, rerrs...)
		switch {
		case r.Type == TypeService:
			sch := builtins[TypeService]
			if ch, err := c.readCharm(config["charm"], c.byPath); err != nil {
				errs.add("%s.config.charm: %v", field, err)
			} else if ch != nil {
				c.Charms[name] = ch
				sch = ch.schema
				if ch.Charm.Meta.Subordinate {
					if u, ok := config["units"].(int64); ok && u > 0 {
						errs.add("%s.config.units: charm %s is a subordinate: its units come with the principals it is related to", field, ch.Charm.Meta.Name)
					}
				}
			}
			c.schemas[name] = sch
		case r.Plugin != "":
			if opts.Plugins == nil {
				errs.add("%s.type: plugin types are not available here", field)
				continue
			}
			doc, err := opts.Plugins.Init(ctx, r)
			if err != nil {
				errs.add("%s.type: %v", field, err)
				continue
			}
			if len(strings.TrimSpace(string(doc))) == 0 || string(doc) == "null" {
				doc = []byte(`{"type": "object"}`)
			}
			sch, err := compileSchema(name, doc)
			if err != nil {
				errs.add("%s.type: the plugin's config_schema: %v", field, err)
				continue
			}
			c.schemas[name] = sch
		default:
			c.schemas[name] = builtins[r.Type]
		}
		if sch := c.schemas[name]; sch != nil {
			errs.List = append(errs.List, validate(sch, config, field+".config")...)
		}
	}
	c.checkRelations(errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// context is what r's templates see: the variables, and its dependencies
// with the states known (nil: none known).
func (c *Checked) context(r *Resource, states map[string]*Dep) Context {
	deps := make(map[string]Dep, len(r.Dependencies))
	for local, target := range r.Dependencies {
		if d, ok := states[target]; ok {
			deps[local] = *d
			continue
		}
		t := c.Manifest.Resources[target]
		d := Dep{Name: target}
		if t != nil {
			d.Type = t.Type
		}
		deps[local] = d
	}
	return Context{Vars: c.Vars, Deps: deps}
}

// readCharm reads the charm a service's charm value names (nil when the
// value is not known yet), once per directory.
func (c *Checked) readCharm(v any, byPath map[string]*Charm) (*Charm, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path, ok := v.(string)
	if !ok || path == "" {
		return nil, nil // the schema says what is wrong
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.Manifest.Dir, path)
	}
	if ch, ok := byPath[path]; ok {
		return ch, nil
	}
	parsed, err := charm.ReadDir(path)
	if err != nil {
		return nil, err
	}
	info, err := charm.Pack(path, io.Discard)
	if err != nil {
		return nil, err
	}
	doc, err := charmSchema(parsed)
	if err != nil {
		return nil, err
	}
	sch, err := compileSchema("charm:"+path, doc)
	if err != nil {
		return nil, err
	}
	ch := &Charm{Path: path, Charm: parsed, Digest: info.SHA256, schema: sch}
	byPath[path] = ch
	return ch, nil
}

// checkRelations checks each relation's literal endpoints that name a
// service of the manifest against that service's charm.
func (c *Checked) checkRelations(errs *Errors) {
	for _, name := range c.Manifest.Names {
		r := c.Manifest.Resources[name]
		if r.Type != TypeRelation {
			continue
		}
		eps, _ := r.Config["endpoints"].([]any)
		for i, e := range eps {
			s, ok := e.(string)
			if !ok || hasTemplate(s) {
				continue
			}
			svc, ep, named := strings.Cut(s, ":")
			ch := c.Charms[svc]
			if ch == nil || !named {
				continue
			}
			if !hasEndpoint(ch.Charm.Meta, ep) {
				errs.add("resources.%s.config.endpoints[%d]: charm %s has no endpoint %q", name, i, ch.Charm.Meta.Name, ep)
			}
		}
	}
}

// hasEndpoint says whether the charm m has endpoint ep; the implicit
// endpoint answers to either of its names.
func hasEndpoint(m *charm.Metadata, ep string) bool {
	for _, e := range m.Endpoints() {
		if e.Name == ep || e.Role == pb.Role_ROLE_PROVIDER && charm.IsInfoName(e.Name) && charm.IsInfoName(e.Interface) && charm.IsInfoName(ep) {
			return true
		}
	}
	return false
}

// relationServices are the services a relation's literal endpoints name:
// what it is applied after, beside its dependencies.
func relationServices(r *Resource) []string {
	if r.Type != TypeRelation {
		return nil
	}
	eps, _ := r.Config["endpoints"].([]any)
	var out []string
	for _, e := range eps {
		if s, ok := e.(string); ok && !hasTemplate(s) {
			svc, _, _ := strings.Cut(s, ":")
			out = append(out, svc)
		}
	}
	return out
}
