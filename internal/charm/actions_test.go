package charm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sameCharm compares charms as reflect.DeepEqual would, but their actions
// by what actions.yaml says (ActionSpec without its compiled schema).
func sameCharm(a, b *Charm) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Actions, y.Actions = nil, nil
	return reflect.DeepEqual(x, y) && reflect.DeepEqual(specsOf(a.Actions), specsOf(b.Actions))
}

// specsOf returns the actions' specs without their compiled schemas.
func specsOf(a *Actions) map[string]ActionSpec {
	if a == nil {
		return nil
	}
	out := make(map[string]ActionSpec, len(a.Specs))
	for name, s := range a.Specs {
		s.schema = nil
		out[name] = s
	}
	return out
}

// spec builds an ActionSpec with the defaults, params and required set.
func spec(params map[string]any, required ...any) ActionSpec {
	if params == nil {
		params = map[string]any{}
	}
	s := ActionSpec{
		Approvers: []string{ApproverAdmin}, Timeout: time.Hour, PauseGrace: 30 * time.Second,
		Schema: map[string]any{"type": "object", "properties": params, "additionalProperties": true},
	}
	if len(required) > 0 {
		s.Schema["required"] = required
	}
	return s
}

func TestParseActions(t *testing.T) {
	full := spec(map[string]any{
		"name":     map[string]any{"type": "string", "pattern": "^[a-z0-9-]+$"},
		"compress": map[string]any{"type": "boolean", "default": false},
		"level":    map[string]any{"type": "integer", "minimum": json.Number("1"), "default": json.Number("6")},
		"ratio":    map[string]any{"type": "number", "default": json.Number("0.5")},
		"any":      true,
	}, "name")
	full.Description = "take a backup"
	full.Approvers = []string{"alice", ApproverOperator}
	full.Timeout = 10 * time.Minute
	full.PauseGrace = 0
	full.MaxParallel = 2
	full.Parallel = true
	full.Schema["additionalProperties"] = false
	safe := spec(nil)
	safe.Safe, safe.Approvers = true, nil
	schemaExtra := spec(nil)
	schemaExtra.Schema["additionalProperties"] = map[string]any{"type": "string"}

	tests := []struct {
		name  string
		yaml  string
		specs map[string]ActionSpec
	}{
		{"empty", "", map[string]ActionSpec{}},
		{"null", "~\n", map[string]ActionSpec{}},
		{"defaults", "keys:\n", map[string]ActionSpec{"keys": spec(nil)}},
		{"empty mapping", "keys: {}\n", map[string]ActionSpec{"keys": spec(nil)}},
		{"safe", "keys: {safe: true}\n", map[string]ActionSpec{"keys": safe}},
		{"every key", `
backup:
  description: take a backup
  params:
    name: {type: string, pattern: "^[a-z0-9-]+$"}
    compress: {type: boolean, default: false}
    level: {type: integer, minimum: 1, default: 6}
    ratio: {type: number, default: 0.50}
    any: true
  required: [name]
  additionalProperties: false
  parallel: true
  safe: false
  approvers: [alice, "@operator"]
  timeout: 10m
  max-parallel: 2
  pause-grace: 0s
  execution-group: ignored
  title: ignored too
`, map[string]ActionSpec{"backup": full}},
		{"additionalProperties a schema", "x:\n  additionalProperties: {type: string}\n", map[string]ActionSpec{"x": schemaExtra}},
		{"null values are absent", "x: {description: ~, params: ~, timeout: ~, approvers: ~}\n", map[string]ActionSpec{"x": spec(nil)}},
		{"anchors", "a: &s {params: {n: {type: integer}}}\nb: *s\n", map[string]ActionSpec{
			"a": spec(map[string]any{"n": map[string]any{"type": "integer"}}),
			"b": spec(map[string]any{"n": map[string]any{"type": "integer"}}),
		}},
		{"digits kept", "x:\n  params:\n    n: {type: integer, maximum: 99999999999999999999}\n", map[string]ActionSpec{
			"x": spec(map[string]any{"n": map[string]any{"type": "integer", "maximum": json.Number("99999999999999999999")}}),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseActions([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParseActions(%q) = %v, want no error", tt.yaml, err)
			}
			if got := specsOf(a); !reflect.DeepEqual(got, tt.specs) {
				t.Errorf("ParseActions(%q) = %#v, want %#v", tt.yaml, got, tt.specs)
			}
			for name, s := range a.Specs {
				if s.schema == nil {
					t.Errorf("ParseActions(%q): %s has no compiled schema", tt.yaml, name)
				}
			}
		})
	}
}

func TestParseActionsErrors(t *testing.T) {
	many := strings.Builder{}
	for i := range MaxActions + 1 {
		many.WriteString("a" + strings.Repeat("b", i) + ": {}\n")
	}
	big := "x:\n  params:\n    p: {type: string, description: " + strings.Repeat("d", MaxParamsSchemaSize) + "}\n"
	tests := []struct{ name, yaml, err string }{
		{"not a mapping", "- a\n", "actions.yaml: want a mapping, got a list"},
		{"malformed", "a: [\n", "actions.yaml: invalid yaml: line 1: did not find expected node content"},
		{"duplicate action", "a: {}\na: {}\n", "actions.yaml: a: key appears twice"},
		{"too many", many.String(), "actions.yaml: 65 actions, over the limit of 64"},
		{"name uppercase", "Backup: {}\n", `actions.yaml: action name "Backup" is invalid: use lowercase letters, digits and -, starting with a letter, at most 63 characters`},
		{"name digit first", "1x: {}\n", `action name "1x" is invalid`},
		{"name trailing hyphen", "x-: {}\n", `action name "x-" is invalid`},
		{"name underscore", "a_b: {}\n", `action name "a_b" is invalid`},
		{"name too long", strings.Repeat("a", 64) + ": {}\n", "is invalid"},
		{"action a list", "a: [x]\n", "actions.yaml: a: want a mapping, got a list"},
		{"description a list", "a: {description: [x]}\n", "actions.yaml: a.description: want text, got a list"},
		{"parallel text", "a: {parallel: yes}\n", `actions.yaml: a.parallel: want true or false, got "yes"`},
		{"safe quoted", "a: {safe: \"true\"}\n", `actions.yaml: a.safe: want true or false, got "true"`},
		{"timeout a number", "a: {timeout: 60}\n", `actions.yaml: a.timeout: want a duration such as 30s, 10m or 1h30m, got "60"`},
		{"timeout bad", "a: {timeout: 1 hour}\n", `actions.yaml: a.timeout: want a duration such as 30s, 10m or 1h30m, got "1 hour"`},
		{"timeout zero", "a: {timeout: 0s}\n", "actions.yaml: a.timeout: want a positive duration, got 0s"},
		{"timeout negative", "a: {timeout: -1m}\n", "actions.yaml: a.timeout: want a positive duration, got -1m"},
		{"pause-grace negative", "a: {pause-grace: -1s}\n", "actions.yaml: a.pause-grace: want a positive duration, got -1s"},
		{"pause-grace over timeout", "a: {timeout: 10s, pause-grace: 1m}\n", "actions.yaml: a.pause-grace: 1m0s is longer than the action's timeout, 10s"},
		{"max-parallel zero", "a: {max-parallel: 0}\n", "actions.yaml: a.max-parallel: want an integer from 1 to 2147483647 (omit it for no limit), got 0"},
		{"max-parallel huge", "a: {max-parallel: 3000000000}\n", "a.max-parallel: want an integer from 1 to 2147483647"},
		{"max-parallel text", "a: {max-parallel: all}\n", `actions.yaml: a.max-parallel: want an integer, got "all"`},
		{"approvers text", "a: {approvers: alice}\n", `actions.yaml: a.approvers: want a list, got "alice"`},
		{"approvers empty", "a: {approvers: []}\n", "actions.yaml: a.approvers: no approvers: omit the key for any admin"},
		{"approver invalid", "a: {approvers: [Alice]}\n", `actions.yaml: a.approvers: "Alice" is neither a user name nor @admin or @operator`},
		{"approver group unknown", "a: {approvers: [\"@root\"]}\n", `a.approvers: "@root" is neither a user name nor @admin or @operator`},
		{"approver twice", "a: {approvers: [bob, bob]}\n", `actions.yaml: a.approvers: "bob" appears twice`},
		{"approver a number", "a: {approvers: [1]}\n", `actions.yaml: a.approvers: want a list of names, got "1" in it`},
		{"approvers of a safe action", "a: {safe: true, approvers: [bob]}\n", "actions.yaml: a.approvers: a safe action needs no approval: remove approvers or safe"},
		{"params a list", "a: {params: [x]}\n", "actions.yaml: a.params: want a mapping, got a list"},
		{"param name invalid", "a: {params: {\"x y\": {}}}\n", `actions.yaml: a.params: parameter name "x y" is invalid`},
		{"param name dotted", "a: {params: {x.y: {}}}\n", `parameter name "x.y" is invalid`},
		{"param schema text", "a: {params: {x: string}}\n", `actions.yaml: a.params.x: want a schema (a mapping), got "string"`},
		{"param schema invalid", "a: {params: {x: {type: strin}}}\n", "actions.yaml: a: invalid parameters schema: params.x.type: value must be one of"},
		{"param schema minimum text", "a: {params: {x: {minimum: one}}}\n", "actions.yaml: a: invalid parameters schema: params.x.minimum: want number, got string"},
		{"param pattern invalid", "a: {params: {x: {type: string, pattern: \"(\"}}}\n", "actions.yaml: a: invalid parameters schema: params.x.pattern: '(' is not valid regex"},
		{"param schema non-JSON value", "a: {params: {x: {default: .inf}}}\n", `actions.yaml: a.params.x.default: ".inf" (!!float) is not a JSON value`},
		{"param schema binary", "a: {params: {x: {default: !!binary aGk=}}}\n", `(!!binary) is not a JSON value`},
		{"external reference", "a: {params: {x: {$ref: \"file:///etc/passwd\"}}}\n", "actions.yaml: a: invalid parameters schema: failing loading \"file:///etc/passwd\": a schema may not refer to file:///etc/passwd"},
		{"remote reference", "a: {params: {x: {$ref: \"https://example.com/s.json\"}}}\n", "a schema may not refer to https://example.com/s.json"},
		{"default of the wrong type", "a: {params: {x: {type: integer, default: x}}}\n", "actions.yaml: a.params.x.default: want integer, got string"},
		{"default out of range", "a: {params: {x: {type: integer, maximum: 3, default: 4}}}\n", "actions.yaml: a.params.x.default: maximum: got 4, want 3"},
		{"schema too large", big, "actions.yaml: a.params: the parameters' schema is"},
		{"required text", "a: {params: {x: {}}, required: x}\n", `actions.yaml: a.required: want a list, got "x"`},
		{"required unknown", "a: {params: {x: {}}, required: [y]}\n", `actions.yaml: a.required: "y" is not a parameter of the action`},
		{"required twice", "a: {params: {x: {}}, required: [x, x]}\n", `actions.yaml: a.required: "x" appears twice`},
		{"additionalProperties text", "a: {additionalProperties: no}\n", `actions.yaml: a.additionalProperties: want true, false or a schema (a mapping), got "no"`},
		{"merge key", "base: &b {safe: true}\na:\n  <<: *b\n", "actions.yaml: a: merge keys (<<) are not supported"},
		{"nested too deep", "a: {params: {x: " + strings.Repeat("{a: ", 70) + "1" + strings.Repeat("}", 70) + "}}\n", "nested more than 64 deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "schema too large" {
				tt.err = strings.Replace(tt.err, "a.params", "x.params", 1)
			}
			_, err := ParseActions([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("ParseActions(%.80q) = %v, want one line matching ErrInvalid with %q", tt.yaml, err, tt.err)
			}
		})
	}
}

