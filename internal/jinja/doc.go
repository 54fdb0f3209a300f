// Package jinja renders the Jinja templates of charms' host claims and of
// manifests with one sandboxed configuration of the gonja engine: strict
// undefined names, no file access, bounded output and range().
package jinja
