package hostexec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// A Package is a package a unit claims: its name and a version pattern
// ("" for any version). A pattern holding one of * ? [ is a glob over
// the whole version string (path.Match syntax: "1.2.*" matches 1.2.0 and
// 1.2.10-1; * matches any run of characters, so the dots of a version are
// plain characters); any other pattern is an exact version.
type Package struct {
	Name    string
	Version string
}

// Bounds on what a claim may ask of a package manager.
const (
	maxPackageName    = 128
	maxPackageVersion = 128
	maxPackages       = 256
)

// validatePackageName refuses names a package manager could take for an
// option or that could not be one word of its command line.
func validatePackageName(name string) error {
	if name == "" || len(name) > maxPackageName {
		return fmt.Errorf("package name %q: want 1 to %d characters", name, maxPackageName)
	}
	if name[0] == '-' || strings.ContainsAny(name, " \t\n=/\\\x00") {
		return fmt.Errorf("package name %q: not a package name", name)
	}
	return nil
}

// Validate checks p's name and version pattern.
func (p Package) Validate() error {
	if err := validatePackageName(p.Name); err != nil {
		return err
	}
	if len(p.Version) > maxPackageVersion || strings.ContainsAny(p.Version, " \t\n/\x00") {
		return fmt.Errorf("package %s: version %q: not a version pattern", p.Name, p.Version)
	}
	if _, err := path.Match(p.Version, ""); err != nil {
		return fmt.Errorf("package %s: version %q: %w", p.Name, p.Version, err)
	}
	return nil
}

// isGlob reports whether a version pattern is a glob rather than an
// exact version.
func isGlob(pattern string) bool { return strings.ContainsAny(pattern, "*?[") }

// Matches reports whether an installed version ("" for absent) satisfies
// p's pattern.
func (p Package) Matches(installed string) bool {
	if installed == "" {
		return false
	}
	if p.Version == "" {
		return true
	}
	if !isGlob(p.Version) {
		return installed == p.Version
	}
	ok, _ := path.Match(p.Version, installed)
	return ok
}

// request is what is asked of a package manager to install p: an exact
// version is asked for; for a glob or no version the manager installs
// its candidate, which Packages checks against the pattern after.
func (p Package) request() Package {
	if isGlob(p.Version) {
		return Package{Name: p.Name}
	}
	return p
}

// A PackageManager queries, installs and removes the host's packages.
// Query reports each name's installed version, "" for a package not
// installed. Install is given exact versions or none (the manager's
// candidate). Errors carry the last lines of the tool's output.
type PackageManager interface {
	Query(ctx context.Context, names []string) (map[string]string, error)
	Install(ctx context.Context, pkgs []Package) error
	Remove(ctx context.Context, names []string) error
}

// ErrNoPackageManager is the error of every call of the package manager
// "none", for a machine whose packages Lifeline does not manage.
var ErrNoPackageManager = errors.New("this machine agent manages no packages: --package-manager")

// ParsePackageManager returns the package manager a machine agent's
// --package-manager flag names: "apt" (dpkg-query and apt-get), "none"
// (every package claim fails) or "exec:PATH" (a program with the verbs
// query, install and remove; PATH absolute).
func ParsePackageManager(flag string) (PackageManager, error) {
	switch {
	case flag == "apt":
		return Apt{}, nil
	case flag == "none":
		return None{}, nil
	case strings.HasPrefix(flag, "exec:"):
		p := strings.TrimPrefix(flag, "exec:")
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("package manager %q: the program's path must be absolute", flag)
		}
		return Exec{Path: filepath.Clean(p)}, nil
	}
	return nil, fmt.Errorf("package manager %q: want apt, none or exec:PATH", flag)
}

// None is the package manager of a machine whose packages Lifeline does
// not manage: every call fails with ErrNoPackageManager.
type None struct{}

// Query fails with ErrNoPackageManager.
func (None) Query(context.Context, []string) (map[string]string, error) {
	return nil, ErrNoPackageManager
}

// Install fails with ErrNoPackageManager.
func (None) Install(context.Context, []Package) error { return ErrNoPackageManager }

// Remove fails with ErrNoPackageManager.
func (None) Remove(context.Context, []string) error { return ErrNoPackageManager }

// Apt manages Debian packages: dpkg-query to query, apt-get to install
// and remove, without prompts (DEBIAN_FRONTEND=noninteractive).
type Apt struct{}

// Query asks dpkg-query for the names' versions; a package known to dpkg
// but not installed (removed, config-files) counts as absent.
func (Apt) Query(ctx context.Context, names []string) (map[string]string, error) {
	got, err := noneInstalled(names)
	if err != nil || len(names) == 0 {
		return got, err
	}
	args := append([]string{"-W", "-f=${Package} ${Version} ${db:Status-Status}\n", "--"}, names...)
	out, err := runTool(ctx, nil, "dpkg-query", args...)
	// dpkg-query exits 1 when some name is unknown to it, having printed
	// the others: its output is still the answer.
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		// dpkg-query prints a multi-arch package as name:arch only when
		// asked so; the name asked for is the key either way.
		name, _, _ := strings.Cut(f[0], ":")
		if _, asked := got[name]; asked && f[2] == "installed" {
			got[name] = f[1]
		}
	}
	return got, nil
}

// aptEnv is the environment apt-get runs with: no questions asked.
var aptEnv = []string{"DEBIAN_FRONTEND=noninteractive"}

