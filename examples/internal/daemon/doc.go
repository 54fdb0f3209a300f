// Package daemon holds what the example charms' servers (kvserver,
// appserver) share: serving HTTP on one address until told to stop, and
// probing a URL until it answers, which their hooks use to wait for a
// server they started (the machines have no curl).
//
// It must not know any charm, hook or hook tool: the servers are ordinary
// programs, and their charms' hooks drive them through flags, files and
// signals.
package daemon
