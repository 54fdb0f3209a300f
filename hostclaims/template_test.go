package hostclaims

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestTemplate(t *testing.T) {
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
		got, err := Template(tt.src, vars)
		if err != nil || got != tt.want {
			t.Errorf("Template(%q) = %q, %v, want %q", tt.src, got, err, tt.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
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
		{strings.Repeat("x", MaxTemplateOutput+1), "renders to more than 65536 bytes"},
		{"{{ '" + strings.Repeat("x", 1000) + "' + }}", "parse: "},
	}
	for _, tt := range tests {
		got, err := Template(tt.src, map[string]any{"config": map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Template(%.40q) = %q, %v, want an error containing %q", tt.src, got, err, tt.want)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || len(msg) > maxErrorText+20 {
			t.Errorf("Template(%.40q) error = %q, want one short line", tt.src, msg)
		}
	}
}

func TestTemplateConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := Template("{% for i in range(n) %}{{ i }}{% endfor %}", map[string]any{"n": i})
				if err == nil && len(got) != i {
					err = fmt.Errorf("Template(range %d) = %q", i, got)
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
		out, err := Template(src, map[string]any{"config": map[string]any{"port": int64(1)}})
		if err == nil && len(out) > MaxTemplateOutput {
			t.Fatalf("Template(%q) = %d bytes, want at most %d", src, len(out), MaxTemplateOutput)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("Template(%q) error = %q, want one line", src, err)
		}
	})
}