// Install runs apt-get install without recommends, name=version for an
// exact version.
func (Apt) Install(ctx context.Context, pkgs []Package) error {
	args := []string{"install", "-y", "--no-install-recommends", "--"}
	for _, p := range pkgs {
		if err := p.Validate(); err != nil {
			return err
		}
		args = append(args, p.request().arg())
	}
	_, err := runTool(ctx, aptEnv, "apt-get", args...)
	return err
}

// Remove runs apt-get remove.
func (Apt) Remove(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := validatePackageName(n); err != nil {
			return err
		}
	}
	_, err := runTool(ctx, aptEnv, "apt-get", append([]string{"remove", "-y", "--"}, names...)...)
	return err
}

// arg is p as a package manager's argument: name or name=version.
func (p Package) arg() string {
	if p.Version == "" {
		return p.Name
	}
	return p.Name + "=" + p.Version
}

// Exec is a package manager program: `PATH query NAME...` prints one
// "name version" line per installed package asked for (nothing for an
// absent one), `PATH install NAME[=VERSION]...` and `PATH remove NAME...`
// exit 0 when done. Any other exit is a failure.
type Exec struct {
	Path string
}

// Query runs the program's query verb.
func (e Exec) Query(ctx context.Context, names []string) (map[string]string, error) {
	got, err := noneInstalled(names)
	if err != nil || len(names) == 0 {
		return got, err
	}
	out, err := runTool(ctx, nil, e.Path, append([]string{"query"}, names...)...)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			return nil, fmt.Errorf("%s query: line %q: want \"name version\"", e.Path, sc.Text())
		}
		if _, asked := got[f[0]]; asked {
			got[f[0]] = f[1]
		}
	}
	return got, nil
}

// Install runs the program's install verb.
func (e Exec) Install(ctx context.Context, pkgs []Package) error {
	args := []string{"install"}
	for _, p := range pkgs {
		if err := p.Validate(); err != nil {
			return err
		}
		args = append(args, p.request().arg())
	}
	_, err := runTool(ctx, nil, e.Path, args...)
	return err
}

// Remove runs the program's remove verb.
func (e Exec) Remove(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := validatePackageName(n); err != nil {
			return err
		}
	}
	_, err := runTool(ctx, nil, e.Path, append([]string{"remove"}, names...)...)
	return err
}

// Bounds on a tool's output: what is kept of stdout (a query's answer)
// and how many of its last lines an error quotes.
const (
	maxToolOutput = 1 << 20
	errorLines    = 10
	maxErrorLine  = 200
)

// runTool runs a package tool with env added to the agent's environment,
// returning its stdout (bounded). A failure's error carries the last
// lines of its combined output.
func runTool(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout := &tailBuffer{max: maxToolOutput, keepHead: true}
	both := &tailBuffer{max: 16 << 10}
	cmd.Stdout = multi{stdout, both}
	cmd.Stderr = both
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &ToolError{Tool: name, Verb: firstArg(args), Err: err, Tail: lastLines(both.Bytes())}
	}
	return stdout.Bytes(), nil
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// A ToolError is a package tool that failed: what ran, how it ended and
// the last lines it printed.
type ToolError struct {
	Tool, Verb string
	Err        error
	Tail       string
}

func (e *ToolError) Error() string {
	if e.Tail == "" {
		return fmt.Sprintf("%s %s: %v", e.Tool, e.Verb, e.Err)
	}
	return fmt.Sprintf("%s %s: %v: %s", e.Tool, e.Verb, e.Err, e.Tail)
}

func (e *ToolError) Unwrap() error { return e.Err }

// lastLines is the last errorLines non-empty lines of out, each cut to
// maxErrorLine bytes, joined by " | " so the error stays one line.
func lastLines(out []byte) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > maxErrorLine {
				l = l[:maxErrorLine] + "…"
			}
			lines = append(lines, l)
		}
	}
	if len(lines) > errorLines {
		lines = lines[len(lines)-errorLines:]
	}
	return strings.Join(lines, " | ")
}

// tailBuffer keeps at most max bytes of what is written to it: the
// first max (keepHead) or the last max. A command's stdout and stderr
// are copied by a goroutine each, so it locks.
type tailBuffer struct {
	max      int
	keepHead bool
	mu       sync.Mutex
	buf      []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if b.keepHead {
		if room := b.max - len(b.buf); room > 0 {
			b.buf = append(b.buf, p[:min(room, len(p))]...)
		}
		return n, nil
	}
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return n, nil
}

func (b *tailBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf
}

// multi writes to both of its buffers.
type multi [2]*tailBuffer

func (m multi) Write(p []byte) (int, error) {
	m[0].Write(p)
	m[1].Write(p)
	return len(p), nil
}

// sortedNames returns the names of pkgs, sorted and without repeats.
func sortedNames(pkgs []Package) []string {
	seen := map[string]bool{}
	var names []string
	for _, p := range pkgs {
		if !seen[p.Name] {
			seen[p.Name] = true
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names
}

// noneInstalled is a query's answer before it asks: every name, checked,
// absent (an empty version).
func noneInstalled(names []string) (map[string]string, error) {
	got := make(map[string]string, len(names))
	for _, n := range names {
		if err := validatePackageName(n); err != nil {
			return nil, err
		}
		got[n] = ""
	}
	return got, nil
}
