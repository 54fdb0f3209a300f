package charm

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

const actionsFile = "actions.yaml"

// Limits on a charm's actions.
const (
	// MaxActions bounds the actions a charm declares.
	MaxActions = 64
	// MaxParamsSchemaSize bounds an action's parameters schema, as JSON.
	MaxParamsSchemaSize = 64 << 10
	// MaxParamsSize bounds an action's parameters, as JSON (CanonicalJSON),
	// before and after the defaults are applied.
	MaxParamsSize = 64 << 10
	// MaxResultsSize bounds a task's results, as JSON (CanonicalJSON).
	MaxResultsSize = 64 << 10
	// maxActionName bounds an action's name.
	maxActionName = 63
)

// The defaults of an action's keys in actions.yaml.
const (
	DefaultActionTimeout = time.Hour
	DefaultPauseGrace    = 30 * time.Second
)

// The groups of users an action's approvers may name beside users.
const (
	ApproverAdmin    = "@admin"
	ApproverOperator = "@operator"
)

// Actions is a charm's actions.yaml. A charm without the file has none.
type Actions struct {
	// Specs maps each action's name to what actions.yaml says of it. It is
	// never nil.
	Specs map[string]ActionSpec
}

// ActionSpec is what actions.yaml says of one action.
type ActionSpec struct {
	Description string
	// Parallel actions run beside the unit's hooks; others between them.
	Parallel bool
	// Safe actions run without an approval.
	Safe bool
	// Approvers are the users who may approve an operation of the action:
	// user names, ApproverAdmin (any admin) or ApproverOperator (any user
	// with the operator role). A safe action has none; an unsafe one at
	// least one, [ApproverAdmin] unless actions.yaml says otherwise.
	Approvers []string
	// Timeout bounds one run of the action on a unit.
	Timeout time.Duration
	// MaxParallel bounds how many of an operation's tasks run at once;
	// 0 means no bound.
	MaxParallel int
	// PauseGrace is how long a paused action has to exit after SIGTERM
	// before it is killed.
	PauseGrace time.Duration
	// Schema is the JSON Schema (draft 2020-12) that the action's
	// parameters satisfy, as a JSON value: {"type": "object",
	// "properties": PARAMS, "required": [...], "additionalProperties":
	// ...}. Numbers in it are json.Number.
	Schema map[string]any

	schema *jsonschema.Schema // Schema compiled
}

// Names returns the actions' names, sorted.
func (a *Actions) Names() []string {
	if a == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(a.Specs))
}

// ValidActionName reports whether name can name an action: lowercase
// letters, digits and "-", starting with a letter and not ending with "-",
// at most 63 characters. An action's executable is actions/NAME.
func ValidActionName(name string) bool {
	if len(name) == 0 || len(name) > maxActionName || !lower(name[0]) || name[len(name)-1] == '-' {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !lower(c) && !digit(c) && c != '-' {
			return false
		}
	}
	return true
}

// validParamName reports whether name can name a parameter: ASCII letters,
// digits, "-" and "_", starting with a letter, at most 63 characters. Each
// is one segment of a KEY=VALUE argument's key (ParseActionParams).
func validParamName(name string) bool {
	return len(name) <= 63 && len(name) > 0 && letter(name[0]) && validKeySegment(name)
}

func lower(c byte) bool  { return 'a' <= c && c <= 'z' }
func digit(c byte) bool  { return '0' <= c && c <= '9' }
func letter(c byte) bool { return lower(c) || 'A' <= c && c <= 'Z' }

// ParseActions parses and validates actions.yaml: each action's keys, and
// its parameters schema compiled. Unknown keys are tolerated; known keys of
// the wrong type are not. That every action has its executable is checked
// when a charm is read (ReadDir, ReadArchive), not here.
func ParseActions(data []byte) (*Actions, error) {
	f := &yamlFile{name: actionsFile}
	a := &Actions{Specs: map[string]ActionSpec{}}
	top, err := f.parse(data)
	if err != nil || top == nil {
		return a, err
	}
	pairs, err := f.mapping("", top)
	if err != nil {
		return nil, err
	}
	if len(pairs) > MaxActions {
		return nil, f.errorf("", "%d actions, over the limit of %d", len(pairs), MaxActions)
	}
	c := newSchemaCompiler()
	for _, p := range pairs {
		if !ValidActionName(p.key) {
			return nil, f.errorf("", "action name %q is invalid: use lowercase letters, digits and -, starting with a letter, at most %d characters", p.key, maxActionName)
		}
		spec, err := parseAction(f, c, p.key, p.value)
		if err != nil {
			return nil, err
		}
		a.Specs[p.key] = spec
	}
	return a, nil
}

