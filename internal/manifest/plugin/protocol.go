package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The statuses a state action answers with.
const (
	StatusValid = "VALID"
	StatusStale = "STALE"
)

// Bounds on what a plugin may answer. Its stdout is bounded by MaxOutput
// before any of these apply.
const (
	// MaxOutput bounds a plugin's stdout for init and state, in bytes.
	MaxOutput = 1 << 20
	// MaxInput bounds the JSON a plugin is sent on stdin, in bytes.
	MaxInput = 1 << 20
	// MaxStderrTail is how much of the end of a plugin's stderr an error
	// keeps.
	MaxStderrTail = 4 << 10
	// MaxActions bounds the actions one state answer may list.
	MaxActions = 64
	// MaxArgs bounds an action's arguments.
	MaxArgs = 64
	// MaxArgLen bounds one argument, an entrypoint or an image, in bytes.
	MaxArgLen = 4 << 10
	// MaxNameLen bounds an action's or a plug's name, in bytes.
	MaxNameLen = 128
	// MaxDescriptionLen bounds an action's description, in bytes.
	MaxDescriptionLen = 1 << 10
	// MaxPlugs bounds the plugs a plugin may declare.
	MaxPlugs = 32
)

// InitResponse is a plugin's answer to init.
type InitResponse struct {
	// ConfigSchema is the JSON Schema a resource's config must match; nil
	// when the plugin gave none (any config is accepted). Init has checked
	// that it compiles.
	ConfigSchema json.RawMessage
	// Plugs are the plugs the plugin declared, by name.
	Plugs map[string]PlugSpec
	// StateAction is the state action's command line as a person reads
	// it ("dns-record state"), for plans and logs. StateActionSpec is what
	// runs.
	StateAction string
	// StateActionSpec is how the state action runs: an Action whose Image,
	// Entrypoint and Args come from the answer's state_action, named
	// "state".
	StateActionSpec Action

	plugin   string // the Program's Path, for errors
	resource string // the resource's name, for errors
	schema   *compiledSchema
}

// PlugSpec is a plug as a plugin declares it in its init answer.
type PlugSpec struct {
	// ContainerPath is where a Deployster container would see the plug.
	// Lifeline mounts nothing; it is kept for messages and for plugins
	// that want it.
	ContainerPath string
	// Optional is true when the plugin runs without the plug.
	Optional bool
	// Writable is true when the plugin writes to the plug.
	Writable bool
}

// StateResponse is a plugin's answer to its state action.
type StateResponse struct {
	// Status is StatusValid or StatusStale.
	Status string
	// State is the resource's state; set when VALID.
	State map[string]any
	// StaleState is the resource's current state when STALE; nil when the
	// plugin gave none (the resource does not exist).
	StaleState map[string]any
	// Actions are what would make the resource VALID, in order; at least
	// one when STALE, none when VALID.
	Actions []Action
}

// Action is one step of a plugin: a run of Image (a program relative to
// the plugin's directory; the plugin's own program when empty) with
// Entrypoint, when not empty, and then Args as its arguments.
type Action struct {
	Name, Description, Entrypoint, Image string
	Args                                 []string
}

// String is the action's command line as a person reads it: the program's
// base name, then its arguments.
func (a Action) String() string {
	return a.commandLine("")
}

