package plugin

import (
	"testing"
)

// FuzzDecodeState checks that any answer is either refused with a field
// error or decoded into a response that keeps the protocol's rules.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{
		`{"status": "VALID", "state": {"a": 1}}`,
		`{"status": "STALE", "staleState": {"a": 1}, "actions": [{"name": "x", "args": ["1", "2"], "image": "i", "entrypoint": "e"}]}`,
		`{"status": "VALID", "state": {}, "actions": []}`,
		`{"status": "STALE", "actions": [{"description": "d"}]}`,
		`{"status": "STALE", "actions": null}`,
		`[]`, `null`, ``, `{"status": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeState(data)
		if err != nil {
			if _, ok := err.(*fieldError); !ok {
				t.Fatalf("decodeState(%q) = %T %v, want a *fieldError", data, err, err)
			}
			return
		}
		switch r.Status {
		case StatusValid:
			if r.State == nil || r.Actions != nil || r.StaleState != nil {
				t.Fatalf("decodeState(%q) = %+v: VALID must have a state and nothing else", data, r)
			}
		case StatusStale:
			if r.State != nil || len(r.Actions) == 0 || len(r.Actions) > MaxActions {
				t.Fatalf("decodeState(%q) = %+v: STALE must have 1..%d actions and no state", data, r, MaxActions)
			}
			for _, a := range r.Actions {
				if a.Name == "" || len(a.Args) > MaxArgs {
					t.Fatalf("decodeState(%q): action %+v breaks the bounds", data, a)
				}
			}
		default:
			t.Fatalf("decodeState(%q) = status %q", data, r.Status)
		}
	})
}

// FuzzDecodeInit checks that any init answer is either refused with a
// field error or decoded with a state action and bounded plugs.
func FuzzDecodeInit(f *testing.F) {
	for _, s := range []string{
		`{"state_action": {"args": ["state"]}}`,
		`{"config_schema": {"type": "object"}, "plugs": {"a": {"container_path": "/a", "optional": true, "writable": true}}, "state_action": {}}`,
		`{"plugs": {"a-b": {}, "a_b": {}}, "state_action": {}}`,
		`{"config_schema": true, "state_action": {"image": "x"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeInit(data)
		if err != nil {
			if _, ok := err.(*fieldError); !ok {
				t.Fatalf("decodeInit(%q) = %T %v, want a *fieldError", data, err, err)
			}
			return
		}
		if r.StateActionSpec.Name == "" || len(r.Plugs) > MaxPlugs {
			t.Fatalf("decodeInit(%q) = %+v", data, r)
		}
		for name := range r.Plugs {
			if !plugNameRE.MatchString(name) {
				t.Fatalf("decodeInit(%q): plug name %q", data, name)
			}
		}
		_, _ = compileSchema(r.ConfigSchema)
	})
}
