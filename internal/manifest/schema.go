package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// MaxUnits bounds a service resource's units, and MaxMachines a machine
// resource's count.
const (
	MaxUnits    = 10000
	MaxMachines = 1000
)

// The built-in types' schemas (JSON Schema, draft 2020-12). A service's
// config property is completed with its charm's options (charmSchema).
var builtinSchemas = map[string]string{
	TypeMachine: `{
		"type": "object", "additionalProperties": false,
		"properties": {
			"count": {"type": "integer", "minimum": 1, "maximum": 1000},
			"manual": {"type": "boolean"}
		}
	}`,
	TypeService: `{
		"type": "object", "additionalProperties": false, "required": ["charm"],
		"properties": {
			"charm": {"type": "string", "minLength": 1},
			"units": {"type": "integer", "minimum": 0, "maximum": 10000},
			"to": {"type": "string", "pattern": "^(0|[1-9][0-9]{0,18})$"},
			"config": {"type": "object"}
		}
	}`,
	TypeRelation: `{
		"type": "object", "additionalProperties": false, "required": ["endpoints"],
		"properties": {
			"endpoints": {
				"type": "array", "minItems": 2, "maxItems": 2,
				"items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,62}(:[a-z][a-z0-9_-]{0,62})?$"}
			}
		}
	}`,
}

// compileSchema compiles a schema given as a JSON document; it may refer
// to its own parts but never load a file or URL.
func compileSchema(id string, doc []byte) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(doc)))
	if err != nil {
		return nil, fmt.Errorf("invalid schema: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	url := "urn:lifeline:manifest:" + id
	if err := c.AddResource(url, v); err != nil {
		return nil, fmt.Errorf("invalid schema: %s", oneLine(err.Error()))
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("invalid schema: %s", oneLine(err.Error()))
	}
	return sch, nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema may not refer to %s: only to its own parts", url)
}

// charmSchema is a service resource's schema for a charm: the built-in
// service schema with config's properties the charm's options, typed as
// config.yaml types them, and no others.
func charmSchema(c *charm.Charm) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal([]byte(builtinSchemas[TypeService]), &doc); err != nil {
		return nil, err
	}
	props := map[string]any{}
	for name, opt := range c.Config.Options {
		t := map[string]string{
			charm.TypeString: "string", charm.TypeInt: "integer",
			charm.TypeFloat: "number", charm.TypeBoolean: "boolean",
		}[opt.Type]
		props[name] = map[string]any{"type": t}
	}
	doc["properties"].(map[string]any)["config"] = map[string]any{
		"type": "object", "additionalProperties": false, "properties": props,
	}
	return json.Marshal(doc)
}

// validate checks a rendered configuration against a schema and returns
// every violation, each naming field (prefix and the place in the config).
// Violations at or under a place holding an Unknown value are not
// reported: the value will be checked once it is known.
func validate(sch *jsonschema.Schema, config map[string]any, prefix string) []string {
	inst, unknown := toInstance(config, nil)
	err := sch.Validate(inst)
	if err == nil {
		return nil
	}
	vs, ok := charm.SchemaViolations(err)
	if !ok {
		return []string{prefix + ": " + oneLine(err.Error())}
	}
	var out []string
	for _, v := range vs {
		if under(v.At, unknown) {
			continue
		}
		out = append(out, strings.Join(append([]string{prefix}, v.At...), ".")+": "+v.Msg)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// toInstance turns a configuration into what the validator takes (numbers
// as json.Number), and lists the places of its Unknown values.
func toInstance(v any, loc []string) (any, [][]string) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		var unknown [][]string
		for _, k := range slices.Sorted(maps.Keys(x)) {
			e, u := toInstance(x[k], append(slices.Clone(loc), k))
			out[k] = e
			unknown = append(unknown, u...)
		}
		return out, unknown
	case []any:
		out := make([]any, len(x))
		var unknown [][]string
		for i, e := range x {
			v, u := toInstance(e, append(slices.Clone(loc), strconv.Itoa(i)))
			out[i] = v
			unknown = append(unknown, u...)
		}
		return out, unknown
	case Unknown:
		return nil, [][]string{loc}
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), nil
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
	}
	return v, nil
}

// under says whether loc is at or under one of the places.
func under(loc []string, places [][]string) bool {
	for _, p := range places {
		if len(loc) >= len(p) && slices.Equal(loc[:len(p)], p) {
			return true
		}
	}
	return false
}
