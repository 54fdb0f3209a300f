package charm

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxYAMLSize bounds metadata.yaml and config.yaml.
const maxYAMLSize = 1 << 20

// maxAliasDepth bounds chains of YAML aliases (an alias never points at an
// alias, so 1 would do; the bound is only a guard).
const maxAliasDepth = 8

// yamlFile walks one YAML file's node tree by hand, so that every error names
// the file and the field, unknown keys are tolerated and wrong types are not.
type yamlFile struct {
	name string // "metadata.yaml"
	// budget is how many more mapping entries may be visited. It starts at
	// the file's size, which a file without aliases never exceeds, so that
	// aliases cannot make a small file expensive to walk.
	budget int
	// expanded is the file's size with the aliases walked so far written
	// out in full: at most maxYAMLSize, the limit of a file, so that
	// aliases cannot make a small file's values large either (a config.yaml
	// of a few hundred bytes compressed naming one long default a
	// hundred times). sizes keeps each aliased node's size.
	expanded int
	sizes    map[*yaml.Node]int
}

// pair is one entry of a YAML mapping.
type pair struct {
	key   string
	value *yaml.Node
}

// errorf returns an invalid-input error naming the file and, when given, the
// field: "metadata.yaml: requires.db: ...".
func (f *yamlFile) errorf(field, format string, args ...any) error {
	if field == "" {
		return invalidf("%s: %s", f.name, fmt.Sprintf(format, args...))
	}
	return invalidf("%s: %s: %s", f.name, field, fmt.Sprintf(format, args...))
}

// parse returns the file's top-level node, or nil when the file holds no
// document or only null.
func (f *yamlFile) parse(data []byte) (*yaml.Node, error) {
	if len(data) > maxYAMLSize {
		return nil, f.errorf("", "file is over the %s limit", sizeString(maxYAMLSize))
	}
	f.budget = len(data)
	f.expanded = len(data)
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		return nil, f.errorf("", "invalid yaml: %s", strings.ReplaceAll(msg, "\n", "; "))
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	top, err := f.deref("", doc.Content[0])
	if err != nil || isNull(top) {
		return nil, err
	}
	return top, nil
}

// deref follows an alias to the node it names, counting what the alias
// stands for in the file's expanded size.
func (f *yamlFile) deref(field string, n *yaml.Node) (*yaml.Node, error) {
	for range maxAliasDepth {
		if n == nil || n.Kind != yaml.AliasNode {
			return n, nil
		}
		n = n.Alias
		f.expanded += f.size(n, 0)
		if f.expanded > maxYAMLSize {
			return nil, f.errorf(field, "aliases expand the file past the %s limit of a file", sizeString(maxYAMLSize))
		}
	}
	return nil, f.errorf(field, "too many nested aliases")
}

// size is the bytes of text n holds, its aliases written out: more than
// maxYAMLSize is reported as maxYAMLSize+1, so that no nesting of aliases
// overflows the count.
func (f *yamlFile) size(n *yaml.Node, depth int) int {
	if n == nil {
		return 0
	}
	if depth > maxAliasDepth*4 {
		return maxYAMLSize + 1 // deeper than any charm's file: refused
	}
	if got, ok := f.sizes[n]; ok {
		return got
	}
	total := len(n.Value) + len(n.Anchor) + len(n.Tag)
	switch n.Kind {
	case yaml.AliasNode:
		total = f.size(n.Alias, depth+1)
	case yaml.MappingNode, yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			total += f.size(c, depth+1)
			if total > maxYAMLSize {
				break
			}
		}
	}
	total = min(total, maxYAMLSize+1)
	if f.sizes == nil {
		f.sizes = map[*yaml.Node]int{}
	}
	f.sizes[n] = total
	return total
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what a node holds, for error messages.
func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unknown node"
}

// join builds a dotted field path.
func join(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}

// mapping returns the pairs of a mapping node in file order; null gives no
// pairs. Keys must be scalars, unique, and not merge keys ("<<").
func (f *yamlFile) mapping(field string, n *yaml.Node) ([]pair, error) {
	n, err := f.deref(field, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, f.errorf(field, "want a mapping, got %s", describe(n))
	}
	f.budget -= len(n.Content) / 2
	if f.budget < 0 {
		return nil, f.errorf(field, "aliases expand the file too much")
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := f.deref(field, n.Content[i])
		if err != nil {
			return nil, err
		}
		if k == nil || k.Kind != yaml.ScalarNode {
			return nil, f.errorf(field, "want plain keys, got %s", describe(k))
		}
		if k.ShortTag() == "!!merge" {
			return nil, f.errorf(field, "merge keys (<<) are not supported")
		}
		if seen[k.Value] {
			return nil, f.errorf(join(field, k.Value), "key appears twice")
		}
		seen[k.Value] = true
		v, err := f.deref(join(field, k.Value), n.Content[i+1])
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, pair{key: k.Value, value: v})
	}
	return pairs, nil
}

// text returns a scalar's text; null gives "".
func (f *yamlFile) text(field string, n *yaml.Node) (string, error) {
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", f.errorf(field, "want text, got %s", describe(n))
	}
	return n.Value, nil
}

// boolean returns a YAML boolean (true or false, unquoted).
func (f *yamlFile) boolean(field string, n *yaml.Node) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		return false, f.errorf(field, "want true or false, got %s", describe(n))
	}
	return b, nil
}

// integer returns a YAML integer (unquoted).
func (f *yamlFile) integer(field string, n *yaml.Node) (int64, error) {
	var i int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		return 0, f.errorf(field, "want an integer, got %s", describe(n))
	}
	return i, nil
}
