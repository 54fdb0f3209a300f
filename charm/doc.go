// Package charm owns charms as files: it parses and validates a charm
// directory (metadata.yaml, config.yaml, hooks/), packs it into a
// deterministic archive, reads and validates an archive in memory, extracts
// one safely, types configuration values against config.yaml and parses
// KEY=VALUE arguments (docs/DESIGN.md, Charms).
//
// It must not touch etcd, the network or gRPC, and keeps no state but a
// machine's cache of unpacked charms (below): storing charms by content
// address and revision, and relating endpoints (the interface, role and
// scope rules), belong to state and controller. It imports state only for
// the name validators.
//
// # Errors
//
// Every error for bad input matches ErrInvalid (InvalidArgument at the API);
// an archive over the limit also matches ErrTooLarge. Messages are one line
// and name the file and the field: `metadata.yaml: requires.db: interface
// "Bad Name" is invalid: ...`; ReadDir and Pack put "charm <dir>: " before
// them, ReadArchive "charm archive: ".
//
// # metadata.yaml
//
//	name: kv                  # required; a valid service name
//	summary: ...              # text
//	description: ...          # text
//	subordinate: false        # true or false, unquoted
//	provides:                 # endpoint name → relation
//	  server: kv              # short form: just the interface
//	requires:
//	  db: {interface: sql, scope: global, limit: 1}
//	peers:
//	  cluster: kv-peer
//
// Rules:
//   - Unknown keys are tolerated (at the top level and in endpoints); known
//     keys of the wrong type are not. A null value is as good as absent.
//     Duplicate keys and merge keys (<<) are errors. Aliases are followed,
//     within a budget of the file's size. A file is at most 1 MiB.
//   - Endpoint and interface names are valid per names.ValidEndpoint. An
//     endpoint name appears once across provides, requires and peers.
//   - scope is global (the default) or container; limit is an integer of 0
//     (the default: no limit) or more.
//   - A principal (non-subordinate) charm has an implicit provider endpoint
//     lifeline-info with interface lifeline-info and global scope, so that
//     any subordinate can attach to it. A charm may declare it itself (to
//     set a limit) but only as exactly that; the name is never a requirer
//     or peer.
//   - At most 32 endpoints, counting the implicit one, and at most 8 peers
//     (state's limits on adding a service).
//   - A subordinate charm has at least one requires endpoint with scope
//     container. Only a subordinate charm's peers may be container-scoped.
//
// # config.yaml
//
//	options:
//	  port: {type: int, default: 8080, description: ...}
//
// Optional; unknown keys tolerated. Option names follow ValidOptionName
// (lowercase letters and digits, starting with a letter, single "-", "_" or
// "." between them, at most 63 characters). type is string (the default),
// int, float or boolean. A default is optional and must be of the type,
// unquoted for int, float and boolean, a YAML string for string (quote
// "1.10"); an integer serves a float; floats are finite.
//
// Values set from the command line go through ParseKeyValues (KEY=VALUE,
// split at the first "=", the key a valid option name, the value possibly
// empty, no key twice) and Config.ParseValues (unknown options and values
// not of the option's type are errors). FormatValue renders a value back to
// text that ParseValues reads to the same value.
//
// # The charm tree and archives
//
// A charm may hold any regular files, directories and symlinks; a symlink
// must be relative and resolve inside the charm (following other symlinks).
// Devices, sockets, pipes and hard links are refused. hooks/ holds the
// executable hooks; a hook that is absent is skipped. actions.yaml is
// ignored for now.
//
// Pack writes a gzip-compressed tar archive, deterministic for a given
// directory and Go release, of at most MaxSize (32 MiB) bytes, unpacking to
// at most 512 MiB in at most 100,000 entries. ReadArchive and Extract accept
// archives made by Pack and by tar(1) (a leading "./" is ignored), refusing
// absolute names, "..", entries below a non-directory, duplicate entries and
// escaping symlinks before anything is written.
//
// # The cache
//
// A Cache keeps one unpacked copy of each archive in a directory of a
// machine; Cache.Deploy makes a unit's charm directory of its own
// directories and symlinks and of hard links to the copy's files, which are
// read-only. Cache.DeployFrom does the same from an archive named by its
// SHA-256, fetching it only when no intact copy is there, once for the
// units that want it at once; Cache.DeployHooksFrom only when the charm
// has hooks (HasHooks), for a unit needs its copy only to run them. It is
// the package's only state, and lives on
// the disk of the machine that uses it (cache.go says why and what it
// checks).
package charm
