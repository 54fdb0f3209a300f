package charm

import (
	"crypto/sha256"
	"path"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Static returns the claims every unit of the charm makes whatever its
// config and facts, as the controller stores them with the charm and
// checks them when a unit is placed on a machine:
//   - every port (a port claim is never a template);
//   - every file whose path is absolute and not a template, with the
//     SHA-256 of its content, or none when the content is a template: the
//     path is claimed all the same, and its mode, which is never a
//     template, too; only the content is known on the unit's machine
//     alone. A relative path is under the unit's own directory and never
//     meets another unit's;
//   - every package whose version is not a template (an empty version,
//     any version, among them).
//
// Nil when none (h nil, or nothing static). The lists keep the charm's
// order and its bounds (MaxHostPorts, MaxHostFiles, MaxHostPackages), so
// they take under 300 KiB of the charm's record, every path at
// MaxHostPath.
func (h *HostClaims) Static() *pb.StaticClaims {
	if h == nil {
		return nil
	}
	out := &pb.StaticClaims{}
	for _, p := range h.Ports {
		out.Ports = append(out.Ports, &pb.StaticPortClaim{From: uint32(p.From), To: uint32(p.To), Protocol: p.Protocol})
	}
	for _, f := range h.Files {
		if !path.IsAbs(f.Path) || IsTemplate(f.Path) {
			continue
		}
		fc := &pb.StaticFileClaim{Path: f.Path, Mode: uint32(f.Mode)}
		if !f.Template {
			sum := sha256.Sum256([]byte(f.Content))
			fc.Sha256 = sum[:]
		}
		out.Files = append(out.Files, fc)
	}
	for _, p := range h.Packages {
		if IsTemplate(p.Version) {
			continue
		}
		out.Packages = append(out.Packages, &pb.StaticPackageClaim{Name: p.Name, Version: p.Version})
	}
	if len(out.Ports) == 0 && len(out.Files) == 0 && len(out.Packages) == 0 {
		return nil
	}
	return out
}