// parseAction parses one action of actions.yaml and compiles its schema.
func parseAction(f *yamlFile, c *jsonschema.Compiler, name string, n *yaml.Node) (ActionSpec, error) {
	spec := ActionSpec{Timeout: DefaultActionTimeout, PauseGrace: DefaultPauseGrace}
	pairs, err := f.mapping(name, n)
	if err != nil {
		return spec, err
	}
	params := map[string]any{}
	var required []string
	var additional any = true
	var approvers *yaml.Node
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		field := join(name, p.key)
		switch p.key {
		case "description":
			spec.Description, err = f.text(field, p.value)
		case "parallel":
			spec.Parallel, err = f.boolean(field, p.value)
		case "safe":
			spec.Safe, err = f.boolean(field, p.value)
		case "approvers":
			approvers = p.value
		case "timeout":
			spec.Timeout, err = f.duration(field, p.value, false)
		case "pause-grace":
			spec.PauseGrace, err = f.duration(field, p.value, true)
		case "max-parallel":
			var i int64
			if i, err = f.integer(field, p.value); err == nil && (i < 1 || i > math.MaxInt32) {
				err = f.errorf(field, "want an integer from 1 to %d (omit it for no limit), got %d", math.MaxInt32, i)
			}
			spec.MaxParallel = int(i)
		case "params":
			params, err = parseParams(f, field, p.value)
		case "required":
			required, err = f.names(field, p.value)
		case "additionalProperties":
			additional, err = f.jsonValue(field, p.value, 0)
			if _, ok := additional.(bool); err == nil && !ok && p.value.Kind != yaml.MappingNode {
				err = f.errorf(field, "want true, false or a schema (a mapping), got %s", describe(p.value))
			}
		}
		if err != nil {
			return spec, err
		}
	}
	for _, r := range required {
		if _, ok := params[r]; !ok {
			return spec, f.errorf(join(name, "required"), "%q is not a parameter of the action", r)
		}
	}
	if spec.PauseGrace > spec.Timeout {
		return spec, f.errorf(join(name, "pause-grace"), "%s is longer than the action's timeout, %s", spec.PauseGrace, spec.Timeout)
	}
	if spec.Approvers, err = parseApprovers(f, join(name, "approvers"), approvers, spec.Safe); err != nil {
		return spec, err
	}
	spec.Schema = map[string]any{"type": "object", "properties": params, "additionalProperties": additional}
	if len(required) > 0 {
		req := make([]any, len(required))
		for i, r := range required {
			req[i] = r
		}
		spec.Schema["required"] = req
	}
	if spec.schema, err = compileSchema(f, c, name, spec.Schema); err != nil {
		return spec, err
	}
	return spec, nil
}

// parseParams parses an action's params: parameter name → its JSON Schema.
func parseParams(f *yamlFile, field string, n *yaml.Node) (map[string]any, error) {
	pairs, err := f.mapping(field, n)
	if err != nil {
		return nil, err
	}
	params := make(map[string]any, len(pairs))
	for _, p := range pairs {
		if !validParamName(p.key) {
			return nil, f.errorf(field, "parameter name %q is invalid: use letters, digits, - and _, starting with a letter, at most 63 characters", p.key)
		}
		pf := join(field, p.key)
		if p.value.Kind != yaml.MappingNode && (p.value.Kind != yaml.ScalarNode || p.value.ShortTag() != "!!bool") {
			return nil, f.errorf(pf, "want a schema (a mapping), got %s", describe(p.value))
		}
		if params[p.key], err = f.jsonValue(pf, p.value, 0); err != nil {
			return nil, err
		}
	}
	return params, nil
}

// parseApprovers checks an action's approvers: user names, @admin or
// @operator, each once. A safe action needs none; an unsafe one's default
// is any admin.
func parseApprovers(f *yamlFile, field string, n *yaml.Node, safe bool) ([]string, error) {
	if n == nil {
		if safe {
			return nil, nil
		}
		return []string{ApproverAdmin}, nil
	}
	if safe {
		return nil, f.errorf(field, "a safe action needs no approval: remove approvers or safe")
	}
	list, err := f.names(field, n)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, f.errorf(field, "no approvers: omit the key for any admin")
	}
	for _, a := range list {
		if a != ApproverAdmin && a != ApproverOperator && !names.ValidService(a) {
			return nil, f.errorf(field, "%q is neither a user name nor %s or %s", a, ApproverAdmin, ApproverOperator)
		}
	}
	return list, nil
}

// names returns a list of distinct texts.
func (f *yamlFile) names(field string, n *yaml.Node) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, f.errorf(field, "want a list, got %s", describe(n))
	}
	if f.budget -= len(n.Content); f.budget < 0 {
		return nil, f.errorf(field, "aliases expand the file too much")
	}
	var list []string
	for _, item := range n.Content {
		item, err := f.deref(field, item)
		if err != nil {
			return nil, err
		}
		if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!str" {
			return nil, f.errorf(field, "want a list of names, got %s in it", describe(item))
		}
		if slices.Contains(list, item.Value) {
			return nil, f.errorf(field, "%q appears twice", item.Value)
		}
		list = append(list, item.Value)
	}
	return list, nil
}

