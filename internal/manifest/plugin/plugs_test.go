package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plugPlugin declares the plugs in decl; its state action runs body.
func plugPlugin(t *testing.T, decl, body string) string {
	t.Helper()
	return script(t, t.TempDir(), "p", `
if [ "$1" = state ]; then
`+body+`
else
  echo '{"plugs": `+decl+`, "state_action": {"args": ["state"]}}'
fi
`)
}

func TestPlugsHandedOver(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "creds"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Program{
		Path: plugPlugin(t, `{"creds": {"container_path": "/creds"}, "out": {"writable": true}, "cache-dir": {"optional": true}}`, `
echo "$(cat "$LIFELINE_PLUG_CREDS/creds")" > "$LIFELINE_PLUG_OUT/copy"
echo "{\"status\": \"VALID\", \"state\": {\"cache\": \"${LIFELINE_PLUG_CACHE_DIR-unset}\"}}"
`),
		Plugs: map[string]Plug{"creds": {Path: ro}, "out": {Path: rw, Writable: true}},
	}
	s, err := p.State(context.Background(), "res", "t", nil)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	if s.State["cache"] != "unset" {
		t.Errorf("optional plug not given: state %v, want its variable unset", s.State)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "copy")); string(b) != "secret\n" {
		t.Errorf("writable plug holds %q, want what the read-only one held", b)
	}
}

func TestPlugsRefused(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	link := filepath.Join(other, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	file, ref := filepath.Join(other, "file"), filepath.Join(other, "ref")
	for _, f := range []string{file, ref} {
		if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	valid := `echo '{"status": "VALID", "state": {}}'`
	for _, tc := range []struct {
		name, decl string
		plugs      map[string]Plug
		body       string
		want       string
	}{
		{"required not given", `{"creds": {}}`, nil, valid, `plug "creds" is required`},
		{"not declared", `{}`, map[string]Plug{"creds": {Path: dir}}, valid, `plug "creds" is given but the plugin does not declare it`},
		{"writable given read-only", `{"out": {"writable": true}}`, map[string]Plug{"out": {Path: dir}}, valid, `declared writable by the plugin and given read-only`},
		{"path missing", `{"creds": {}}`, map[string]Plug{"creds": {Path: filepath.Join(dir, "nope")}}, valid, `no such file`},
		{"read-only written", `{"creds": {}}`, map[string]Plug{"creds": {Path: dir}}, `touch "$LIFELINE_PLUG_CREDS/new"; ` + valid, `given read-only and the plugin changed it`},
		{"read-only behind a symlink written", `{"creds": {}}`, map[string]Plug{"creds": {Path: link}}, `echo x >> "$LIFELINE_PLUG_CREDS/f"; ` + valid, `given read-only and the plugin changed it`},
		{"read-only rewritten, time set back", `{"creds": {}}`, map[string]Plug{"creds": {Path: file}}, `echo y > "$LIFELINE_PLUG_CREDS"; touch -r ` + ref + ` "$LIFELINE_PLUG_CREDS"; ` + valid, `given read-only and the plugin changed it`},
		{"declared read-only, given writable, written", `{"creds": {}}`, map[string]Plug{"creds": {Path: dir, Writable: true}}, `echo x >> "$LIFELINE_PLUG_CREDS/more"; ` + valid, `given read-only and the plugin changed it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Program{Path: plugPlugin(t, tc.decl, tc.body), Plugs: tc.plugs}
			_, err := p.State(context.Background(), "res", "t", nil)
			if !errors.Is(err, ErrPlug) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("State = %v, want ErrPlug saying %q", err, tc.want)
			}
		})
	}
}

func TestPlugEnv(t *testing.T) {
	for name, want := range map[string]string{"creds": "LIFELINE_PLUG_CREDS", "cache-dir": "LIFELINE_PLUG_CACHE_DIR", "gcp_sa": "LIFELINE_PLUG_GCP_SA"} {
		if got := PlugEnv(name); got != want {
			t.Errorf("PlugEnv(%q) = %q, want %q", name, got, want)
		}
	}
}
