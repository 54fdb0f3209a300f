package charm

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits on a charm's host claims (metadata.yaml's host section). They keep
// a unit's claims, its jobs and the conflict checks of a machine small.
const (
	MaxHostPorts    = 64
	MaxHostFiles    = 64
	MaxHostPackages = 64
	MaxHostDaemons  = 16
	// MaxFileContent bounds a file's content or template, and what a
	// template renders to.
	MaxFileContent = 64 << 10
	// MaxHostPath bounds a file's path as written.
	MaxHostPath = 4096
	// MaxDaemonArgs bounds a daemon's command; MaxDaemonEnv its
	// environment; MaxDaemonValue each argument and environment value.
	MaxDaemonArgs  = 256
	MaxDaemonEnv   = 64
	MaxDaemonValue = 4096
	// DefaultStopTimeout is a daemon's stop-timeout when none is given;
	// MaxStopTimeout the longest allowed.
	DefaultStopTimeout = 10 * time.Second
	MaxStopTimeout     = 5 * time.Minute
	// DefaultFileMode is a file's mode when none is given.
	DefaultFileMode fs.FileMode = 0o644
)

// HostClaims are what a charm's units claim on their host: ports, files,
// packages and daemons (metadata.yaml's host section), in the order
// declared. Values that hold template syntax (IsTemplate) are rendered for
// each unit by package hostclaims.
type HostClaims struct {
	Ports    []PortRange
	Files    []FileClaim
	Packages []PackageClaim
	Daemons  []DaemonClaim
}

// Protocols of a port claim.
const (
	TCP = "tcp"
	UDP = "udp"
)

// PortRange is a port claim: From to To inclusive (From ≤ To, both in
// 1..65535) of Protocol, TCP or UDP.
type PortRange struct {
	From, To uint16
	Protocol string
}

// String renders the claim as written in metadata.yaml: "8080/tcp" or
// "9000-9010/udp".
func (p PortRange) String() string {
	if p.From == p.To {
		return fmt.Sprintf("%d/%s", p.From, p.Protocol)
	}
	return fmt.Sprintf("%d-%d/%s", p.From, p.To, p.Protocol)
}

// Overlaps reports whether p and q share a port of the same protocol.
func (p PortRange) Overlaps(q PortRange) bool {
	return p.Protocol == q.Protocol && p.From <= q.To && q.From <= p.To
}

// FileClaim is a file a unit writes. Path is relative (under the unit's
// directory) or absolute (on the host), clean and without "..", and may be
// a template. Content is the file's content, or its template when Template
// is true.
type FileClaim struct {
	Path     string
	Content  string
	Template bool
	// Mode is the file's permission bits (at most 0777).
	Mode fs.FileMode
}

// PackageClaim is a package a unit needs installed: Name is a Debian
// package name; Version, when not empty, a version pattern the installed
// version must match, and may be a template.
type PackageClaim struct {
	Name    string
	Version string
}

// DaemonClaim is a long-running process the unit's agent keeps running.
// Command's items and Env's values may be templates.
type DaemonClaim struct {
	Name        string
	Command     []string
	Env         map[string]string
	StopTimeout time.Duration
}

// IsTemplate reports whether s holds template syntax ("{{", "{%" or "{#"),
// so that it is rendered for each unit rather than used as written.
func IsTemplate(s string) bool {
	return strings.Contains(s, "{{") || strings.Contains(s, "{%") || strings.Contains(s, "{#")
}

var (
	portRE        = regexp.MustCompile(`^([0-9]{1,5})(?:-([0-9]{1,5}))?/([a-z]+)$`)
	packageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	// versionRE is a Debian version's characters and "*" for patterns.
	versionRE    = regexp.MustCompile(`^[A-Za-z0-9.+~:*-]+$`)
	daemonNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	modeRE       = regexp.MustCompile(`^0?[0-7]{3}$`)
)

// Bounds on names and versions.
const (
	maxPackageName    = 128
	maxPackageVersion = 128
	maxDaemonName     = 63
	maxEnvName        = 128
)

