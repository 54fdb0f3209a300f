// Package plugins holds example plugins for manifests' `exec:` resource
// types (README.md): file, a file with a content and mode, and
// dns-record, a stand-in for a DNS provider. Each is a Go command that
// speaks the plugin protocol (docs/MANIFESTS.md, "Plugins"); the tests
// build them and drive them through package manifest/plugin.
//
// It has no code of its own. Nothing outside examples/ may import
// anything here.
package plugins
