package charm

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWarnings(t *testing.T) {
	dir := t.TempDir()
	meta := `name: zabbix-agent
maintainer: someone
series: [focal]
tags: [monitoring]
subordinate: true
requires:
  juju-info:
    interface: juju-info
    scope: container
    optional: true
extra-bindings:
  public:
min-juju-version: 2.9.0
colour: red
`
	for name, content := range map[string]string{"metadata.yaml": meta, "metrics.yaml": "metrics: {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Warnings(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"metadata.yaml: maintainer: descriptive, ignored",
		"metadata.yaml: series: ignored: Lifeline does not check where or on what a charm runs",
		"metadata.yaml: tags: descriptive, ignored",
		"metadata.yaml: requires.juju-info.optional: not supported, ignored",
		"metadata.yaml: extra-bindings: not supported, ignored",
		"metadata.yaml: min-juju-version: ignored: Lifeline does not check where or on what a charm runs",
		"metadata.yaml: colour: unknown, ignored",
		"metrics.yaml: not used by Lifeline",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Warnings() =\n%q\nwant\n%q", got, want)
	}
	// The controller finds the same in the packed charm.
	var buf bytes.Buffer
	if _, err := Pack(dir, &buf); err != nil {
		t.Fatal(err)
	}
	if got, err := ArchiveWarnings(buf.Bytes()); err != nil || !slices.Equal(got, want) {
		t.Errorf("ArchiveWarnings() = %q, %v\nwant\n%q", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte("name: kv\nprovides:\n  server: kv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "metrics.yaml"))
	if got, err := Warnings(dir); err != nil || len(got) != 0 {
		t.Errorf("Warnings() of a plain charm = %q, %v; want none", got, err)
	}
}
