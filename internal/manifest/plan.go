package manifest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Status is a resource's status in a plan, as the seed's protocol names
// it: VALID (it matches its configuration) or STALE (actions would make it
// match).
type Status string

const (
	Valid Status = "VALID"
	Stale Status = "STALE"
)

// The kinds of actions a plan holds.
const (
	ActCreateService = "create-service"
	ActRefreshCharm  = "refresh-charm"
	ActSetConfig     = "set-config"
	ActAddUnits      = "add-units"
	ActRemoveUnits   = "remove-units"
	ActAddRelation   = "add-relation"
	ActAddMachines   = "add-machines"
	ActPlugin        = "plugin"
	// ActPluginState stands for a plugin's actions while its
	// configuration holds values known only after apply: its state is
	// asked for then.
	ActPluginState = "plugin-state"
	// What pruning destroys: an entity the manifest owns and no longer
	// names (a machine's id is in Units).
	ActDestroyService  = "destroy-service"
	ActDestroyRelation = "destroy-relation"
	ActDestroyMachine  = "destroy-machine"
)

// Action is one step a plan would take. Values known only after apply are
// Unknown.
type Action struct {
	Kind    string `json:"kind"`
	Service string `json:"service,omitempty"`
	// Charm is the charm directory, and CharmSHA256 its packed archive's
	// digest (the model's, for a refresh, in OldCharmSHA256).
	Charm          string `json:"charm,omitempty"`
	CharmSHA256    string `json:"charm_sha256,omitempty"`
	OldCharmSHA256 string `json:"old_charm_sha256,omitempty"`
	// OldCharm is the name of the charm a refresh replaces; SwitchCharm
	// says the new charm has another name (RefreshService's
	// switch_charm).
	OldCharm    string `json:"old_charm,omitempty"`
	SwitchCharm bool   `json:"switch_charm,omitempty"`
	// Count is how many units a service is created with, are added or
	// removed, or machines are added (an int64 or Unknown); Units are
	// the units removed; To the machine units are placed on.
	Count any      `json:"count,omitempty"`
	Units []string `json:"units,omitempty"`
	To    string   `json:"to,omitempty"`
	// Config is a service's settings as the manifest gives them, at its
	// creation; Changes the keys a set-config changes.
	Config  map[string]any `json:"config,omitempty"`
	Changes []Change       `json:"changes,omitempty"`
	// Endpoints are a relation's, as the manifest gives them.
	Endpoints []any `json:"endpoints,omitempty"`
	Manual    bool  `json:"manual,omitempty"`
	// Plugin is a plugin's action, as its state action gave it.
	Plugin *PluginAction `json:"plugin,omitempty"`
}

// Change is one configuration key's change: Old nil is unset (New nil
// resets the key to no value).
type Change struct {
	Key string `json:"key"`
	Old any    `json:"old"`
	New any    `json:"new"`
}

// ResourcePlan is one resource's status and actions.
type ResourcePlan struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Status Status `json:"status"`
	// Exists says that something of the resource exists: a STALE one
	// that exists is changed, one that does not is created.
	Exists  bool     `json:"exists"`
	Actions []Action `json:"actions,omitempty"`
	// Config is its configuration rendered; State its state (VALID) or
	// its current state (STALE, when it exists).
	Config map[string]any `json:"config"`
	State  map[string]any `json:"state,omitempty"`
	// Inputs are the digests of what planning it read (PlanResult's
	// Inputs gathers them).
	Inputs map[string]string `json:"-"`
	// planned is its state once its actions are done, as far as the plan
	// knows it (Unknown where it does not): what its dependents'
	// templates see. nil: nothing is known of it.
	planned map[string]any
}

