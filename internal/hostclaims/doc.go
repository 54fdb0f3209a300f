// Package hostclaims is the pure logic over what units claim on their host
// (a charm's host section, charm.HostClaims): it renders a unit's claims
// with its config and facts (Render, Template), turns a unit's move from
// one revision to another into jobs of tasks with the identical ones
// pruned (Job, Diff), finds the conflicts between two units' claims
// (Conflicts) and decides which units of a machine run their current
// revision, roll back or are held so that none conflict (Resolve).
//
// It must not touch the host, etcd or the network: carrying tasks out is
// the host executor's, and reading units and revisions the agents'. Its
// only dependency beyond the standard library and package charm is the
// template engine, gonja (a Jinja implementation), which Template wraps
// without file access and with a bound on its output.
//
// # Templates
//
// A file's path and template, a package's version, a daemon's command
// items and env values are rendered when they hold template syntax. A
// template sees:
//
//	config           the unit's config, option name → value
//	unit_name        "kv/0"
//	service          "kv"
//	machine_id       "3"
//	unit_dir         the unit's directory
//	machine_address  the machine's address
//
// A name not defined is an error, not empty text.
//
// # Jobs
//
// A CURRENT job installs packages, manages files, runs daemons; a REMOVED
// job shuts down daemons, removes files, uninstalls packages. Diff of a
// unit's old and new claims keeps of the REMOVED job only the resources the
// new claims drop, and of the CURRENT job only the tasks whose resource
// is new or changed; the REMOVED tasks run first.
//
// # Conflicts
//
// Two units conflict on overlapping ports of one protocol, on a path with
// different content or mode, and on a package at two different versions
// (an empty version is compatible with any). Resolve rolls back the changed
// unit with the most conflicts, again and again, then holds back the
// latest-assigned of unchanged units still in conflict.
package hostclaims
