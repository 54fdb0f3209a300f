// Package examples holds Lifeline's example charms (charms/: kv, app and
// logger, which the demo and the end-to-end tests deploy), the servers the
// kv and app charms run (kvserver, appserver), and tests that the charms
// are valid and that their hooks work.
//
// It has no code of its own: the charms are files, the servers commands.
// `make charms` builds the servers into the charm directories. Nothing
// outside examples/ may import anything here.
package examples
