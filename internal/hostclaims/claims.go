package hostclaims

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// ErrInvalid is matched (errors.Is) by every error Render returns: a
// template that fails or renders to a value the claim does not allow.
var ErrInvalid = errors.New("invalid host claims")

// Facts are what a unit's templates know of the unit and its host.
type Facts struct {
	Unit           string // "kv/0"
	Service        string // "kv"
	MachineID      string // "3"
	UnitDir        string // the unit's directory, absolute
	MachineAddress string // the machine's address, as the controller has it
}

// vars are the names a template sees: config (the unit's config, option
// name → value) and the facts.
func (f Facts) vars(config map[string]any) map[string]any {
	if config == nil {
		config = map[string]any{}
	}
	return map[string]any{
		"config":          config,
		"unit_name":       f.Unit,
		"service":         f.Service,
		"machine_id":      f.MachineID,
		"unit_dir":        f.UnitDir,
		"machine_address": f.MachineAddress,
	}
}

// Claims are one unit's host claims, resolved: templates rendered and paths
// absolute, in the order the charm declares them.
type Claims struct {
	// Unit is the unit that claims them, which conflict messages name.
	Unit     string
	Ports    []charm.PortRange
	Files    []File
	Packages []Package
	Daemons  []Daemon
}

// File is a file the unit writes: Path absolute and clean.
type File struct {
	Path    string
	Content []byte
	Mode    fs.FileMode
}

// Package is a package the unit needs: Version empty means any version.
type Package struct {
	Name    string
	Version string
}

// Daemon is a process the unit's agent keeps running.
type Daemon struct {
	Name        string
	Command     []string
	Env         map[string]string
	StopTimeout time.Duration
}

// Render resolves a charm's host claims for one unit: a file's path and
// template, a package's version, a daemon's command items and env values
// are rendered with Template over the unit's config and facts when they
// hold template syntax (charm.IsTemplate), and checked again as the charm
// package checks literal values; a relative path is joined to
// facts.UnitDir. Nil claims give empty Claims. Errors match ErrInvalid and
// name the field: "host.files[0].path: ...".
func Render(c *charm.HostClaims, config map[string]any, facts Facts) (*Claims, error) {
	out := &Claims{Unit: facts.Unit}
	if c == nil {
		return out, nil
	}
	if !path.IsAbs(facts.UnitDir) || path.Clean(facts.UnitDir) != facts.UnitDir {
		return nil, fmt.Errorf("%w: unit directory %q is not an absolute clean path", ErrInvalid, facts.UnitDir)
	}
	r := &renderer{vars: facts.vars(config)}
	out.Ports = append([]charm.PortRange(nil), c.Ports...)
	seen := map[string]bool{}
	for i, fc := range c.Files {
		field := fmt.Sprintf("host.files[%d]", i)
		p := r.value(field+".path", fc.Path)
		if r.err == nil {
			if err := charm.CheckHostPath(p); err != nil {
				r.fail(field+".path", err)
			}
		}
		content := fc.Content
		if fc.Template {
			content = r.render(field+".template", fc.Content)
		}
		if r.err != nil {
			return nil, r.err
		}
		if !path.IsAbs(p) {
			p = path.Join(facts.UnitDir, p)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: %s.path: %s is claimed twice", ErrInvalid, field, p)
		}
		seen[p] = true
		out.Files = append(out.Files, File{Path: p, Content: []byte(content), Mode: fc.Mode})
	}
	for i, pc := range c.Packages {
		field := fmt.Sprintf("host.packages[%d].version", i)
		v := r.value(field, pc.Version)
		if r.err == nil && v != "" {
			if err := charm.CheckPackageVersion(v); err != nil {
				r.fail(field, err)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		out.Packages = append(out.Packages, Package{Name: pc.Name, Version: v})
	}
	for i, dc := range c.Daemons {
		field := fmt.Sprintf("host.daemons[%d]", i)
		d := Daemon{Name: dc.Name, StopTimeout: dc.StopTimeout}
		for j, arg := range dc.Command {
			d.Command = append(d.Command, r.daemonValue(fmt.Sprintf("%s.command[%d]", field, j), arg))
		}
		if r.err == nil && d.Command[0] == "" {
			r.fail(field+".command[0]", errors.New("the program is empty"))
		}
		if dc.Env != nil {
			d.Env = make(map[string]string, len(dc.Env))
			for k, v := range dc.Env {
				d.Env[k] = r.daemonValue(field+".env."+k, v)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		out.Daemons = append(out.Daemons, d)
	}
	return out, nil
}

// renderer renders a unit's values, keeping the first error.
type renderer struct {
	vars map[string]any
	err  error
}

func (r *renderer) fail(field string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
}

// render renders src as a template.
func (r *renderer) render(field, src string) string {
	if r.err != nil {
		return ""
	}
	out, err := Template(src, r.vars)
	if err != nil {
		r.fail(field, err)
	}
	return out
}

// value renders s when it holds template syntax, and returns it as it is
// otherwise.
func (r *renderer) value(field, s string) string {
	if !charm.IsTemplate(s) {
		return s
	}
	return r.render(field, s)
}

// daemonValue is value checked as a daemon's argument or env value.
func (r *renderer) daemonValue(field, s string) string {
	v := r.value(field, s)
	if r.err == nil {
		if err := charm.CheckDaemonValue(v); err != nil {
			r.fail(field, err)
		}
	}
	return v
}
