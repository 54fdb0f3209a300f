// Package hostexec carries out on a real host what a unit claims there:
// packages, files and daemons, and jobs of tasks over them. It owns the
// records that make each crash-safe, all written atomically (a
// temporary file in the same directory, fsynced, renamed, the directory
// fsynced).
//
// Packages. A PackageManager queries, installs and removes packages:
// Apt (dpkg-query, apt-get), None (a machine whose packages Lifeline
// does not manage) or Exec (a program with query, install and remove
// verbs), as ParsePackageManager reads a machine agent's
// --package-manager flag. A claim's version is a pattern: empty (any
// version), an exact version, or a glob (path.Match syntax, "1.2.*");
// only what is missing or does not match is installed, a glob by
// installing the manager's candidate and checking it matches after.
// Packages counts claims across a machine's units in a record file: a
// package is removed when its last claimant releases it, and only if
// Lifeline installed it (it was absent at its first claim).
//
// Files. WriteFile makes a path hold a content and mode for a unit
// (relative paths under the unit's directory, absolute ones anywhere),
// atomically, rewriting only what differs, and records the path and the
// digest of what it wrote in the unit's directory (FilesRecord).
// RemoveFile and RemoveFiles remove only paths so recorded, and of those
// only files still holding what the unit wrote: a file edited or
// replaced since is someone else's and is kept (reported Kept). A write
// records its path before it renames, with the digests of both the old
// and the new content, so that a crash leaves nothing the unit wrote
// unrecorded.
//
// Daemons. A Supervisor (one per machine agent) keeps units' daemons
// running: Ensure starts one, or restarts it when its spec changed, and
// leaves alone one running with the same spec; Stop sends SIGTERM to
// its process group, then SIGKILL after its stop timeout; StopAll stops
// all of a unit's. Each daemon runs in a session (and process group) of
// its own, its output appended to UnitDir/daemons/<name>.log, moved to
// <name>.log.1 past a size limit (checked every second). Run restarts a
// daemon whose process ended, with back-off (1 s doubling to 1 min,
// from 1 s again after 10 s up). The state file records each daemon's
// spec, pid and process start time (field 22 of /proc/<pid>/stat), and
// before each start a mark put in the process's environment, so that a
// Supervisor made after the agent restarts, even after a SIGKILL,
// adopts the daemons still running (the same pid and start time, or the
// mark for one whose pid was never recorded), never starting one twice,
// watches them by polling /proc (they are not its children), and starts
// the others. Daemons are not stopped when Run ends: they outlive the
// agent.
//
// Jobs. Host.RunJob runs a job of tasks in order: install, manage and
// run (a revision's packages, files and daemons), uninstall, remove and
// shutdown (their reverses). Each task is idempotent, and each outcome
// (changed, unchanged, ok with a note, or failed) is recorded in a
// journal file as the task ends, so that a runner killed mid-job, run
// again with the same tasks, resumes at the first task not done and
// completes the job, starting no daemon twice (the new Supervisor
// adopted those running). The first failure ends the job; running it
// again retries from the failed task.
//
// It owns no model: it knows nothing of revisions, conflicts or the
// controller (package hostclaims decides what to do, the agents when);
// it must not talk to etcd or gRPC.
package hostexec