// PlanResult is a plan: every resource of the manifest, in dependency
// order, and what it read to make it.
type PlanResult struct {
	Manifest       string         `json:"manifest"`
	ManifestSHA256 string         `json:"manifest_sha256"`
	Vars           map[string]any `json:"variables"`
	// ModelRevision is the etcd revision the model's status was read at.
	ModelRevision int64 `json:"model_revision"`
	// Inputs are the digests of everything the plan read, by name:
	// "service/NAME" (what the plan used of a service, or its absence),
	// "relations", "machines", "charm/RESOURCE", "plugin/RESOURCE". A
	// plan whose inputs changed since is stale.
	Inputs    map[string]string `json:"inputs"`
	Resources []*ResourcePlan   `json:"resources"`
	// Destroy is what pruning destroys (PlanPrune), when asked for.
	Destroy []Action `json:"destroy,omitempty"`
}

// Summary counts the resources a plan creates, changes and destroys (the
// entities pruning destroys).
func (p *PlanResult) Summary() (create, change, destroy int) {
	for _, r := range p.Resources {
		switch {
		case r.Status == Valid:
		case r.Exists:
			change++
		default:
			create++
		}
	}
	return create, change, len(p.Destroy)
}

// Changes says whether the plan would change anything.
func (p *PlanResult) Changes() bool {
	create, change, destroy := p.Summary()
	return create+change+destroy > 0
}

// Plan checks a manifest (Check), reads the model through model, and
// returns per resource, in dependency order, whether it is VALID or STALE
// and the actions that would make it VALID. A resource's templates see
// each dependency's state as it will be once applied, as far as the plan
// knows it: a VALID dependency's state as read; a STALE one's with what
// its actions make (a new service's units, a new revision's number)
// Unknown, and a STALE plugin's all Unknown. Planning writes nothing.
func Plan(ctx context.Context, m *Manifest, model Model, opts Options) (*PlanResult, error) {
	c, err := Check(ctx, m, opts)
	if err != nil {
		return nil, err
	}
	return c.Plan(ctx, model)
}

// Plan plans a checked manifest: Plan without checking it again.
func (c *Checked) Plan(ctx context.Context, model Model) (*PlanResult, error) {
	m := c.Manifest
	var services []string
	for _, name := range m.Names {
		if m.Resources[name].Type == TypeService {
			services = append(services, name)
		}
	}
	snap, err := ReadSnapshot(ctx, model, services)
	if err != nil {
		return nil, err
	}
	return c.plan(ctx, snap)
}

