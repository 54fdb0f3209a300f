package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const recordSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["name", "address"],
  "properties": {
    "name": {"type": "string", "pattern": "^[a-z0-9-]+$"},
    "address": {"type": "string", "format": "ipv4"},
    "ttl": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string"}}
  }
}`

// schemaPlugin answers init with recordSchema and marks each state run.
func schemaPlugin(t *testing.T) (*Program, string) {
	t.Helper()
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `
if [ "$1" = state ]; then touch ran; echo '{"status": "VALID", "state": {}}'; exit 0; fi
cat <<'JSON'
{"config_schema": `+recordSchema+`, "state_action": {"args": ["state"]}}
JSON
`)}
	return p, filepath.Join(dir, "ran")
}

func TestValidateListsEveryError(t *testing.T) {
	p, ran := schemaPlugin(t)
	r, err := p.Init(context.Background(), "www", "exec:./dns")
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if !strings.Contains(string(r.ConfigSchema), `"additionalProperties"`) {
		t.Errorf("ConfigSchema = %s, want the plugin's schema", r.ConfigSchema)
	}
	if errs := r.Validate(map[string]any{"name": "www", "address": "10.0.0.1", "ttl": 60, "tags": []any{"a"}}); errs != nil {
		t.Errorf("Validate(good) = %v, want none", errs)
	}
	config := map[string]any{"name": "WWW", "address": "not-an-ip", "ttl": "60", "tags": []any{"a", 2}, "owner": "me"}
	errs := r.Validate(config)
	wantFields := []string{"config/address", "config/name", "config/owner", "config/tags/1", "config/ttl"}
	if len(errs) != len(wantFields) {
		t.Fatalf("Validate = %v, want %d errors at %v", errs, len(wantFields), wantFields)
	}
	for i, err := range errs {
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrInvalidConfig) || e.Field != wantFields[i] || e.Resource != "www" || e.Plugin != p.Path {
			t.Errorf("Validate error %d = %v (%+v), want ErrInvalidConfig at %s", i, err, e, wantFields[i])
		}
	}
	if errs := r.Validate(map[string]any{}); len(errs) != 2 || !strings.Contains(errs[0].Error(), `"config/address": invalid config: required`) {
		t.Errorf("Validate(empty) = %v, want address and name required", errs)
	}

	_, err = p.State(context.Background(), "www", "exec:./dns", config)
	if !errors.Is(err, ErrInvalidConfig) || strings.Count(err.Error(), ";") != len(wantFields)-1 {
		t.Fatalf("State(bad config) = %v, want ErrInvalidConfig listing %d violations", err, len(wantFields))
	}
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("State ran the plugin with a config its schema refuses")
	}
}

func TestValidateWithoutSchema(t *testing.T) {
	p := &Program{Path: script(t, t.TempDir(), "p", `echo '{"state_action": {}}'`)}
	r, err := p.Init(context.Background(), "res", "t")
	if err != nil {
		t.Fatal(err)
	}
	if r.ConfigSchema != nil {
		t.Errorf("ConfigSchema = %s, want nil", r.ConfigSchema)
	}
	if errs := r.Validate(map[string]any{"anything": []any{1, "x"}}); errs != nil {
		t.Errorf("Validate = %v, want none without a schema", errs)
	}
}

func TestConfigNotJSON(t *testing.T) {
	p, _ := schemaPlugin(t)
	_, err := p.State(context.Background(), "www", "t", map[string]any{"name": make(chan int)})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("State = %v, want ErrInvalidConfig", err)
	}
}
