package manifest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ExportOptions say how a model is written as a manifest.
type ExportOptions struct {
	// Name is the manifest's name ("export" when empty).
	Name string
	// CharmDir holds the charms' directories, each named as its charm
	// ("kv" → CharmDir/kv): the model keeps a service's charm archive,
	// not the directory it was packed from. Written as given.
	CharmDir string
	// Dir is the directory the manifest is written to: CharmDir is read
	// relative to it when it is relative.
	Dir string
}

// Export reads the model and returns it as a manifest: each alive
// service with its charm's directory (CharmDir/<charm name>), its count
// of alive principal units (none for a subordinate), and the options it
// sets away from the charm's defaults (all of them when the charm's
// directory cannot be read); each alive relation between two services,
// named after them. Peer relations come with their services and machines
// with their units, so neither is written. Planned against the same model
// with the same charms, it has no actions.
func Export(ctx context.Context, model Model, opts ExportOptions) ([]byte, error) {
	name := opts.Name
	if name == "" {
		name = "export"
	}
	st, err := model.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("read the model's status: %w", err)
	}
	var services []string
	for _, s := range st.GetStatus().GetServices() {
		if s.Life == "alive" {
			services = append(services, s.Name)
		}
	}
	snap, err := ReadSnapshot(ctx, model, services)
	if err != nil {
		return nil, err
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	add := func(m *yaml.Node, k string, v any) {
		var vn yaml.Node
		if err := vn.Encode(v); err != nil {
			vn = yaml.Node{Kind: yaml.ScalarNode, Value: fmt.Sprint(v)}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &vn)
	}
	add(root, "name", name)
	resources := &yaml.Node{Kind: yaml.MappingNode}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "resources"}, resources)
	used := map[string]bool{}
	for _, svc := range sortedKeys(snap.Services) {
		s := snap.Services[svc]
		if s.Head == nil {
			continue
		}
		used[svc] = true
		state := serviceState(s)
		charmName, _ := state["charm"].(string)
		dir := filepath.Join(opts.CharmDir, charmName)
		config := map[string]any{"charm": dir}
		if !s.Status.Subordinate {
			config["units"] = len(state["units"].([]any))
		}
		settings := state["config"].(map[string]any)
		readDir := dir
		if !filepath.IsAbs(readDir) {
			readDir = filepath.Join(opts.Dir, readDir)
		}
		if ch, err := charm.ReadDir(readDir); err == nil {
			for k, opt := range ch.Config.Options {
				if v, ok := settings[k]; ok && opt.Default != nil && sameValue(opt.Type, v, opt.Default) {
					delete(settings, k)
				}
			}
		}
		if len(settings) > 0 {
			config["config"] = settings
		}
		r := &yaml.Node{Kind: yaml.MappingNode}
		add(r, "type", TypeService)
		add(r, "config", config)
		add(resources, svc, nil)
		resources.Content[len(resources.Content)-1] = r
	}
	for _, rel := range snap.Relations {
		if rel.Life != "alive" || len(rel.Endpoints) != 2 {
			continue
		}
		var eps []string
		for _, ep := range rel.Endpoints {
			eps = append(eps, ep.Service+":"+ep.Endpoint)
		}
		slices.Sort(eps)
		base := strings.Split(eps[0], ":")[0] + "-" + strings.Split(eps[1], ":")[0]
		rname := base
		for n := 2; used[rname]; n++ {
			rname = fmt.Sprintf("%s-%d", base, n)
		}
		used[rname] = true
		r := &yaml.Node{Kind: yaml.MappingNode}
		add(r, "type", TypeRelation)
		add(r, "config", map[string]any{"endpoints": eps})
		add(resources, rname, nil)
		resources.Content[len(resources.Content)-1] = r
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by ctl export: the model as a manifest (docs/MANIFESTS.md).\n"), out...), nil
}