// parseHost parses metadata.yaml's host section.
func parseHost(f *yamlFile, n *yaml.Node) (*HostClaims, error) {
	pairs, err := f.mapping("host", n)
	if err != nil {
		return nil, err
	}
	h := &HostClaims{}
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		field := join("host", p.key)
		switch p.key {
		case "ports":
			h.Ports, err = parseList(f, field, p.value, MaxHostPorts, parsePort)
		case "files":
			h.Files, err = parseList(f, field, p.value, MaxHostFiles, parseFile)
		case "packages":
			h.Packages, err = parseList(f, field, p.value, MaxHostPackages, parsePackage)
		case "daemons":
			h.Daemons, err = parseList(f, field, p.value, MaxHostDaemons, parseDaemon)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := h.check(f); err != nil {
		return nil, err
	}
	return h, nil
}

// sequence returns a list node's items; null gives none.
func (f *yamlFile) sequence(field string, n *yaml.Node, limit int) ([]*yaml.Node, error) {
	n, err := f.deref(field, n)
	if err != nil || isNull(n) {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, f.errorf(field, "want a list, got %s", describe(n))
	}
	if len(n.Content) > limit {
		return nil, f.errorf(field, "%d items: at most %d", len(n.Content), limit)
	}
	f.budget -= len(n.Content)
	if f.budget < 0 {
		return nil, f.errorf(field, "aliases expand the file too much")
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		if items[i], err = f.deref(fmt.Sprintf("%s[%d]", field, i), c); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// parseList parses a list of at most limit items with parse, each item's
// field named "field[i]"; an empty list gives nil.
func parseList[T any](f *yamlFile, field string, n *yaml.Node, limit int, parse func(*yamlFile, string, *yaml.Node) (T, error)) ([]T, error) {
	items, err := f.sequence(field, n, limit)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	out := make([]T, 0, len(items))
	for i, item := range items {
		v, err := parse(f, fmt.Sprintf("%s[%d]", field, i), item)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ParsePort parses a port claim: "8080/tcp" or "9000-9010/udp".
func ParsePort(s string) (PortRange, error) {
	m := portRE.FindStringSubmatch(s)
	if m == nil {
		return PortRange{}, fmt.Errorf("%q is invalid: want PORT/PROTOCOL or FROM-TO/PROTOCOL, like 8080/tcp", s)
	}
	from, _ := strconv.Atoi(m[1])
	to := from
	if m[2] != "" {
		to, _ = strconv.Atoi(m[2])
	}
	if m[3] != TCP && m[3] != UDP {
		return PortRange{}, fmt.Errorf("%q is invalid: protocol %q is not tcp or udp", s, m[3])
	}
	if from < 1 || from > 65535 || to < 1 || to > 65535 {
		return PortRange{}, fmt.Errorf("%q is invalid: ports are from 1 to 65535", s)
	}
	if from > to {
		return PortRange{}, fmt.Errorf("%q is invalid: the range ends before it starts", s)
	}
	return PortRange{From: uint16(from), To: uint16(to), Protocol: m[3]}, nil
}

func parsePort(f *yamlFile, field string, n *yaml.Node) (PortRange, error) {
	s, err := f.text(field, n)
	if err != nil {
		return PortRange{}, err
	}
	p, err := ParsePort(s)
	if err != nil {
		return PortRange{}, f.errorf(field, "%v", err)
	}
	return p, nil
}

func parseFile(f *yamlFile, field string, n *yaml.Node) (FileClaim, error) {
	pairs, err := f.mapping(field, n)
	if err != nil {
		return FileClaim{}, err
	}
	fc := FileClaim{Mode: DefaultFileMode}
	var hasContent, hasTemplate bool
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		pf := join(field, p.key)
		switch p.key {
		case "path":
			fc.Path, err = f.text(pf, p.value)
		case "content":
			fc.Content, err = f.text(pf, p.value)
			hasContent = true
		case "template":
			fc.Content, err = f.text(pf, p.value)
			hasTemplate = true
		case "mode":
			fc.Mode, err = parseMode(f, pf, p.value)
		}
		if err != nil {
			return FileClaim{}, err
		}
	}
	if fc.Path == "" {
		return FileClaim{}, f.errorf(field, "path is missing")
	}
	if err := CheckHostPath(fc.Path); err != nil {
		return FileClaim{}, f.errorf(join(field, "path"), "%v", err)
	}
	if hasContent == hasTemplate {
		return FileClaim{}, f.errorf(field, "want exactly one of content and template")
	}
	fc.Template = hasTemplate
	if len(fc.Content) > MaxFileContent {
		key := "content"
		if fc.Template {
			key = "template"
		}
		return FileClaim{}, f.errorf(join(field, key), "%d bytes: at most %d", len(fc.Content), MaxFileContent)
	}
	return fc, nil
}

// CheckHostPath checks a file claim's path: not empty, at most MaxHostPath
// bytes, clean, without "..", NUL or a trailing "/", and not the root.
func CheckHostPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("path is empty")
	case len(p) > MaxHostPath:
		return fmt.Errorf("path is %d bytes: at most %d", len(p), MaxHostPath)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path holds a NUL byte")
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (it would be %q)", p, path.Clean(p))
	case p == "/" || p == ".":
		return fmt.Errorf("path %q names no file", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return fmt.Errorf("path %q holds \"..\"", p)
		}
	}
	return nil
}

// parseMode parses a file mode written in octal: "0644", 644 or 0644.
func parseMode(f *yamlFile, field string, n *yaml.Node) (fs.FileMode, error) {
	if n.Kind != yaml.ScalarNode || !modeRE.MatchString(n.Value) {
		return 0, f.errorf(field, "want permission bits in octal like \"0644\", got %s", describe(n))
	}
	m, _ := strconv.ParseUint(n.Value, 8, 32)
	return fs.FileMode(m), nil
}

func parsePackage(f *yamlFile, field string, n *yaml.Node) (PackageClaim, error) {
	pairs, err := f.mapping(field, n)
	if err != nil {
		return PackageClaim{}, err
	}
	var pc PackageClaim
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		pf := join(field, p.key)
		switch p.key {
		case "name":
			pc.Name, err = f.text(pf, p.value)
		case "version":
			pc.Version, err = f.text(pf, p.value)
		}
		if err != nil {
			return PackageClaim{}, err
		}
	}
	if pc.Name == "" {
		return PackageClaim{}, f.errorf(field, "name is missing")
	}
	if len(pc.Name) > maxPackageName || !packageNameRE.MatchString(pc.Name) {
		return PackageClaim{}, f.errorf(join(field, "name"), "%q is not a Debian package name: lowercase letters, digits, \"+\", \"-\" and \".\", at least 2, starting with a letter or digit", pc.Name)
	}
	if pc.Version != "" && !IsTemplate(pc.Version) {
		if err := CheckPackageVersion(pc.Version); err != nil {
			return PackageClaim{}, f.errorf(join(field, "version"), "%v", err)
		}
	} else if len(pc.Version) > MaxDaemonValue {
		return PackageClaim{}, f.errorf(join(field, "version"), "%d bytes: at most %d", len(pc.Version), MaxDaemonValue)
	}
	return pc, nil
}

// CheckPackageVersion checks a package's version pattern: a Debian
// version's characters (letters, digits, ".", "+", "~", ":", "-") and "*",
// at most 128 bytes.
func CheckPackageVersion(v string) error {
	if len(v) > maxPackageVersion || !versionRE.MatchString(v) {
		return fmt.Errorf("%q is not a version pattern: letters, digits, \".+~:-\" and \"*\", at most %d", v, maxPackageVersion)
	}
	return nil
}

func parseDaemon(f *yamlFile, field string, n *yaml.Node) (DaemonClaim, error) {
	pairs, err := f.mapping(field, n)
	if err != nil {
		return DaemonClaim{}, err
	}
	d := DaemonClaim{StopTimeout: DefaultStopTimeout}
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		pf := join(field, p.key)
		switch p.key {
		case "name":
			d.Name, err = f.text(pf, p.value)
		case "command":
			d.Command, err = parseList(f, pf, p.value, MaxDaemonArgs, parseDaemonValue)
		case "env":
			d.Env, err = parseEnv(f, pf, p.value)
		case "stop-timeout":
			d.StopTimeout, err = parseStopTimeout(f, pf, p.value)
		}
		if err != nil {
			return DaemonClaim{}, err
		}
	}
	if d.Name == "" {
		return DaemonClaim{}, f.errorf(field, "name is missing")
	}
	if len(d.Name) > maxDaemonName || !daemonNameRE.MatchString(d.Name) {
		return DaemonClaim{}, f.errorf(join(field, "name"), "%q is invalid: use lowercase letters, digits and hyphens, starting with a letter, at most %d", d.Name, maxDaemonName)
	}
	if len(d.Command) == 0 {
		return DaemonClaim{}, f.errorf(field, "command is missing: want a list of the program and its arguments")
	}
	if d.Command[0] == "" {
		return DaemonClaim{}, f.errorf(join(field, "command"), "the program is empty")
	}
	return d, nil
}

