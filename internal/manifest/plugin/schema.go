package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compiledSchema is a plugin's config schema, ready to validate with.
type compiledSchema struct {
	s *jsonschema.Schema
}

// schemaURL is the name a plugin's schema is compiled under; it refers to
// nothing outside itself.
const schemaURL = "lifeline:plugin-config-schema.json"

// noLoader refuses every reference outside the schema: a plugin's schema
// may not make Lifeline read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a config schema may not refer to %s: only to its own parts", url)
}

// compileSchema compiles a config schema (draft 2020-12 unless it says
// otherwise, formats asserted); nil compiles to nothing.
func compileSchema(raw json.RawMessage) (*compiledSchema, error) {
	if raw == nil {
		return nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.AssertFormat()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return &compiledSchema{s: s}, nil
}

// Validate checks a resource's config (templates rendered) against the
// plugin's config schema and returns every violation, sorted, one error
// each; nil when it matches or the plugin gave no schema. Each is an *Error
// wrapping ErrInvalidConfig whose Field is the place in the config, as a
// JSON pointer after "config" ("config/ttl").
func (r *InitResponse) Validate(config map[string]any) []error {
	return r.validate(config, r.resource)
}

func (r *InitResponse) validate(config map[string]any, resource string) []error {
	if r == nil || r.schema == nil {
		return nil
	}
	mk := func(field, msg string) error {
		return &Error{Plugin: r.plugin, Resource: resource, Step: "config", Field: field, Err: fmt.Errorf("%w: %s", ErrInvalidConfig, msg)}
	}
	if config == nil {
		config = map[string]any{}
	}
	b, err := json.Marshal(config)
	if err != nil {
		return []error{mk("config", "not JSON: "+err.Error())}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return []error{mk("config", "not JSON: "+err.Error())}
	}
	err = r.schema.s.Validate(doc)
	if err == nil {
		return nil
	}
	vs, ok := charm.SchemaViolations(err)
	if !ok {
		return []error{mk("config", oneLine(err.Error()))}
	}
	list := make([]violationAt, len(vs))
	for i, v := range vs {
		list[i] = violationAt{pointer(v.At), strings.TrimPrefix(v.Msg, "is ")} // "required", "not allowed"
	}
	slices.SortFunc(list, func(a, b violationAt) int {
		if c := strings.Compare(a.field, b.field); c != 0 {
			return c
		}
		return strings.Compare(a.msg, b.msg)
	})
	list = slices.Compact(list)
	out := make([]error, len(list))
	for i, v := range list {
		out[i] = mk(v.field, v.msg)
	}
	return out
}

type violationAt struct{ field, msg string }

// pointer names a place in the config: "config" and its JSON pointer.
func pointer(loc []string) string {
	var b strings.Builder
	b.WriteString("config")
	for _, s := range loc {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1"))
	}
	return b.String()
}