func (a Action) commandLine(program string) string {
	parts := []string{}
	switch {
	case a.Image != "":
		parts = append(parts, a.Image)
	case program != "":
		parts = append(parts, program)
	}
	if a.Entrypoint != "" {
		parts = append(parts, a.Entrypoint)
	}
	for _, s := range a.Args {
		if s == "" || strings.ContainsAny(s, " \t\n\"'\\$") {
			s = strconv.Quote(s)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// The kinds of failure. Every error the package returns wraps exactly one
// of these, inside an *Error naming the plugin.
var (
	// ErrProtocol: the plugin's answer breaks the protocol (malformed
	// JSON, a missing, unknown or mistyped field, output over MaxOutput).
	ErrProtocol = errors.New("protocol violation")
	// ErrFailed: the plugin exited non-zero or was killed by a signal.
	ErrFailed = errors.New("failed")
	// ErrTimeout: the plugin ran past its timeout; its process group was
	// killed.
	ErrTimeout = errors.New("timed out")
	// ErrNotRunnable: the program is missing, a directory or not
	// executable.
	ErrNotRunnable = errors.New("not runnable")
	// ErrPlug: a plug the plugin requires is not given, one given is not
	// declared or not a readable path, one declared writable is given
	// read-only, or the plugin wrote to a plug it was given read-only.
	ErrPlug = errors.New("plug refused")
	// ErrInvalidConfig: a resource's config does not match the plugin's
	// schema, or cannot be sent as JSON.
	ErrInvalidConfig = errors.New("invalid config")
)

// Error is a failure of a plugin. Its message is one line: the plugin, the
// resource, the step, the field when there is one, what is wrong and, for a
// failed or timed-out run, the last line of its stderr.
type Error struct {
	// Plugin is the program as the Program names it (its Path).
	Plugin string
	// Resource is the resource's name in the manifest.
	Resource string
	// Step is "init", "state", "action NAME" or "config".
	Step string
	// Field is the protocol field at fault ("actions", "actions[1].args"),
	// or a place in the config ("/ttl"); "" when none is.
	Field string
	// Err wraps one of the package's Err… kinds.
	Err error
	// Stderr is the end of the plugin's stderr (at most MaxStderrTail
	// bytes), when it ran.
	Stderr string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s: resource %q: %s: ", e.Plugin, e.Resource, e.Step)
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(oneLine(e.Err.Error()))
	if last := lastLine(e.Stderr); last != "" && (errors.Is(e.Err, ErrFailed) || errors.Is(e.Err, ErrTimeout) || errors.Is(e.Err, ErrProtocol)) {
		fmt.Fprintf(&b, " (stderr: %s)", last)
	}
	return b.String()
}

// Unwrap returns the kind of failure.
func (e *Error) Unwrap() error { return e.Err }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// lastLine is the last non-blank line of s, at most 200 bytes of it.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, " \t\r\n"), "\n")
	l := oneLine(lines[len(lines)-1])
	if len(l) > 200 {
		l = l[:200] + "…"
	}
	return l
}

// fieldError is a protocol violation at a field, before it is put in an
// *Error.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.msg }

func violation(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// plugNameRE is what a plug's name may be: the Deployster schema's rule.
var plugNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)

// splitObject decodes out as one JSON object and refuses keys outside
// known, naming the first unknown one in sorted order.
func splitObject(data []byte, field string, known ...string) (map[string]json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		what := "nothing"
		if len(data) > 0 {
			what = describeJSON(data)
		}
		if field == "" {
			return nil, violation(field, "want a JSON object on stdout, got %s", what)
		}
		return nil, violation(field, "want an object, got %s", what)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, violation(field, "malformed JSON: %v", err)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, violation(join(field, unknown[0]), "unknown field (known: %s)", strings.Join(known, ", "))
	}
	return m, nil
}

// describeJSON names the kind of a JSON value for a message, from its
// first byte.
func describeJSON(data []byte) string {
	switch data[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return "text that is not JSON"
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func present(m map[string]json.RawMessage, key string) bool {
	v, ok := m[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func decodeString(raw json.RawMessage, field string, maxLen int) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", violation(field, "want a string, got %s", describeJSON(bytes.TrimSpace(raw)))
	}
	if len(s) > maxLen {
		return "", violation(field, "%d bytes, over the %d-byte limit", len(s), maxLen)
	}
	return s, nil
}

func decodeBool(raw json.RawMessage, field string) (bool, error) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, violation(field, "want a boolean, got %s", describeJSON(bytes.TrimSpace(raw)))
	}
	return b, nil
}

func decodeObject(raw json.RawMessage, field string) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, violation(field, "want an object, got %s", describeJSON(raw))
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, violation(field, "malformed JSON: %v", err)
	}
	return m, nil
}

// decodeAction decodes one action: the state action of an init answer
// (named by the caller) or an entry of a state answer's actions, which must
// have a name.
func decodeAction(raw json.RawMessage, field string, needName bool) (Action, error) {
	m, err := splitObject(raw, field, "name", "description", "entrypoint", "image", "args")
	if err != nil {
		return Action{}, err
	}
	var a Action
	strs := []struct {
		key string
		dst *string
		max int
	}{
		{"name", &a.Name, MaxNameLen},
		{"description", &a.Description, MaxDescriptionLen},
		{"entrypoint", &a.Entrypoint, MaxArgLen},
		{"image", &a.Image, MaxArgLen},
	}
	for _, s := range strs {
		if !present(m, s.key) {
			continue
		}
		if *s.dst, err = decodeString(m[s.key], join(field, s.key), s.max); err != nil {
			return Action{}, err
		}
	}
	if needName && a.Name == "" {
		return Action{}, violation(join(field, "name"), "required: an action needs a name")
	}
	if present(m, "args") {
		f := join(field, "args")
		var list []json.RawMessage
		if err := json.Unmarshal(m["args"], &list); err != nil {
			return Action{}, violation(f, "want an array of strings, got %s", describeJSON(bytes.TrimSpace(m["args"])))
		}
		if len(list) > MaxArgs {
			return Action{}, violation(f, "%d arguments, over the limit of %d", len(list), MaxArgs)
		}
		for i, r := range list {
			s, err := decodeString(r, fmt.Sprintf("%s[%d]", f, i), MaxArgLen)
			if err != nil {
				return Action{}, err
			}
			a.Args = append(a.Args, s)
		}
	}
	for _, s := range append([]string{a.Entrypoint, a.Image}, a.Args...) {
		if strings.ContainsRune(s, 0) {
			return Action{}, violation(field, "a NUL byte in an argument")
		}
	}
	return a, nil
}