// duration returns a Go duration written as text ("30m", "1h30m"): positive,
// or also zero when zero is true.
func (f *yamlFile) duration(field string, n *yaml.Node, zero bool) (time.Duration, error) {
	var d time.Duration
	var err error
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		d, err = time.ParseDuration(n.Value)
	}
	switch {
	case n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" || err != nil:
		return 0, f.errorf(field, "want a duration such as 30s, 10m or 1h30m, got %s", describe(n))
	case d < 0 || d == 0 && !zero:
		return 0, f.errorf(field, "want a positive duration, got %s", n.Value)
	}
	return d, nil
}

// maxJSONDepth bounds the nesting of a schema and of parameters.
const maxJSONDepth = 64

// jsonValue converts a YAML node to a JSON value: map[string]any, []any,
// string, json.Number, bool or nil. Integers and finite floats are numbers;
// timestamps are kept as their text; other tags are refused.
func (f *yamlFile) jsonValue(field string, n *yaml.Node, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, f.errorf(field, "nested more than %d deep", maxJSONDepth)
	}
	n, err := f.deref(field, n)
	if err != nil {
		return nil, err
	}
	switch {
	case isNull(n):
		return nil, nil
	case n.Kind == yaml.MappingNode:
		pairs, err := f.mapping(field, n)
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(pairs))
		for _, p := range pairs {
			if m[p.key], err = f.jsonValue(join(field, p.key), p.value, depth+1); err != nil {
				return nil, err
			}
		}
		return m, nil
	case n.Kind == yaml.SequenceNode:
		if f.budget -= len(n.Content); f.budget < 0 {
			return nil, f.errorf(field, "aliases expand the file too much")
		}
		list := make([]any, len(n.Content))
		for i, item := range n.Content {
			if list[i], err = f.jsonValue(field, item, depth+1); err != nil {
				return nil, err
			}
		}
		return list, nil
	case n.Kind == yaml.ScalarNode:
		v, ok := scalarValue(n)
		if !ok {
			return nil, f.errorf(field, "%s (%s) is not a JSON value", describe(n), n.ShortTag())
		}
		return v, nil
	}
	return nil, f.errorf(field, "want a JSON value, got %s", describe(n))
}

// scalarValue converts a YAML scalar to a JSON value; ok is false for
// non-finite floats and tags JSON has no value for.
func scalarValue(n *yaml.Node) (v any, ok bool) {
	switch n.ShortTag() {
	case "!!str", "!!timestamp":
		return n.Value, true
	case "!!bool":
		var b bool
		return b, n.Decode(&b) == nil
	case "!!null":
		return nil, true
	case "!!int", "!!float":
		if jsonIntRE.MatchString(n.Value) {
			// Digits past what an int64 or float64 holds are kept.
			num, err := jsonNumber(json.Number(n.Value))
			return num, err == nil
		}
		var x any
		if n.Decode(&x) != nil {
			return nil, false
		}
		num, err := jsonNumber(x)
		return num, err == nil
	}
	return nil, false
}

// newSchemaCompiler returns a compiler of draft 2020-12 schemas that loads
// nothing: a schema may refer to its own parts ("#/$defs/x") but never to
// a file or URL. Formats are asserted, as Juju does.
func newSchemaCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	c.AssertFormat()
	return c
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, invalidf("a schema may not refer to %s: only to its own parts", url)
}

// compileSchema compiles an action's schema, checks its size and the
// defaults of its parameters.
func compileSchema(f *yamlFile, c *jsonschema.Compiler, name string, doc map[string]any) (*jsonschema.Schema, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, f.errorf(join(name, "params"), "%v", err)
	}
	if len(b) > MaxParamsSchemaSize {
		return nil, f.errorf(join(name, "params"), "the parameters' schema is %d bytes as JSON, over the %d KiB limit", len(b), MaxParamsSchemaSize>>10)
	}
	url := "urn:lifeline:action:" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, f.errorf(name, "invalid parameters schema: %s", oneLine(err.Error()))
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, f.errorf(name, "invalid parameters schema: %s", schemaError(err))
	}
	for _, p := range slices.Sorted(maps.Keys(sch.Properties)) {
		prop := sch.Properties[p]
		if prop.Default == nil {
			continue
		}
		if err := prop.Validate(*prop.Default); err != nil {
			return nil, f.errorf(join(name, "params."+p+".default"), "%s", describeViolations(err, func(loc []string) string { return strings.Join(loc, ".") }))
		}
	}
	return sch, nil
}

// schemaError describes why a schema does not compile, on one line.
func schemaError(err error) string {
	if sve, ok := err.(*jsonschema.SchemaValidationError); ok {
		return describeViolations(sve.Err, schemaPath)
	}
	return oneLine(err.Error())
}

// schemaPath names a place in an action's schema as actions.yaml writes
// it: "properties/name/type" is "params.name.type".
func schemaPath(loc []string) string {
	if len(loc) == 0 {
		return ""
	}
	if loc[0] == "properties" {
		loc = append([]string{"params"}, loc[1:]...)
	}
	return strings.Join(loc, ".")
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
