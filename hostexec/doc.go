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
// It owns no model: it knows nothing of revisions, conflicts or the
// controller (package hostclaims decides what to do, the agents when);
// it must not talk to etcd or gRPC.
package hostexec