// decodeInit checks and decodes an init answer. The schema is compiled by
// the caller.
func decodeInit(out []byte) (*InitResponse, error) {
	m, err := splitObject(out, "", "config_schema", "plugs", "state_action")
	if err != nil {
		return nil, err
	}
	r := &InitResponse{}
	if present(m, "config_schema") {
		raw := bytes.TrimSpace(m["config_schema"])
		if raw[0] != '{' && raw[0] != 't' && raw[0] != 'f' {
			return nil, violation("config_schema", "want a JSON Schema (an object or a boolean), got %s", describeJSON(raw))
		}
		r.ConfigSchema = slices.Clone(raw)
	}
	r.Plugs = map[string]PlugSpec{}
	if present(m, "plugs") {
		plugs, err := splitObjectAny(m["plugs"], "plugs")
		if err != nil {
			return nil, err
		}
		if len(plugs) > MaxPlugs {
			return nil, violation("plugs", "%d plugs, over the limit of %d", len(plugs), MaxPlugs)
		}
		envs := map[string]string{}
		for _, name := range sortedKeys(plugs) {
			f := "plugs." + name
			if len(name) > MaxNameLen || !plugNameRE.MatchString(name) {
				return nil, violation(f, "a plug's name is a letter, then letters, digits, '_' or '-', at most %d bytes", MaxNameLen)
			}
			if other, ok := envs[PlugEnv(name)]; ok {
				return nil, violation(f, "plugs %q and %q would share the variable %s", other, name, PlugEnv(name))
			}
			envs[PlugEnv(name)] = name
			pm, err := splitObject(plugs[name], f, "container_path", "optional", "writable")
			if err != nil {
				return nil, err
			}
			var spec PlugSpec
			if present(pm, "container_path") {
				if spec.ContainerPath, err = decodeString(pm["container_path"], f+".container_path", MaxArgLen); err != nil {
					return nil, err
				}
			}
			if present(pm, "optional") {
				if spec.Optional, err = decodeBool(pm["optional"], f+".optional"); err != nil {
					return nil, err
				}
			}
			if present(pm, "writable") {
				if spec.Writable, err = decodeBool(pm["writable"], f+".writable"); err != nil {
					return nil, err
				}
			}
			r.Plugs[name] = spec
		}
	}
	if !present(m, "state_action") {
		return nil, violation("state_action", "required: how to run the state action")
	}
	if r.StateActionSpec, err = decodeAction(m["state_action"], "state_action", false); err != nil {
		return nil, err
	}
	if r.StateActionSpec.Name == "" {
		r.StateActionSpec.Name = "state"
	}
	return r, nil
}

func splitObjectAny(raw json.RawMessage, field string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, violation(field, "want an object, got %s", describeJSON(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, violation(field, "malformed JSON: %v", err)
	}
	return m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decodeState checks and decodes a state answer: VALID with a state and
// nothing else, or STALE with at least one action and maybe a staleState.
func decodeState(out []byte) (*StateResponse, error) {
	m, err := splitObject(out, "", "status", "state", "staleState", "actions")
	if err != nil {
		return nil, err
	}
	if !present(m, "status") {
		return nil, violation("status", "required: VALID or STALE")
	}
	r := &StateResponse{}
	if r.Status, err = decodeString(m["status"], "status", MaxNameLen); err != nil {
		return nil, err
	}
	switch r.Status {
	case StatusValid:
		if _, ok := m["actions"]; ok {
			return nil, violation("actions", "forbidden when status is VALID")
		}
		if _, ok := m["staleState"]; ok {
			return nil, violation("staleState", "forbidden when status is VALID")
		}
		if !present(m, "state") {
			return nil, violation("state", "required when status is VALID")
		}
		if r.State, err = decodeObject(m["state"], "state"); err != nil {
			return nil, err
		}
	case StatusStale:
		if _, ok := m["state"]; ok {
			return nil, violation("state", "forbidden when status is STALE (the current state goes in staleState)")
		}
		if present(m, "staleState") {
			if r.StaleState, err = decodeObject(m["staleState"], "staleState"); err != nil {
				return nil, err
			}
		}
		if !present(m, "actions") {
			return nil, violation("actions", "required when status is STALE")
		}
		var list []json.RawMessage
		if err := json.Unmarshal(m["actions"], &list); err != nil {
			return nil, violation("actions", "want an array of actions, got %s", describeJSON(bytes.TrimSpace(m["actions"])))
		}
		if len(list) == 0 {
			return nil, violation("actions", "empty: a STALE resource needs at least one action")
		}
		if len(list) > MaxActions {
			return nil, violation("actions", "%d actions, over the limit of %d", len(list), MaxActions)
		}
		for i, raw := range list {
			a, err := decodeAction(raw, fmt.Sprintf("actions[%d]", i), true)
			if err != nil {
				return nil, err
			}
			r.Actions = append(r.Actions, a)
		}
	default:
		return nil, violation("status", "want VALID or STALE, got %q", r.Status)
	}
	return r, nil
}
