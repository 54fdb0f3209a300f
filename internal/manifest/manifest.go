package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/names"
)

// Bounds of a manifest.
const (
	// MaxFileSize bounds the manifest's file.
	MaxFileSize = 4 << 20
	// MaxResources bounds its resources.
	MaxResources = 10000
	// MaxVariables bounds its variables, and those given beside it.
	MaxVariables = 1000
	// MaxDependencies bounds one resource's dependencies.
	MaxDependencies = 100
	// maxNodes bounds the YAML nodes of the file with its aliases written
	// out, so that aliases cannot make a small file large.
	maxNodes = 1 << 20
	// maxDepth bounds how deeply values nest.
	maxDepth = 32
)

// The built-in resource types; a plugin's type is TypeExecPrefix and the
// program's path.
const (
	TypeMachine    = "machine"
	TypeService    = "service"
	TypeRelation   = "relation"
	TypeExecPrefix = "exec:"
)

// Manifest is a parsed manifest: what should exist, before templating.
type Manifest struct {
	// Name owns what applying the manifest creates (a service name's
	// syntax).
	Name string
	// Dir is the directory relative paths (charms, plugins) resolve
	// against: the manifest's own.
	Dir string
	// Digest is the hex SHA-256 of the file as read.
	Digest string
	// Variables are the file's; Variables given beside it (--var) are
	// merged over them by WithVariables.
	Variables map[string]any
	// Resources by name, and Names, their names in the file's order.
	Resources map[string]*Resource
	Names     []string
}

// Resource is one resource of a manifest.
type Resource struct {
	Name string
	// Type is machine, service, relation or exec:PATH as written; Plugin
	// is, for exec:PATH, the program's path resolved against the
	// manifest's directory.
	Type   string
	Plugin string
	// Dependencies map local names (the names its templates use) to the
	// names of other resources of the manifest.
	Dependencies map[string]string
	// Config is its configuration as written: strings may hold templates.
	Config map[string]any
	// Plugs are the host paths handed to a plugin resource's program, by
	// plug name: paths resolved against the manifest's directory.
	Plugs map[string]Plug
	// Line is where it starts in the file.
	Line int
}

// Plug is a host path handed to a plugin, read-only unless Writable.
type Plug struct {
	Path     string
	Writable bool
}

// MaxPlugs bounds a resource's plugs.
const MaxPlugs = 32

