package charm

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// Validate checks an operation's parameters against the action's schema and
// returns them completed: the defaults of absent parameters applied (and of
// absent properties of objects given), numbers as json.Number in the form
// CanonicalJSON writes them. params is not modified; nil is no parameters.
//
// An error matches ErrInvalid and names the action and every violation, on
// one line: `backup: parameter "compress": want boolean, got string;
// parameter "name" is required`. Parameters over MaxParamsSize as JSON, and
// values JSON has no form for, are errors too.
func (a *Actions) Validate(action string, params map[string]any) (map[string]any, error) {
	var spec ActionSpec
	ok := false
	if a != nil {
		spec, ok = a.Specs[action]
	}
	switch {
	case !ok && len(a.Names()) == 0:
		return nil, invalidf("unknown action %q: the charm has no actions", action)
	case !ok:
		return nil, invalidf("unknown action %q: the charm's actions are %s", action, strings.Join(a.Names(), ", "))
	case spec.schema == nil:
		return nil, invalidf("action %q was not read from actions.yaml", action)
	}
	v, err := toJSON(params, "", 0)
	if err != nil {
		return nil, invalidf("%s: %v", action, err)
	}
	obj, _ := v.(map[string]any)
	if obj == nil {
		obj = map[string]any{}
	}
	if err := checkSize(action, "parameters", obj, MaxParamsSize); err != nil {
		return nil, err
	}
	if err := spec.schema.Validate(obj); err != nil {
		list := violationList(err, paramName)
		return nil, &inputError{msg: action + ": " + strings.Join(list, "; "), violations: list}
	}
	applyDefaults(spec.schema, obj, 0)
	if err := checkSize(action, "parameters with their defaults", obj, MaxParamsSize); err != nil {
		return nil, err
	}
	// The defaults of the parameters themselves were checked when
	// actions.yaml was read; those of nested properties are checked here.
	if err := spec.schema.Validate(obj); err != nil {
		return nil, invalidf("%s: the charm's defaults break its schema: %s", action, violations(err))
	}
	return obj, nil
}

func checkSize(action, what string, v any, limit int) error {
	b, err := CanonicalJSON(v)
	if err != nil {
		return invalidf("%s: %v", action, err)
	}
	if len(b) > limit {
		return invalidf("%s: the %s are %d bytes as JSON, over the %d KiB limit", action, what, len(b), limit>>10)
	}
	return nil
}

// applyDefaults sets the defaults of obj's absent properties, and of the
// absent properties of the objects it holds, from sch.
func applyDefaults(sch *jsonschema.Schema, obj map[string]any, depth int) {
	if sch == nil || depth > maxJSONDepth {
		return
	}
	for name, prop := range sch.Properties {
		v, ok := obj[name]
		if !ok {
			for s := prop; s != nil && depth < maxJSONDepth; s, depth = s.Ref, depth+1 {
				if s.Default != nil {
					obj[name] = deepCopy(*s.Default)
					break
				}
			}
			continue
		}
		if m, ok := v.(map[string]any); ok {
			applyDefaults(prop, m, depth+1)
		}
	}
	applyDefaults(sch.Ref, obj, depth+1)
}

// deepCopy copies a JSON value, so that a default applied is not shared with
// the schema.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = deepCopy(x)
		}
		return l
	}
	return v
}

// violations lists every violation a validation found, sorted and joined
// by "; ", naming each parameter by its dotted path: `parameter "a.b"`.
func violations(err error) string {
	return describeViolations(err, paramName)
}

// paramName names a parameter by its place: `parameter "a.b"`.
func paramName(loc []string) string {
	if len(loc) == 0 {
		return "the parameters"
	}
	return "parameter " + strconv.Quote(strings.Join(loc, "."))
}

// describeViolations lists every violation of a validation error, sorted
// and joined by "; ", naming each place with name.
func describeViolations(err error, name func(loc []string) string) string {
	return strings.Join(violationList(err, name), "; ")
}