// plan plans against a snapshot.
func (c *Checked) plan(ctx context.Context, snap *Snapshot) (*PlanResult, error) {
	m := c.Manifest
	p := &PlanResult{Manifest: m.Name, ManifestSHA256: m.Digest, Vars: c.Vars,
		ModelRevision: snap.Revision, Inputs: map[string]string{}}
	p.Inputs["relations"] = relationsDigest(snap.Relations)
	p.Inputs["machines"] = machinesDigest(snap.Machines)
	errs := &Errors{}
	states := map[string]*Dep{}
	for _, name := range c.Order {
		rp, err := c.PlanResource(ctx, name, snap, states)
		if err != nil {
			var e *Errors
			if !errors.As(err, &e) {
				return nil, err
			}
			errs.List = append(errs.List, e.List...)
			continue
		}
		maps.Copy(p.Inputs, rp.Inputs)
		states[name] = rp.Dep()
		p.Resources = append(p.Resources, rp)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// PlanResource plans one resource against snap: its config rendered with
// states (its dependencies as its templates see them, by resource name; a
// dependency missing from it is unknown) and checked against its schema,
// then compared with the model. Its problems are an *Errors. Plan plans
// each resource so in dependency order; apply can plan a resource again
// once its dependencies are applied, and once more after its own actions,
// to require VALID.
func (c *Checked) PlanResource(ctx context.Context, name string, snap *Snapshot, states map[string]*Dep) (*ResourcePlan, error) {
	r, ok := c.Manifest.Resources[name]
	if !ok {
		return nil, fmt.Errorf("no resource %q in the manifest", name)
	}
	field := "resources." + name + ".config"
	errs := &Errors{}
	config, rerrs := Render(r.Config, c.context(r, states), field)
	errs.List = append(errs.List, rerrs...)
	if r.Type == TypeService && c.charmOf(name) == nil && len(rerrs) == 0 {
		// The charm's directory was not known before the model was
		// read: it must be now.
		switch v := config["charm"].(type) {
		case Unknown:
			errs.add("%s.charm: the charm's directory may not depend on what only apply makes", field)
		default:
			ch, err := c.readCharm(v, c.byPath)
			if err != nil {
				errs.add("%s.charm: %v", field, err)
			} else if ch != nil {
				c.setCharm(name, ch)
			}
		}
	}
	if sch := c.schema(name); sch != nil {
		errs.List = append(errs.List, validate(sch, config, field)...)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	rp := &ResourcePlan{Name: name, Type: r.Type, Config: config, Inputs: map[string]string{}}
	switch {
	case r.Type == TypeService:
		c.planService(rp, snap, rp.Inputs)
	case r.Type == TypeRelation:
		planRelation(rp, snap)
	case r.Type == TypeMachine:
		c.planMachines(rp, snap)
	case r.Plugin != "":
		if err := c.planPlugin(ctx, r, rp, rp.Inputs); err != nil {
			errs.add("resources.%s: %v", name, err)
			return nil, errs
		}
	}
	rp.Status = Valid
	if len(rp.Actions) > 0 {
		rp.Status = Stale
	} else {
		rp.planned = rp.State
	}
	return rp, nil
}

// Dep is the resource as its dependents' templates see it: its state once
// its actions are done, as far as the plan knows it.
func (rp *ResourcePlan) Dep() *Dep {
	return &Dep{Name: rp.Name, Type: rp.Type, State: rp.planned, Known: rp.planned != nil}
}

// planService compares a service resource with the model's service.
func (c *Checked) planService(rp *ResourcePlan, snap *Snapshot, inputs map[string]string) {
	ch := c.charmOf(rp.Name)
	inputs["charm/"+rp.Name] = ch.Digest
	settings, _ := rp.Config["config"].(map[string]any)
	to, _ := rp.Config["to"].(string)
	var units any = int64(1)
	if ch.Charm.Meta.Subordinate {
		units = int64(0)
	}
	if u, ok := rp.Config["units"]; ok {
		units = u
	}
	s := snap.Services[rp.Name]
	if s == nil || s.Head == nil {
		inputs["service/"+rp.Name] = "absent"
		rp.Actions = append(rp.Actions, Action{Kind: ActCreateService, Service: rp.Name, Charm: ch.Path,
			CharmSHA256: ch.Digest, Count: units, To: to, Config: settings})
		rp.planned = map[string]any{
			"name": rp.Name, "charm": ch.Charm.Meta.Name, "charm_revision": Unknown{}, "charm_sha256": ch.Digest,
			"revision": Unknown{}, "life": "alive", "config": wantConfig(ch.Charm.Config, settings), "units": Unknown{},
		}
		return
	}
	rp.Exists = true
	rp.State = serviceState(s)
	defer func() {
		if len(rp.Actions) == 0 {
			return
		}
		rp.planned = maps.Clone(rp.State)
		for _, a := range rp.Actions {
			switch a.Kind {
			case ActRefreshCharm:
				rp.planned["charm"] = ch.Charm.Meta.Name
				rp.planned["charm_sha256"] = ch.Digest
				rp.planned["charm_revision"] = Unknown{}
				rp.planned["config"] = wantConfig(ch.Charm.Config, settings)
				rp.planned["revision"] = Unknown{}
			case ActSetConfig:
				rp.planned["config"] = wantConfig(ch.Charm.Config, settings)
				rp.planned["revision"] = Unknown{}
			case ActAddUnits, ActRemoveUnits:
				rp.planned["units"] = Unknown{}
			}
		}
	}()
	inputs["service/"+rp.Name] = serviceDigest(rp.State)
	spec := s.Head.GetSpec()
	if have := spec.GetCharm().GetSha256(); have != ch.Digest {
		rp.Actions = append(rp.Actions, Action{Kind: ActRefreshCharm, Service: rp.Name, Charm: ch.Path,
			CharmSHA256: ch.Digest, OldCharmSHA256: have, OldCharm: spec.GetCharm().GetName(),
			SwitchCharm: spec.GetCharm().GetName() != ch.Charm.Meta.Name})
	}
	if changes := configChanges(ch.Charm.Config, settings, spec.GetConfig()); len(changes) > 0 {
		rp.Actions = append(rp.Actions, Action{Kind: ActSetConfig, Service: rp.Name, Changes: changes})
	}
	if !ch.Charm.Meta.Subordinate {
		have := principals(s.Status)
		switch want, ok := units.(int64); {
		case !ok:
			rp.Actions = append(rp.Actions, Action{Kind: ActAddUnits, Service: rp.Name, Count: units, To: to})
		case want > int64(len(have)):
			rp.Actions = append(rp.Actions, Action{Kind: ActAddUnits, Service: rp.Name, Count: want - int64(len(have)), To: to})
		case want < int64(len(have)):
			var gone []string
			for _, u := range have[want:] {
				gone = append(gone, u.Name)
			}
			rp.Actions = append(rp.Actions, Action{Kind: ActRemoveUnits, Service: rp.Name, Count: int64(len(gone)), Units: gone})
		}
	}
}

// wantConfig is a service's complete configuration as a manifest wants it:
// its settings over the charm's defaults.
func wantConfig(opts *charm.Config, settings map[string]any) map[string]any {
	out := map[string]any{}
	for k, opt := range opts.Options {
		if v, ok := settings[k]; ok {
			out[k] = v
		} else if opt.Default != nil {
			out[k] = opt.Default
		}
	}
	return out
}

// configChanges compares the settings a manifest gives (an option it does
// not name is wanted at its default) with a service's complete
// configuration, and returns the keys that differ, sorted.
func configChanges(opts *charm.Config, settings map[string]any, have map[string]*pb.ConfigValue) []Change {
	var out []Change
	for _, key := range sortedKeys(opts.Options) {
		opt := opts.Options[key]
		want, set := settings[key]
		if !set {
			want = opt.Default
		}
		var old any
		if v, ok := have[key]; ok {
			old = charm.ConfigValueOf(v)
		}
		if _, unknown := want.(Unknown); !unknown && sameValue(opt.Type, want, old) {
			continue
		}
		out = append(out, Change{Key: key, Old: old, New: want})
	}
	return out
}

// sameValue compares two values of an option of type typ: an integer
// wanted for a float option is its float.
func sameValue(typ string, a, b any) bool {
	if typ == charm.TypeFloat {
		if i, ok := a.(int64); ok {
			a = float64(i)
		}
		if i, ok := b.(int64); ok {
			b = float64(i)
		}
	}
	return a == b
}

// planRelation looks for the relation among the model's alive ones.
func planRelation(rp *ResourcePlan, snap *Snapshot) {
	eps, _ := rp.Config["endpoints"].([]any)
	var specs []string
	for _, e := range eps {
		s, ok := e.(string)
		if !ok {
			break // unknown until a dependency is applied
		}
		specs = append(specs, s)
	}
	if len(specs) == 2 {
		for _, rel := range snap.Relations {
			if rel.Life == "alive" && len(rel.Endpoints) == 2 &&
				((endpointIs(specs[0], rel.Endpoints[0]) && endpointIs(specs[1], rel.Endpoints[1])) ||
					(endpointIs(specs[0], rel.Endpoints[1]) && endpointIs(specs[1], rel.Endpoints[0]))) {
				rp.Exists = true
				rp.State = map[string]any{"id": rel.Id, "key": rel.Key, "scope": rel.Scope, "endpoints": []any{
					rel.Endpoints[0].Service + ":" + rel.Endpoints[0].Endpoint,
					rel.Endpoints[1].Service + ":" + rel.Endpoints[1].Endpoint,
				}}
				return
			}
		}
	}
	rp.Actions = append(rp.Actions, Action{Kind: ActAddRelation, Endpoints: eps})
	rp.planned = map[string]any{"id": Unknown{}, "key": Unknown{}, "scope": Unknown{}, "endpoints": Unknown{}}
}

// endpointIs says whether "service" or "service:endpoint" names ep; the
// implicit endpoint answers to either of its names (juju-info,
// lifeline-info), as the controller's relation rules have it.
func endpointIs(spec string, ep *pb.RelationEndpointStatus) bool {
	svc, name, named := strings.Cut(spec, ":")
	info := ep.Role == "provider" && charm.IsInfoName(ep.Endpoint) && charm.IsInfoName(ep.Interface) && charm.IsInfoName(name)
	return svc == ep.Service && (!named || name == ep.Endpoint || info)
}

// planMachines plans a machine resource: its machines are the alive ones
// the manifest owns for it (apply records them, docs/MANIFESTS.md,
// Ownership); fewer than count are added to. More are left: machines are
// removed by pruning the resource, not by lowering its count.
func (c *Checked) planMachines(rp *ResourcePlan, snap *Snapshot) {
	count, ok := rp.Config["count"]
	if !ok {
		count = int64(1)
	}
	manual, _ := rp.Config["manual"].(bool)
	ids := []any{}
	for _, m := range snap.Machines {
		if m.Life == "alive" && m.Owner.GetManifest() == c.Manifest.Name && m.Owner.GetResource() == rp.Name {
			ids = append(ids, m.Id)
		}
	}
	if len(ids) > 0 {
		rp.Exists = true
		rp.State = map[string]any{"machines": ids}
	}
	switch n, known := count.(int64); {
	case !known:
		rp.Actions = append(rp.Actions, Action{Kind: ActAddMachines, Count: count, Manual: manual})
	case n > int64(len(ids)):
		rp.Actions = append(rp.Actions, Action{Kind: ActAddMachines, Count: n - int64(len(ids)), Manual: manual})
	default:
		return
	}
	rp.planned = map[string]any{"machines": Unknown{}}
}

// planPlugin asks a plugin for its resource's state. A configuration
// still holding unknown values is not sent: its state is asked for once
// its dependencies are applied.
func (c *Checked) planPlugin(ctx context.Context, r *Resource, rp *ResourcePlan, inputs map[string]string) error {
	if hasUnknown(rp.Config) {
		rp.Actions = append(rp.Actions, Action{Kind: ActPluginState})
		return nil
	}
	st, err := c.plugins.State(ctx, r, rp.Config)
	if err != nil {
		return err
	}
	inputs["plugin/"+rp.Name] = digest(st)
	if st.Valid {
		rp.Exists = true
		rp.State = st.State
		return nil
	}
	rp.Exists = st.StaleState != nil
	rp.State = st.StaleState
	for _, a := range st.Actions {
		rp.Actions = append(rp.Actions, Action{Kind: ActPlugin, Plugin: &a})
	}
	if len(st.Actions) == 0 {
		return fmt.Errorf("the plugin says STALE and gives no action")
	}
	return nil
}

// hasUnknown says whether v holds an Unknown value.
func hasUnknown(v any) bool {
	switch x := v.(type) {
	case Unknown:
		return true
	case map[string]any:
		for _, e := range x {
			if hasUnknown(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(x, hasUnknown)
	}
	return false
}

func relationsDigest(rels []*pb.RelationStatus) string {
	var keys []string
	for _, r := range rels {
		keys = append(keys, fmt.Sprintf("%d %s %s", r.Id, r.Key, r.Life))
	}
	slices.Sort(keys)
	return digest(keys)
}

func machinesDigest(ms []*pb.MachineStatus) string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.Id+" "+m.Life)
	}
	slices.Sort(ids)
	return digest(ids)
}

// serviceDigest digests what a plan uses of a service: all of its state
// but its units' statuses, which change as they settle without changing
// what the plan does.
func serviceDigest(state map[string]any) string {
	stable := make(map[string]any, len(state))
	for k, v := range state {
		stable[k] = v
	}
	var units []any
	for _, u := range state["units"].([]any) {
		u := u.(map[string]any)
		units = append(units, []any{u["name"], u["address"], u["machine"]})
	}
	stable["units"] = units
	delete(stable, "life")
	return digest(stable)
}
