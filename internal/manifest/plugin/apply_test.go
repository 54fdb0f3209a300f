package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/manifest/plugin/plugintest"
	"github.com/lifelinehq/lifeline/internal/version"
)

func TestApplyConverges(t *testing.T) {
	data := t.TempDir()
	p := &Program{Path: script(t, t.TempDir(), "good", goodPlugin), Plugs: map[string]Plug{"data": {Path: data, Writable: true}}}
	ctx := context.Background()
	config := map[string]any{"n": 1}
	s, err := p.State(ctx, "res", "t", config)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	v, err := p.Apply(ctx, "res", "t", config, s, func(a Action) { ran = append(ran, a.Name) })
	if err != nil || v.Status != StatusValid || strings.Join(ran, ",") != "make" {
		t.Fatalf("Apply = %+v, %v after %v; want VALID after make", v, err, ran)
	}
	again, err := p.Apply(ctx, "res", "t", config, v, nil)
	if err != nil || again != v {
		t.Errorf("Apply(VALID) = %+v, %v; want the answer back, nothing run", again, err)
	}
}

func TestApplyHaltsWhenStillStale(t *testing.T) {
	path, err := plugintest.WriteStuck(t.TempDir(), "stuck")
	if err != nil {
		t.Fatal(err)
	}
	p := &Program{Path: path}
	ctx := context.Background()
	s, err := p.State(ctx, "broken", "exec:./stuck", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Apply(ctx, "broken", "exec:./stuck", nil, s, nil)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrStillStale) || e.Step != "state after action fix" {
		t.Fatalf("Apply = %v, want ErrStillStale after action fix", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `resource "broken"`) || !strings.Contains(msg, `staleState {"fixed":false}`) {
		t.Errorf("Apply error = %q, want the resource and what is still stale", msg)
	}
}

func TestApplyStopsAtAFailedAction(t *testing.T) {
	p := &Program{Path: script(t, t.TempDir(), "p", `
case "$1" in
"") echo '{"state_action": {"args": ["state"]}}' ;;
state) echo '{"status": "STALE", "actions": [{"name": "a", "args": ["a"]}, {"name": "b", "args": ["b"]}]}' ;;
a) echo "a broke" >&2; exit 1 ;;
b) touch b-ran ;;
esac
`)}
	ctx := context.Background()
	s, err := p.State(ctx, "res", "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Apply(ctx, "res", "t", nil, s, nil)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrFailed) || e.Step != "action a" {
		t.Fatalf("Apply = %v, want action a's failure", err)
	}
	if fileExists(filepath.Join(filepath.Dir(p.Path), "b-ran")) {
		t.Errorf("Apply ran action b after a failed")
	}
}

func TestDefaultVersionSent(t *testing.T) {
	dir := t.TempDir()
	p := &Program{Path: script(t, dir, "p", `cat > stdin.json; echo '{"state_action": {}}'`)}
	if _, err := p.Init(context.Background(), "res", "t"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "stdin.json"))
	if want := `"version":"` + version.Get().Version + `"`; err != nil || !strings.Contains(string(b), want) {
		t.Errorf("init stdin = %s, %v; want %s", b, err, want)
	}
}
