package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseVar parses a --var argument, KEY=VALUE. The value is read as a YAML
// scalar, so that 3 is an integer and true a boolean; quote it ('"3"') for
// text.
func ParseVar(arg string) (string, any, error) {
	k, v, ok := strings.Cut(arg, "=")
	if !ok || k == "" {
		return "", nil, fmt.Errorf("%q: want KEY=VALUE", arg)
	}
	if !identRE.MatchString(k) {
		return "", nil, fmt.Errorf("%q: %q is not a valid variable name: letters, digits and _, not starting with a digit", arg, k)
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(v), &n); err != nil || len(n.Content) == 0 || n.Content[0].Kind != yaml.ScalarNode {
		return k, v, nil // not a scalar: the text as given
	}
	var val any
	if err := n.Content[0].Decode(&val); err != nil {
		return k, v, nil
	}
	out, err := normalize(val, 0)
	if err != nil {
		return k, v, nil
	}
	return k, out, nil
}

// ParseVarFile parses a --var-file: a YAML mapping of variables.
func ParseVarFile(data []byte) (map[string]any, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("over the %d MiB limit", MaxFileSize>>20)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid yaml: %s", oneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if len(doc.Content) == 0 {
		return map[string]any{}, nil
	}
	if countNodes(&doc, 0, map[*yaml.Node]int{}) > maxNodes {
		return nil, fmt.Errorf("over %d YAML nodes with its aliases written out", maxNodes)
	}
	errs := &Errors{}
	p := &yamlWalker{errs: errs}
	out := map[string]any{}
	for _, kv := range p.pairs("", doc.Content[0]) {
		if !identRE.MatchString(kv.key) {
			p.errorf(kv.keyNode, "", "%q is not a valid variable name: letters, digits and _, not starting with a digit", kv.key)
			continue
		}
		out[kv.key] = p.value(kv.key, kv.value)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
