package hostclaims

import "github.com/lifelinehq/lifeline/internal/jinja"

// Template renders src, a Jinja template, with vars, in the sandbox
// package jinja describes (no file access, strict names, bounded output
// and range()); a trailing newline is kept, as a file's content needs.
// Errors are one line.
func Template(src string, vars map[string]any) (string, error) {
	return jinja.Render(src, vars, jinja.Options{KeepTrailingNewline: true, Whose: "a claim's template"})
}
