package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/internal/jinja"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Unknown is a configuration value not known until a dependency is
// applied: a template that read a dependency's state while that state is
// yet to be made. A plan shows it as "(known after apply)".
type Unknown struct{}

func (Unknown) String() string { return "(known after apply)" }

// MarshalJSON writes an unknown value as an object no manifest value can
// be mistaken for, so that a saved plan keeps it apart from text.
func (Unknown) MarshalJSON() ([]byte, error) { return []byte(`{"known_after_apply":true}`), nil }

// Dep is one dependency as a resource's templates see it, under its local
// name: {name, type, state}. State is what the dependency is once applied,
// as far as the plan knows it: values that apply makes (a new unit's
// address, a revision's number) are Unknown in it. Known false says none
// of it is known (a plugin's resource that is STALE). A template reading
// an unknown value renders as Unknown.
type Dep struct {
	Name  string
	Type  string
	State map[string]any
	Known bool
}

// Context is what a resource's templates may name: the variables, and its
// dependencies by their local names.
type Context struct {
	Vars map[string]any
	Deps map[string]Dep
}

// wholeRE matches a value that is one expression and nothing else: its
// result keeps its type ("{{ replicas }}" is an integer).
var wholeRE = regexp.MustCompile(`^\s*\{\{-?(.*?)-?\}\}\s*$`)

// hasTemplate says whether s holds Jinja markup.
func hasTemplate(s string) bool {
	return strings.Contains(s, "{{") || strings.Contains(s, "{%") || strings.Contains(s, "{#")
}

// Render renders every string in config that holds a template, and returns
// a copy: a value that is one expression keeps the expression's type; one
// that read an unknown dependency state is Unknown. Errors name the field
// under prefix ("resources.web.config").
func Render(config map[string]any, ctx Context, prefix string) (map[string]any, []string) {
	var errs []string
	out := renderValue(config, ctx, prefix, &errs).(map[string]any)
	return out, errs
}

func renderValue(v any, ctx Context, field string, errs *[]string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			out[k] = renderValue(x[k], ctx, field+"."+k, errs)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = renderValue(e, ctx, fmt.Sprintf("%s[%d]", field, i), errs)
		}
		return out
	case string:
		if !hasTemplate(x) {
			return x
		}
		r, err := renderString(x, ctx)
		if err != nil {
			*errs = append(*errs, field+": "+err.Error())
			return nil
		}
		return r
	}
	return v
}

// renderString renders one string. A whole-value expression is rendered
// through tojson and decoded, so that it keeps its type.
func renderString(s string, ctx Context) (any, error) {
	whole := false
	if m := wholeRE.FindStringSubmatch(s); m != nil && !strings.Contains(m[1], "}}") && !strings.Contains(m[1], "{{") {
		whole = true
		s = "{{ (" + m[1] + ") | tojson }}"
	}
	mk := &marks{}
	vars := make(map[string]any, len(ctx.Vars)+len(ctx.Deps))
	maps.Copy(vars, ctx.Vars)
	for local, d := range ctx.Deps {
		vars[local] = &depValue{dep: d, marks: mk}
	}
	out, err := execute(s, vars)
	if mk.touched || (err != nil && mk.partial) {
		// Whatever the template did with an unknown value (an error
		// included: it may have tried to loop over it), its result is
		// not known until the dependency is applied.
		return Unknown{}, nil
	}
	if err != nil {
		return nil, err
	}
	if !whole {
		return out, nil
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("render: the expression gives no value: %v", err)
	}
	return fromJSON(v), nil
}

// fromJSON turns decoded numbers back into int64 or float64.
func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = fromJSON(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromJSON(e)
		}
	}
	return v
}

// marks are what one rendering did with values not known yet: touched
// one (its result is unknown), or read into a container holding some
// (an error then may come from the unknown part, so it is unknown too).
type marks struct{ touched, partial bool }

// depValue is a dependency in a template's context.
type depValue struct {
	dep   Dep
	marks *marks
}

func (d *depValue) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "name":
		return exec.AsValue(d.dep.Name), true
	case "type":
		return exec.AsValue(d.dep.Type), true
	case "state":
		if !d.dep.Known {
			d.marks.touched = true
			return exec.AsValue(&unknownValue{marks: d.marks}), true
		}
		return exec.AsValue(wrap(d.dep.State, d.marks)), true
	}
	return exec.AsValue(nil), false
}

func (d *depValue) GetItem(key any) (*exec.Value, bool) {
	if s, ok := key.(string); ok {
		return d.GetAttribute(s)
	}
	return exec.AsValue(nil), false
}

// wrap gives a template a state's value: an Unknown as an unknownValue,
// a map or list holding one as a container that marks the rendering
// when it is read, anything else as it is.
func wrap(v any, m *marks) any {
	if _, ok := v.(Unknown); ok {
		m.touched = true
		return &unknownValue{marks: m}
	}
	if !hasUnknown(v) {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		return &partialMap{m: x, marks: m}
	case []any:
		return &partialList{l: x, marks: m}
	}
	return v
}

// partialMap is a map of a state holding values not known yet.
type partialMap struct {
	m     map[string]any
	marks *marks
}

func (p *partialMap) GetAttribute(name string) (*exec.Value, bool) {
	p.marks.partial = true
	v, ok := p.m[name]
	if !ok {
		return exec.AsValue(nil), false
	}
	return exec.AsValue(wrap(v, p.marks)), true
}

func (p *partialMap) GetItem(key any) (*exec.Value, bool) {
	if s, ok := key.(string); ok {
		return p.GetAttribute(s)
	}
	p.marks.partial = true
	return exec.AsValue(nil), false
}

func (p *partialMap) MarshalJSON() ([]byte, error) {
	p.marks.touched = true
	return []byte("null"), nil
}

// partialList is a list of a state holding values not known yet.
type partialList struct {
	l     []any
	marks *marks
}

func (p *partialList) GetAttribute(string) (*exec.Value, bool) {
	p.marks.partial = true
	return exec.AsValue(nil), false
}

func (p *partialList) GetItem(key any) (*exec.Value, bool) {
	p.marks.partial = true
	i, ok := key.(int)
	if !ok || i < 0 || i >= len(p.l) {
		return exec.AsValue(nil), false
	}
	return exec.AsValue(wrap(p.l[i], p.marks)), true
}

func (p *partialList) MarshalJSON() ([]byte, error) {
	p.marks.touched = true
	return []byte("null"), nil
}

// unknownValue is an unknown value in a template: every attribute and
// item of it is unknown too.
type unknownValue struct{ marks *marks }

func (u *unknownValue) GetAttribute(string) (*exec.Value, bool) {
	u.marks.touched = true
	return exec.AsValue(u), true
}

func (u *unknownValue) GetItem(any) (*exec.Value, bool) {
	u.marks.touched = true
	return exec.AsValue(u), true
}

func (u *unknownValue) String() string {
	u.marks.touched = true
	return Unknown{}.String()
}

func (u *unknownValue) MarshalJSON() ([]byte, error) {
	u.marks.touched = true
	return []byte("null"), nil
}

// execute renders src with vars in the sandbox package jinja describes:
// strict undefined names (a misspelt variable is an error, not empty
// text), no file access, its output and range() bounded. Errors are one
// line.
func execute(src string, vars map[string]any) (string, error) {
	return jinja.Render(src, vars, jinja.Options{Whose: "a manifest's template"})
}