// violationList is every violation of a validation error, sorted, once
// each, naming each place with name.
func violationList(err error, name func(loc []string) string) []string {
	vs, ok := SchemaViolations(err)
	if !ok {
		return []string{oneLine(err.Error())}
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Describe(name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Violations returns each violation an error of Validate lists, one
// sentence each, without the action's name: what an operation whose
// parameters failed records. It is nil for any other error.
func Violations(err error) []string {
	var ie *inputError
	if errors.As(err, &ie) {
		return slices.Clone(ie.violations)
	}
	return nil
}

// CanonicalJSON encodes a JSON value canonically, for digests: object keys
// sorted, no insignificant whitespace, no HTML escaping, and numbers in one
// form whatever their Go type: an integer as its digits ("3", whether an
// int, a float64 3.0 or a json.Number "3.0"), any other number as
// encoding/json writes a float64 ("1.5", "1e+21"). Values are nil, bool,
// string, json.Number, Go integers and finite floats, map[string]any and
// []any; strings must be valid UTF-8.
func CanonicalJSON(v any) ([]byte, error) {
	n, err := toJSON(v, "", 0)
	if err != nil {
		return nil, invalidf("%v", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n); err != nil {
		return nil, invalidf("%v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// toJSON copies a value into the JSON value types (map[string]any, []any,
// string, json.Number, bool, nil), numbers in their canonical form. path
// names the value in errors.
func toJSON(v any, path string, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, invalidf("%s nested more than %d deep", pathName(path), maxJSONDepth)
	}
	switch v := v.(type) {
	case nil, bool:
		return v, nil
	case string:
		if !utf8.ValidString(v) {
			return nil, invalidf("%s: text is not valid UTF-8", pathName(path))
		}
		return v, nil
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			if !utf8.ValidString(k) {
				return nil, invalidf("%s: a key is not valid UTF-8", pathName(path))
			}
			c, err := toJSON(x, join(path, k), depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = c
		}
		return m, nil
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			c, err := toJSON(x, join(path, strconv.Itoa(i)), depth+1)
			if err != nil {
				return nil, err
			}
			l[i] = c
		}
		return l, nil
	}
	n, err := jsonNumber(v)
	if err != nil {
		return nil, invalidf("%s: %v", pathName(path), err)
	}
	return n, nil
}

func pathName(path string) string {
	if path == "" {
		return "the value"
	}
	return strconv.Quote(path)
}

var (
	jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)
	jsonIntRE    = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
)

// jsonNumber returns a Go number as a json.Number in canonical form.
func jsonNumber(v any) (json.Number, error) {
	switch x := v.(type) {
	case int:
		return json.Number(strconv.FormatInt(int64(x), 10)), nil
	case int8:
		return json.Number(strconv.FormatInt(int64(x), 10)), nil
	case int16:
		return json.Number(strconv.FormatInt(int64(x), 10)), nil
	case int32:
		return json.Number(strconv.FormatInt(int64(x), 10)), nil
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), nil
	case uint:
		return json.Number(strconv.FormatUint(uint64(x), 10)), nil
	case uint8:
		return json.Number(strconv.FormatUint(uint64(x), 10)), nil
	case uint16:
		return json.Number(strconv.FormatUint(uint64(x), 10)), nil
	case uint32:
		return json.Number(strconv.FormatUint(uint64(x), 10)), nil
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), nil
	case float32:
		return floatNumber(float64(x))
	case float64:
		return floatNumber(x)
	case json.Number:
		s := string(x)
		if !jsonNumberRE.MatchString(s) {
			return "", invalidf("%q is not a JSON number", s)
		}
		if jsonIntRE.MatchString(s) {
			if s == "-0" {
				s = "0"
			}
			return json.Number(s), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return "", invalidf("%s is out of range", s)
		}
		return floatNumber(f)
	}
	return "", invalidf("a %T is not a JSON value", v)
}

// floatNumber writes a finite float as encoding/json does, integers without
// a fraction and zero without a sign.
func floatNumber(x float64) (json.Number, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "", invalidf("%v is not a JSON number", x)
	}
	if x == 0 {
		x = 0 // not -0
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", err
	}
	return json.Number(b), nil
}

// validKeySegment reports whether s is one segment of a KEY=VALUE
// argument's dotted key for ctl run: ASCII letters, digits, "-" and "_".
func validKeySegment(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !letter(c) && !digit(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// ParseActionParams parses the KEY=VALUE arguments of `ctl run`: see
// ReadActionParams.
func ParseActionParams(args []string) (map[string]any, error) {
	return ReadActionParams(nil, args)
}

// ReadActionParams reads an operation's parameters: a --params file (YAML
// or JSON, a mapping; nil for none) and KEY=VALUE arguments over it, as
// `juju run` does.
//
// An argument is split at its first "="; a dotted key nests ("a.b=1" is
// {"a": {"b": 1}}), its segments of ASCII letters, digits, "-" and "_". A
// value that is one YAML scalar is typed as YAML 1.2 reads it: "3" is an
// integer, "1.5" a number, "true" a boolean, "null" null, `"3"` (quoted) the
// text 3; anything else, the empty value, lists and mappings included, is
// text as written. (Juju reads YAML 1.1, where "yes" and "y" are booleans;
// here they are text.) A key given twice, or both as a value and as an
// object ("a=1 a.b=2"), is an error; an argument's value replaces the
// file's, merging into the file's objects.
func ReadActionParams(file []byte, args []string) (map[string]any, error) {
	params := map[string]any{}
	if file != nil {
		f := &yamlFile{name: "params file"}
		top, err := f.parse(file)
		if err != nil {
			return nil, err
		}
		if top != nil {
			if top.Kind != yaml.MappingNode {
				return nil, f.errorf("", "want a mapping of parameter names to values, got %s", describe(top))
			}
			v, err := f.jsonValue("", top, 0)
			if err != nil {
				return nil, err
			}
			params = v.(map[string]any)
		}
	}
	given := map[string]bool{} // the keys given, and (false) their prefixes
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, invalidf("argument %q: want KEY=VALUE", arg)
		}
		segs := strings.Split(key, ".")
		for _, s := range segs {
			if !validKeySegment(s) {
				return nil, invalidf("argument %q: key %q is invalid: use letters, digits, - and _, with . between nested keys", arg, key)
			}
		}
		if leaf, seen := given[key]; seen {
			if leaf {
				return nil, invalidf("argument %q: key %q is given twice", arg, key)
			}
			return nil, invalidf("argument %q: key %q is given as an object too", arg, key)
		}
		for i := 1; i < len(segs); i++ {
			prefix := strings.Join(segs[:i], ".")
			if given[prefix] {
				return nil, invalidf("argument %q: key %q is given a value of its own", arg, prefix)
			}
			given[prefix] = false
		}
		given[key] = true
		setPath(params, segs, yamlScalar(value))
	}
	if err := checkSize("params", "parameters", params, MaxParamsSize); err != nil {
		return nil, err
	}
	return params, nil
}

// yamlScalar types a KEY=VALUE argument's value (ReadActionParams).
func yamlScalar(s string) any {
	if s == "" || strings.ContainsAny(s, "\n\r") {
		return s
	}
	var doc yaml.Node
	if yaml.Unmarshal([]byte(s), &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return s
	}
	n := doc.Content[0]
	comments := doc.HeadComment + doc.LineComment + doc.FootComment + n.HeadComment + n.LineComment + n.FootComment
	if n.Kind != yaml.ScalarNode || comments != "" || n.Anchor != "" {
		return s
	}
	v, ok := scalarValue(n)
	if !ok {
		return s
	}
	return v
}

// setPath sets the value at a dotted key's segments in m, making objects
// on the way and replacing what is not one, as Juju does.
func setPath(m map[string]any, segs []string, v any) {
	for _, s := range segs[:len(segs)-1] {
		next, ok := m[s].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[s] = next
		}
		m = next
	}
	m[segs[len(segs)-1]] = v
}