// parseDaemonValue parses a daemon's argument: text of at most MaxDaemonValue
// bytes without NUL.
func parseDaemonValue(f *yamlFile, field string, n *yaml.Node) (string, error) {
	s, err := f.text(field, n)
	if err != nil {
		return "", err
	}
	if err := CheckDaemonValue(s); err != nil {
		return "", f.errorf(field, "%v", err)
	}
	return s, nil
}

// CheckDaemonValue checks a daemon's argument or environment value: at most
// MaxDaemonValue bytes, no NUL.
func CheckDaemonValue(s string) error {
	if len(s) > MaxDaemonValue {
		return fmt.Errorf("%d bytes: at most %d", len(s), MaxDaemonValue)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("holds a NUL byte")
	}
	return nil
}

func parseEnv(f *yamlFile, field string, n *yaml.Node) (map[string]string, error) {
	pairs, err := f.mapping(field, n)
	if err != nil {
		return nil, err
	}
	if len(pairs) > MaxDaemonEnv {
		return nil, f.errorf(field, "%d variables: at most %d", len(pairs), MaxDaemonEnv)
	}
	env := make(map[string]string, len(pairs))
	for _, p := range pairs {
		if len(p.key) > maxEnvName || !envNameRE.MatchString(p.key) {
			return nil, f.errorf(field, "variable name %q is invalid: use letters, digits and \"_\", not starting with a digit", p.key)
		}
		if env[p.key], err = parseDaemonValue(f, join(field, p.key), p.value); err != nil {
			return nil, err
		}
	}
	return env, nil
}

