package hostclaims

import (
	"bytes"
	"fmt"
)

// Conflict is one resource two units claim incompatibly, seen from one of
// them: Resource is that unit's claim ("port 8080/tcp", "file /etc/x",
// "package nginx"), Other the unit holding the other claim, Detail what
// differs ("" for ports).
type Conflict struct {
	Resource string
	Other    string
	Detail   string
}

// String is the conflict as a unit reports it: "port 8080/tcp is claimed by
// kv/0", "file /etc/kv.conf is claimed by kv/0 with other content".
func (c Conflict) String() string {
	s := fmt.Sprintf("%s is claimed by %s", c.Resource, c.Other)
	if c.Detail != "" {
		s += " " + c.Detail
	}
	return s
}

// Conflicts returns what a claims that b claims incompatibly, seen from a
// (Other is b.Unit):
//   - ports: ranges of the same protocol that overlap;
//   - files: the same path with different content or mode (the same file
//     written the same way by both is no conflict);
//   - packages: the same name with different versions. An empty version
//     means any version and is compatible with every other: the unit that
//     names one gets it installed, which serves the other. Two versions
//     conflict when their patterns differ as text, even when some version
//     would match both ("1.2.*" and "1.2.3"): the claims say what each
//     unit tested with, and a pin that differs is the author's intent.
//
// Daemons never conflict: each unit's are its own.
// The result is in a's declaration order, ports, then files, then packages.
func Conflicts(a, b *Claims) []Conflict {
	if a == nil || b == nil {
		return nil
	}
	var out []Conflict
	for _, p := range a.Ports {
		for _, q := range b.Ports {
			if p.Overlaps(q) {
				c := Conflict{Resource: "port " + p.String(), Other: b.Unit}
				if q != p {
					c.Detail = "(" + q.String() + ")"
				}
				out = append(out, c)
				break
			}
		}
	}
	if len(a.Files) > 0 && len(b.Files) > 0 {
		files := make(map[string]*File, len(b.Files))
		for i := range b.Files {
			files[b.Files[i].Path] = &b.Files[i]
		}
		for _, f := range a.Files {
			g, ok := files[f.Path]
			if !ok {
				continue
			}
			switch {
			case !bytes.Equal(f.Content, g.Content):
				out = append(out, Conflict{Resource: "file " + f.Path, Other: b.Unit, Detail: "with other content"})
			case f.Mode != g.Mode:
				out = append(out, Conflict{Resource: "file " + f.Path, Other: b.Unit, Detail: fmt.Sprintf("with mode %04o", g.Mode)})
			}
		}
	}
	if len(a.Packages) > 0 && len(b.Packages) > 0 {
		versions := make(map[string]string, len(b.Packages))
		for _, p := range b.Packages {
			versions[p.Name] = p.Version
		}
		for _, p := range a.Packages {
			v, ok := versions[p.Name]
			if ok && p.Version != "" && v != "" && p.Version != v {
				out = append(out, Conflict{Resource: "package " + p.Name, Other: b.Unit, Detail: "at version " + v})
			}
		}
	}
	return out
}