// reservedResults are the result keys Juju keeps for itself.
var reservedResults = []string{"stdout", "stdout-encoding", "stderr", "stderr-encoding"}

// validResultKey reports whether s is one segment of an action-set key:
// lowercase letters, digits and "-", starting and ending with a letter or
// digit (Juju's rule).
func validResultKey(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !lower(c) && !digit(c) && c != '-' {
			return false
		}
	}
	return true
}

// SetActionResults returns a task's results with the KEY=VALUE arguments of
// `action-set` set in them, as Juju's action-set does: a dotted key nests
// ("a.b=1" is {"a": {"b": "1"}}), values stay text, and a later value
// replaces an earlier one (a value by an object too). Key segments are
// lowercase letters, digits and "-", starting and ending with a letter or
// digit; stdout, stderr, stdout-encoding and stderr-encoding are reserved.
// The results are at most MaxResultsSize as JSON. results is not modified.
func SetActionResults(results map[string]any, args []string) (map[string]any, error) {
	out, _ := deepCopy(results).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, invalidf("argument %q: want KEY=VALUE", arg)
		}
		segs := strings.Split(key, ".")
		for _, s := range segs {
			if !validResultKey(s) {
				return nil, invalidf("argument %q: key %q is invalid: use lowercase letters, digits and -, starting and ending with a letter or digit, with . between nested keys", arg, key)
			}
			for _, r := range reservedResults {
				if s == r {
					return nil, invalidf("argument %q: key %q is reserved", arg, s)
				}
			}
		}
		setPath(out, segs, value)
	}
	if err := checkSize("action-set", "results", out, MaxResultsSize); err != nil {
		return nil, err
	}
	return out, nil
}