// backupActions is an actions.yaml with parameters of several kinds.
const backupActions = `
backup:
  params:
    name: {type: string, pattern: "^[a-z0-9-]+$"}
    compress: {type: boolean, default: false}
    level: {type: integer, minimum: 1, maximum: 9, default: 6}
    tags: {type: array, items: {type: string}, default: [daily]}
    target:
      type: object
      properties:
        dir: {type: string, default: /backups}
        keep: {type: integer}
      required: [keep]
    mode: {enum: [full, incremental]}
    when: {anyOf: [{type: string, format: date-time}, {type: integer}]}
  required: [name]
  additionalProperties: false
keys: {safe: true}
`

func TestActionsValidate(t *testing.T) {
	a, err := ParseActions([]byte(backupActions))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		action string
		params map[string]any
		want   map[string]any
		err    string
	}{
		{"defaults applied", "backup", map[string]any{"name": "nightly"}, map[string]any{
			"name": "nightly", "compress": false, "level": json.Number("6"), "tags": []any{"daily"},
		}, ""},
		{"values kept", "backup", map[string]any{"name": "n", "compress": true, "level": 9, "tags": []any{}, "mode": "full"}, map[string]any{
			"name": "n", "compress": true, "level": json.Number("9"), "tags": []any{}, "mode": "full",
		}, ""},
		{"nested defaults", "backup", map[string]any{"name": "n", "target": map[string]any{"keep": int64(3)}}, map[string]any{
			"name": "n", "compress": false, "level": json.Number("6"), "tags": []any{"daily"},
			"target": map[string]any{"keep": json.Number("3"), "dir": "/backups"},
		}, ""},
		{"numbers in one form", "backup", map[string]any{"name": "n", "level": 2.0, "when": json.Number("1.0e3")}, map[string]any{
			"name": "n", "compress": false, "level": json.Number("2"), "tags": []any{"daily"}, "when": json.Number("1000"),
		}, ""},
		{"no parameters", "keys", nil, map[string]any{}, ""},
		{"extra allowed by default", "keys", map[string]any{"x": "y"}, map[string]any{"x": "y"}, ""},
		{"every violation", "backup", map[string]any{
			"compress": "yes", "level": 0, "tags": []any{"a", 1}, "target": map[string]any{"dir": 5},
			"mode": "some", "when": "yesterday", "extra": 1,
		}, nil, `backup: parameter "compress": want boolean, got string; parameter "extra" is not allowed; ` +
			`parameter "level": minimum: got 0, want 1; parameter "mode": value must be one of 'full', 'incremental'; ` +
			`parameter "name" is required; parameter "tags.1": want string, got number; parameter "target.dir": want string, got number; ` +
			`parameter "target.keep" is required; parameter "when": 'yesterday' is not valid date-time: ` +
			`less than 20 characters long, or parameter "when": want integer, got string`},
		{"pattern", "backup", map[string]any{"name": "Bad Name"}, nil, `backup: parameter "name": want text matching ^[a-z0-9-]+$, got "Bad Name"`},
		{"unknown action", "restore", nil, nil, `unknown action "restore": the charm's actions are backup, keys`},
		{"not JSON", "keys", map[string]any{"f": func() {}}, nil, `keys: "f": a func() is not a JSON value`},
		{"not finite", "keys", map[string]any{"f": []any{1.5, float32(0), json.Number("1e999")}}, nil, `keys: "f.2": 1e999 is out of range`},
		{"not UTF-8", "keys", map[string]any{"s": "\xff"}, nil, `keys: "s": text is not valid UTF-8`},
		{"too large", "keys", map[string]any{"s": strings.Repeat("x", MaxParamsSize)}, nil, "keys: the parameters are 65544 bytes as JSON, over the 64 KiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := CanonicalJSON(tt.params)
			got, err := a.Validate(tt.action, tt.params)
			if after, _ := CanonicalJSON(tt.params); string(after) != string(before) {
				t.Errorf("Validate changed its params: %s, was %s", after, before)
			}
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
					t.Errorf("Validate(%s, %v) = %v, want an invalid error\n%q", tt.action, tt.params, err, tt.err)
				}
				// Violations lists the schema's violations, one each;
				// other errors have none.
				list := Violations(err)
				if schema := strings.Contains(tt.err, "parameter "); schema != (len(list) > 0) ||
					schema && tt.action+": "+strings.Join(list, "; ") != tt.err {
					t.Errorf("Violations(%v) = %q, want the violations of %q", err, list, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Validate(%s, %v) = %#v, %v, want %#v", tt.action, tt.params, got, err, tt.want)
			}
			// The completed parameters are valid as they are, and
			// changing them does not change the schema's defaults.
			again, err := a.Validate(tt.action, got)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("Validate(Validate(%v)) = %#v, %v, want %#v", tt.params, again, err, got)
			}
			if tags, ok := got["tags"].([]any); ok && len(tags) > 0 {
				tags[0] = "changed"
				if fresh, _ := a.Validate(tt.action, map[string]any{"name": "n"}); fresh["tags"].([]any)[0] != "daily" {
					t.Errorf("changing returned parameters changed the default to %v", fresh["tags"])
				}
			}
		})
	}
	var none *Actions
	if _, err := none.Validate("x", nil); err == nil || err.Error() != `unknown action "x": the charm has no actions` {
		t.Errorf("Validate on no actions = %v", err)
	}
	empty, _ := ParseActions(nil)
	if _, err := empty.Validate("x", nil); err == nil || err.Error() != `unknown action "x": the charm has no actions` {
		t.Errorf("Validate on no actions = %v", err)
	}
}

