// Package gate asks an outside service whether a unit may move to a new
// revision of its service (docs/DESIGN.md, Revisions and rollout): the
// rollout worker asks before it grants the unit a permit, and a "deny"
// keeps the unit on its old revision.
//
// A gate is named and is either a program on the controller's host
// (NAME=COMMAND: the command is run by /bin/sh with the question as JSON
// on its stdin and answers as JSON on its stdout) or an HTTPS endpoint
// (NAME=https://…: the question is POSTed as JSON and the answer is the
// response's body). An answer is {"decision": "allow"|"deny"|"retry",
// "reason": "…", "retry_after": 30} (seconds, or a duration such as
// "1m"). Anything else — an exit status other than 0, a status other than
// 200, a timeout, an answer that does not parse — counts as retry: the
// gate fails closed, and the verdict says why.
//
// Every ask is bounded: by a timeout, by the size of the answer read, and
// by how many asks of one gate run at once.
package gate
