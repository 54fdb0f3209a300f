// Package charm owns charms as files: it parses and validates a charm
// directory (metadata.yaml, config.yaml, actions.yaml, hooks/, actions/),
// packs it into a deterministic archive, reads and validates an archive in
// memory, extracts one safely, types configuration values against
// config.yaml, validates actions' parameters against actions.yaml and
// parses KEY=VALUE arguments (docs/DESIGN.md, Charms).
//
// It must not touch etcd, the network or gRPC, and keeps no state but a
// machine's cache of unpacked charms (below): storing charms by content
// address and revision, and relating endpoints (the interface, role and
// scope rules), belong to state and controller. It imports state only for
// the name validators.
//
// # Errors
//
// Every error for bad input (parameters and results of actions included)
// matches ErrInvalid (InvalidArgument at the API);
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
//     juju-info with interface juju-info and global scope, as in Juju, so
//     that any subordinate can attach to it. lifeline-info is a second name
//     of the endpoint and of its interface. A charm may declare it itself,
//     under one of its names (to set a limit), but only as a global provider
//     of either interface; a principal never names a requirer or peer so.
//   - At most 32 endpoints, counting the implicit one, and at most 8 peers
//     (state's limits on adding a service).
//   - A subordinate charm has at least one requires endpoint with scope
//     container. Only a subordinate charm's peers may be container-scoped.
//
// # The host section
//
// What the charm's units claim on their host (HostClaims; package
// hostclaims renders them for a unit and resolves conflicts between units):
//
//	host:
//	  ports: ["8080/tcp", "9000-9010/udp"]
//	  files:
//	    - {path: conf/kv.conf, template: "port={{ config.port }}\n", mode: "0640"}
//	    - {path: /etc/kv/motd, content: "hello\n"}
//	  packages:
//	    - {name: nginx, version: "1.22.*"}
//	  daemons:
//	    - name: server
//	      command: [bin/kv-server, --port, "{{ config.port }}"]
//	      env: {KV_MODE: fast}
//	      stop-timeout: 30s
//
// Rules (errors name the field, like host.files[1].path):
//   - ports: PORT/PROTOCOL or FROM-TO/PROTOCOL, protocol tcp or udp, ports
//     from 1 to 65535, FROM ≤ TO; no two of a charm's claims overlap.
//   - files: path is relative (under the unit's directory) or absolute (on
//     the host), clean, without ".."; exactly one of content and template
//     (at most 64 KiB); mode is permission bits in octal, "0644" by
//     default. No path twice.
//   - packages: name is a Debian package name; version, optional, a
//     pattern of a Debian version's characters and "*". No name twice.
//   - daemons: name is lowercase letters, digits and hyphens, starting with
//     a letter, unique; command is a non-empty list (the program first);
//     env maps variable names to values; stop-timeout is a Go duration
//     above 0 and at most 5m, 10s by default.
//   - At most 64 ports, 64 files, 64 packages and 16 daemons.
//   - A file's path and template, a package's version, a daemon's command
//     items and env values are templates when they hold "{{", "{%" or
//     "{#" (IsTemplate): they are checked as written here, and again
//     once rendered.
//
// # config.yaml
//
//	options:
//	  port: {type: int, default: 8080, description: ...}
//
// Optional; unknown keys tolerated. Option names follow ValidOptionName
// (letters, capitals as Juju allows, and digits, starting with a letter, single "-", "_" or
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
// # actions.yaml
//
// Juju's format, with Lifeline's keys:
//
//	backup:                       # the action's name; actions/backup runs it
//	  description: ...            # text
//	  params:                     # parameter name → its JSON Schema
//	    name: {type: string, pattern: "^[a-z0-9-]+$"}
//	    compress: {type: boolean, default: false}
//	  required: [name]            # parameters that must be given
//	  additionalProperties: false # default true: other parameters allowed
//	  parallel: false             # true: runs beside hooks, not between them
//	  safe: false                 # true: runs without approval
//	  approvers: [alice, "@admin"] # default ["@admin"]; none for a safe action
//	  timeout: 1h                 # a Go duration; the default
//	  max-parallel: 2             # tasks of an operation running at once; default all
//	  pause-grace: 30s            # SIGTERM to SIGKILL when paused; the default
//
// Optional; the file's rules are metadata.yaml's (unknown keys tolerated,
// null as good as absent, no duplicate or merge keys, 1 MiB). Juju's
// execution-group and title are among the keys tolerated and ignored.
// Besides:
//   - At most 64 actions. Names follow ValidActionName (lowercase letters,
//     digits and "-", starting with a letter, not ending with "-", at most
//     63 characters). Each action has its executable actions/NAME (or a
//     symlink to one in the charm), and every executable in actions/ is
//     declared, as Juju requires: a name misspelt on either side is an
//     error when the charm is read. Other files in actions/ are ignored.
//   - Parameter names are ASCII letters, digits, "-" and "_", starting with
//     a letter, at most 63 characters, so that each can be set with
//     KEY=VALUE. A parameter's schema is a mapping (or true, or false).
//     required names declared parameters, each once.
//   - Each action's parameters are the JSON Schema (draft 2020-12)
//     {"type": "object", "properties": params, "required": required,
//     "additionalProperties": additionalProperties}, at most 64 KiB as JSON,
//     compiled when the file is read (santhosh-tekuri/jsonschema). A schema
//     may refer to its own parts but to no file or URL; "format" is
//     asserted. A parameter's default must satisfy its schema.
//   - timeout is positive; pause-grace is 0 or more and at most timeout;
//     max-parallel is from 1 to 2^31-1. approvers are user names (the
//     syntax of service names), "@admin" (any admin) or "@operator" (any
//     operator), each once, at least one; quote "@..." in YAML.
//
// Actions.Validate checks an operation's parameters against the schema,
// listing every violation, and applies the defaults of absent parameters
// (and of absent properties of objects given); parameters are at most 64
// KiB as JSON. CanonicalJSON writes parameters in one form (sorted keys,
// one spelling per number) for digests.
//
// ReadActionParams reads `ctl run`'s --params file (YAML or JSON) and
// KEY=VALUE arguments over it: dotted keys nest, and a value that is one
// YAML scalar is typed as YAML 1.2 reads it (n=3 an integer, x=true a
// boolean, s="3" text). SetActionResults applies `action-set KEY=VALUE`
// to a task's results as Juju does: dotted keys nest, values stay text,
// stdout, stderr, stdout-encoding and stderr-encoding are reserved.
//
// # The charm tree and archives
//
// A charm may hold any regular files, directories and symlinks; a symlink
// must be relative and resolve inside the charm (following other symlinks).
// Devices, sockets, pipes and hard links are refused. hooks/ holds the
// executable hooks; a hook that is absent is skipped. actions/ holds the
// actions' executables.
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
// has hooks or actions (HasHooks), for a unit needs its copy only to run
// them. It is
// the package's only state, and lives on
// the disk of the machine that uses it (cache.go says why and what it
// checks).
package charm