func TestActionsValidateDefaultsBreakingTheSchema(t *testing.T) {
	// A nested default is checked when it is applied: it breaks the
	// object's maxProperties here.
	a, err := ParseActions([]byte(`
x:
  params:
    o:
      type: object
      maxProperties: 1
      properties:
        a: {type: integer}
        b: {type: integer, default: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Validate("x", map[string]any{"o": map[string]any{"b": 2}}); err != nil {
		t.Errorf("Validate(o.b given) = %v, want no error", err)
	}
	_, err = a.Validate("x", map[string]any{"o": map[string]any{"a": 2}})
	if want := `x: the charm's defaults break its schema: parameter "o": maxProperties: got 2, want 1`; err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate(o.a given) = %v, want %q", err, want)
	}
}

func TestReadDirActions(t *testing.T) {
	c, err := ReadDir("testdata/kv")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Actions.Names(); !reflect.DeepEqual(got, []string{"backup"}) {
		t.Errorf("ReadDir(testdata/kv).Actions.Names() = %q, want [backup]", got)
	}
	params, err := c.Actions.Validate("backup", map[string]any{"name": "b1"})
	if err != nil || params["compress"] != false {
		t.Errorf("Validate(backup, name=b1) = %v, %v, want compress defaulting to false", params, err)
	}
	// A charm without actions.yaml has no actions, never nil ones.
	c, err = ReadDir("testdata/logger")
	if err != nil || c.Actions == nil || len(c.Actions.Specs) != 0 || c.Actions.Specs == nil {
		t.Errorf("ReadDir(testdata/logger).Actions = %+v, %v, want none", c.Actions, err)
	}
}

// TestActionsValidateConcurrently validates with one compiled schema from
// several goroutines at once, as the controller does for its requests
// (run it with -race).
func TestActionsValidateConcurrently(t *testing.T) {
	a, err := ParseActions([]byte(backupActions))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			for j := range 50 {
				params := map[string]any{"name": "n", "level": j%9 + 1}
				if i%2 == 1 {
					params["compress"] = "no"
				}
				got, err := a.Validate("backup", params)
				switch {
				case i%2 == 0 && (err != nil || got["tags"].([]any)[0] != "daily"):
					errs <- fmt.Errorf("Validate(%v) = %v, %v", params, got, err)
					return
				case i%2 == 1 && err == nil:
					errs <- fmt.Errorf("Validate(%v) = %v, want an error", params, got)
					return
				}
				if got != nil {
					got["tags"].([]any)[0] = "changed"
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
