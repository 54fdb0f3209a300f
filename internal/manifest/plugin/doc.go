// Package plugin runs the programs behind a manifest's `exec:` resource
// types and speaks their protocol: JSON on stdin, JSON on stdout, one
// process per step (docs/MANIFESTS.md, "Plugins").
//
// A plugin is a program. Run with no arguments it answers `init`: its config
// schema, the plugs it wants and how to run its state action. The state
// action answers VALID with the resource's state, or STALE with the actions
// that would make it valid; each action is another run of the program (or of
// another program next to it, the protocol's `image`). Every answer is
// checked against the protocol strictly: an answer that breaks it is an error
// naming the plugin, the resource and the field. Apply runs a STALE
// answer's actions and requires the state action to answer VALID after
// them: the protocol's rule that an apply halts on a resource still stale.
//
// The package owns the process side: a minimal environment, plugs handed
// over as environment variables, bounded output, timeouts that kill the
// whole process group. It does not read manifests, render templates or
// decide what to apply; package manifest does that.
package plugin