// identRE is what a variable's or a dependency's local name must be: a
// Jinja identifier, so that templates can name it.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Parse parses a manifest's file. dir is the directory relative paths in it
// resolve against. Every problem is listed (an *Errors), each with its line
// and field: unknown keys, wrong types, invalid names, dependencies on
// resources that do not exist, bounds.
func Parse(data []byte, dir string) (*Manifest, error) {
	errs := &Errors{}
	if len(data) > MaxFileSize {
		errs.add("manifest is %d bytes, over the %d MiB limit", len(data), MaxFileSize>>20)
		return nil, errs
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		errs.add("invalid yaml: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil, errs
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		errs.add("a manifest is a mapping with name, variables and resources")
		return nil, errs
	}
	if n := countNodes(&doc, 0, map[*yaml.Node]int{}); n > maxNodes {
		errs.add("manifest has over %d YAML nodes with its aliases written out", maxNodes)
		return nil, errs
	}
	sum := sha256.Sum256(data)
	m := &Manifest{Dir: dir, Digest: hex.EncodeToString(sum[:]), Variables: map[string]any{}, Resources: map[string]*Resource{}}
	p := &yamlWalker{errs: errs}
	for _, kv := range p.pairs("", doc.Content[0]) {
		switch kv.key {
		case "name":
			m.Name = p.text("name", kv.value)
			if m.Name != "" && !names.ValidService(m.Name) {
				p.errorf(kv.value, "name", "%q is not a valid name: lowercase letters, digits and hyphens, starting with a letter", m.Name)
			}
		case "variables":
			vars := p.pairs("variables", kv.value)
			if len(vars) > MaxVariables {
				p.errorf(kv.value, "variables", "%d variables, over the limit of %d", len(vars), MaxVariables)
			}
			for _, v := range vars {
				if !identRE.MatchString(v.key) {
					p.errorf(v.keyNode, "variables", "%q is not a valid variable name: letters, digits and _, not starting with a digit", v.key)
					continue
				}
				m.Variables[v.key] = p.value("variables."+v.key, v.value)
			}
		case "resources":
			rs := p.pairs("resources", kv.value)
			if len(rs) > MaxResources {
				p.errorf(kv.value, "resources", "%d resources, over the limit of %d", len(rs), MaxResources)
				return nil, errs.err()
			}
			for _, r := range rs {
				if res := p.resource(r, dir); res != nil {
					m.Resources[res.Name] = res
					m.Names = append(m.Names, res.Name)
				}
			}
		default:
			p.errorf(kv.keyNode, "", "unknown key %q (want name, variables or resources)", kv.key)
		}
	}
	if m.Name == "" && !p.has(doc.Content[0], "name") {
		errs.add("name is required: it owns what applying the manifest creates")
	}
	for _, name := range m.Names {
		r := m.Resources[name]
		for _, local := range sortedKeys(r.Dependencies) {
			target := r.Dependencies[local]
			if _, ok := m.Resources[target]; !ok {
				errs.add("line %d: resources.%s.dependencies.%s: no resource %q in the manifest", r.Line, name, local, target)
			}
			if _, ok := m.Variables[local]; ok {
				errs.add("line %d: resources.%s.dependencies.%s: the local name is also a variable's: templates could not tell them apart", r.Line, name, local)
			}
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return m, nil
}

// yamlWalker walks a manifest's nodes, collecting problems.
type yamlWalker struct {
	errs *Errors
}

type pair struct {
	key     string
	keyNode *yaml.Node
	value   *yaml.Node
}

func (p *yamlWalker) errorf(n *yaml.Node, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	p.errs.add("line %d: %s", n.Line, msg)
}

// deref follows an alias.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// pairs returns a mapping's entries in file order; null is no entries.
// Keys must be unique strings.
func (p *yamlWalker) pairs(field string, n *yaml.Node) []pair {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "want a mapping")
		return nil
	}
	var out []pair
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind != yaml.ScalarNode || k.Value == "<<" {
			p.errorf(k, field, "keys must be text")
			continue
		}
		if seen[k.Value] {
			p.errorf(k, field, "%q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, pair{key: k.Value, keyNode: k, value: n.Content[i+1]})
	}
	return out
}

// has says whether mapping n has key.
func (p *yamlWalker) has(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// text returns a string scalar.
func (p *yamlWalker) text(field string, n *yaml.Node) string {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errorf(n, field, "want text")
		return ""
	}
	return n.Value
}

// value decodes any value: a scalar, a list or a mapping with text keys.
func (p *yamlWalker) value(field string, n *yaml.Node) any {
	var v any
	if err := n.Decode(&v); err != nil {
		p.errorf(n, field, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	out, err := normalize(v, 0)
	if err != nil {
		p.errorf(n, field, "%v", err)
		return nil
	}
	return out
}

// normalize checks a decoded value: mappings with text keys, depth
// bounded, integers as int64.
func normalize(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("values nest deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			n, err := normalize(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
		return x, nil
	case map[any]any:
		return nil, fmt.Errorf("mapping keys must be text")
	case []any:
		for i, e := range x {
			n, err := normalize(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
		return x, nil
	case int:
		return int64(x), nil
	case uint64:
		return nil, fmt.Errorf("integer %d is out of range", x)
	}
	return v, nil
}

// resource parses one entry of resources.
func (p *yamlWalker) resource(kv pair, dir string) *Resource {
	field := "resources." + kv.key
	if !names.ValidService(kv.key) {
		p.errorf(kv.keyNode, "resources", "%q is not a valid resource name: lowercase letters, digits and hyphens, starting with a letter", kv.key)
		return nil
	}
	r := &Resource{Name: kv.key, Dependencies: map[string]string{}, Config: map[string]any{}, Line: kv.keyNode.Line}
	n := deref(kv.value)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "want a mapping with type, dependencies and config")
		return nil
	}
	for _, e := range p.pairs(field, n) {
		switch e.key {
		case "type":
			r.Type = p.text(field+".type", e.value)
			switch {
			case r.Type == TypeMachine, r.Type == TypeService, r.Type == TypeRelation:
			case strings.HasPrefix(r.Type, TypeExecPrefix) && len(r.Type) > len(TypeExecPrefix):
				r.Plugin = r.Type[len(TypeExecPrefix):]
				if !filepath.IsAbs(r.Plugin) {
					r.Plugin = filepath.Join(dir, r.Plugin)
				}
			case r.Type != "":
				p.errorf(e.value, field+".type", "unknown type %q (want machine, service, relation or exec:PATH)", r.Type)
			}
		case "dependencies":
			deps := p.pairs(field+".dependencies", e.value)
			if len(deps) > MaxDependencies {
				p.errorf(e.value, field+".dependencies", "%d dependencies, over the limit of %d", len(deps), MaxDependencies)
			}
			for _, d := range deps {
				if !identRE.MatchString(d.key) {
					p.errorf(d.keyNode, field+".dependencies", "%q is not a valid local name: letters, digits and _, not starting with a digit", d.key)
					continue
				}
				r.Dependencies[d.key] = p.text(field+".dependencies."+d.key, d.value)
			}
		case "config":
			if isNull(deref(e.value)) {
				continue
			}
			if deref(e.value).Kind != yaml.MappingNode {
				p.errorf(e.value, field+".config", "want a mapping")
				continue
			}
			if c, ok := p.value(field+".config", e.value).(map[string]any); ok {
				r.Config = c
			}
		case "plugs":
			r.Plugs = p.plugs(field+".plugs", e.value, dir)
		default:
			p.errorf(e.keyNode, field, "unknown key %q (want type, dependencies, config or plugs)", e.key)
		}
	}
	if !p.has(n, "type") {
		p.errorf(kv.keyNode, field, "type is required")
	}
	if len(r.Plugs) > 0 && r.Plugin == "" && r.Type != "" {
		p.errorf(kv.keyNode, field+".plugs", "only a plugin's resource (exec:PATH) takes plugs")
	}
	return r
}

// plugs parses a resource's plugs: NAME: {path: PATH, writable: BOOL}.
func (p *yamlWalker) plugs(field string, n *yaml.Node, dir string) map[string]Plug {
	entries := p.pairs(field, n)
	if len(entries) > MaxPlugs {
		p.errorf(n, field, "%d plugs, over the limit of %d", len(entries), MaxPlugs)
		return nil
	}
	out := map[string]Plug{}
	for _, e := range entries {
		f := field + "." + e.key
		var pl Plug
		for _, kv := range p.pairs(f, e.value) {
			switch kv.key {
			case "path":
				pl.Path = p.text(f+".path", kv.value)
			case "writable":
				v := deref(kv.value)
				if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
					p.errorf(v, f+".writable", "want true or false")
					continue
				}
				pl.Writable = v.Value == "true"
			default:
				p.errorf(kv.keyNode, f, "unknown key %q (want path or writable)", kv.key)
			}
		}
		if pl.Path == "" {
			p.errorf(e.keyNode, f, "path is required")
			continue
		}
		if !filepath.IsAbs(pl.Path) {
			pl.Path = filepath.Join(dir, pl.Path)
		}
		out[e.key] = pl
	}
	return out
}

// countNodes counts n's nodes with aliases written out, stopping early
// once past maxNodes.
func countNodes(n *yaml.Node, depth int, memo map[*yaml.Node]int) int {
	if n == nil {
		return 0
	}
	if depth > maxDepth*2 {
		return maxNodes + 1
	}
	if c, ok := memo[n]; ok {
		return c
	}
	total := 1
	if n.Kind == yaml.AliasNode {
		total = countNodes(n.Alias, depth+1, memo)
	}
	for _, c := range n.Content {
		total += countNodes(c, depth+1, memo)
		if total > maxNodes {
			break
		}
	}
	total = min(total, maxNodes+1)
	memo[n] = total
	return total
}

// WithVariables returns the manifest's variables with vars merged over
// them (later sources win), refusing names that are not identifiers, a
// dependency's local name, or too many.
func (m *Manifest) WithVariables(vars ...map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(m.Variables))
	for k, v := range m.Variables {
		out[k] = v
	}
	errs := &Errors{}
	for _, vs := range vars {
		for _, k := range sortedKeys(vs) {
			if !identRE.MatchString(k) {
				errs.add("variable %q: not a valid name: letters, digits and _, not starting with a digit", k)
				continue
			}
			v, err := normalize(vs[k], 0)
			if err != nil {
				errs.add("variable %s: %v", k, err)
				continue
			}
			out[k] = v
		}
	}
	if len(out) > MaxVariables {
		errs.add("%d variables, over the limit of %d", len(out), MaxVariables)
	}
	for _, name := range m.Names {
		r := m.Resources[name]
		for _, local := range sortedKeys(r.Dependencies) {
			if _, ok := out[local]; ok && m.Variables[local] == nil {
				errs.add("variable %s: resources.%s names a dependency %s: templates could not tell them apart", local, name, local)
			}
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return out, nil
}
