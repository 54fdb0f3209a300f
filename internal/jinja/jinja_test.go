package jinja

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// render renders as host claims do: a trailing newline kept.
func render(src string, vars map[string]any) (string, error) {
	return Render(src, vars, Options{KeepTrailingNewline: true, Whose: "a claim's template"})
}

func TestRender(t *testing.T) {
	vars := map[string]any{
		"config":    map[string]any{"port": int64(8080), "name": "kv", "debug": true},
		"unit_name": "kv/0",
	}
	tests := []struct {
		src, want string
	}{
		{"plain", "plain"},
		{"port={{ config.port }}\n", "port=8080\n"},
		{"{{ unit_name }} {{ config.port + 1 }} {{ config.name | upper }}", "kv/0 8081 KV"},
		{"{% if config.debug %}debug{% endif %}", "debug"},
		{"{% for i in range(3) %}{{ i }}{% endfor %}", "012"},
		{"{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", "531"},
		{"a\n\n", "a\n\n"},
	}
	for _, tt := range tests {
		got, err := render(tt.src, vars)
		if err != nil || got != tt.want {
			t.Errorf("render(%q) = %q, %v, want %q", tt.src, got, err, tt.want)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{"{{ config.nope }}", "render: "},
		{"{{ nope }}", "render: "},
		{"{{", "parse: "},
		{"{% include 'x' %}", "include is not available"},
		{"{% include '/template' %}", "include is not available"},
		{"{% import 'x' as y %}", "import is not available"},
		{"{% extends 'x' %}", "extends is not available"},
		{"{% from 'x' import y %}", "from is not available"},
		{"{{ lipsum() }}", "lipsum is not available"},
		{"{% for i in range(20000) %}{% endfor %}", "more than 10000 items"},
		{"{% for i in range(5000) %}{{ '0123456789abcdef' }}{% endfor %}", "renders to more than 65536 bytes"},
		{"{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "more than 10000 items in one template"},
		{strings.Repeat("x", MaxOutput+1), "renders to more than 65536 bytes"},
		{"{{ '" + strings.Repeat("x", 1000) + "' + }}", "parse: "},
	}
	for _, tt := range tests {
		got, err := render(tt.src, map[string]any{"config": map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("render(%.40q) = %q, %v, want an error containing %q", tt.src, got, err, tt.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || len(msg) > maxErrorText+20 {
			t.Errorf("render(%.40q) error = %q, want one short line", tt.src, msg)
		}
	}
}

func TestRenderConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := render("{% for i in range(n) %}{{ i }}{% endfor %}", map[string]any{"n": i})
				if err == nil && len(got) != i {
					err = fmt.Errorf("render(range %d) = %q", i, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"", "{{ config.port }}", "{% for i in range(3) %}{{ i }}{% endfor %}", "{{", "{% if x %}", "{{ 'a' * 3 }}", "{% set x = dict(a=1) %}{{ x.a }}", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1) }}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if strings.Contains(src, "*") || len(src) > 1000 {
			return // string and number multiplication can be made to allocate without bound
		}
		out, err := render(src, map[string]any{"config": map[string]any{"port": int64(1)}})
		if err == nil && len(out) > MaxOutput {
			t.Fatalf("render(%q) = %d bytes, want at most %d", src, len(out), MaxOutput)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("render(%q) error = %q, want one line", src, err)
		}
	})
}