func parseStopTimeout(f *yamlFile, field string, n *yaml.Node) (time.Duration, error) {
	s, err := f.text(field, n)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxStopTimeout {
		return 0, f.errorf(field, "%q is invalid: want a duration above 0 and at most %s, like 30s", s, MaxStopTimeout)
	}
	return d, nil
}

// check applies the rules across a charm's claims: no two ports overlap,
// and files, packages and daemons are each named once.
func (h *HostClaims) check(f *yamlFile) error {
	for i, p := range h.Ports {
		for _, q := range h.Ports[:i] {
			if p.Overlaps(q) {
				return f.errorf(fmt.Sprintf("host.ports[%d]", i), "%s overlaps %s", p, q)
			}
		}
	}
	seen := map[string]bool{}
	for i, fc := range h.Files {
		if seen[fc.Path] {
			return f.errorf(fmt.Sprintf("host.files[%d].path", i), "%q is claimed twice", fc.Path)
		}
		seen[fc.Path] = true
	}
	clear(seen)
	for i, pc := range h.Packages {
		if seen[pc.Name] {
			return f.errorf(fmt.Sprintf("host.packages[%d].name", i), "%q is claimed twice", pc.Name)
		}
		seen[pc.Name] = true
	}
	clear(seen)
	for i, d := range h.Daemons {
		if seen[d.Name] {
			return f.errorf(fmt.Sprintf("host.daemons[%d].name", i), "%q is declared twice", d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}
