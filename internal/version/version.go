package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// The values the build stamps, with -ldflags
// "-X github.com/lifelinehq/lifeline/internal/version.version=v0.1.0"
// and likewise commit and date (an RFC 3339 time). Empty when the build
// stamps none.
var (
	version string
	commit  string
	date    string
)

// Devel is the version of a build that was not stamped with one.
const Devel = "devel"

// Info is what a binary says it is.
type Info struct {
	// Version is the release ("v0.1.0"), or Devel.
	Version string `json:"version" yaml:"version"`
	// Commit is the VCS revision built ("" when unknown), with "-dirty"
	// appended when the tree had changes the toolchain saw.
	Commit string `json:"commit" yaml:"commit"`
	// Date is when it was built or, unstamped, the commit's time ("" when
	// unknown).
	Date string `json:"date" yaml:"date"`
	// GoVersion is the Go toolchain that built it ("go1.26.8").
	GoVersion string `json:"go_version" yaml:"go_version"`
	// Platform is its GOOS/GOARCH.
	Platform string `json:"platform" yaml:"platform"`
}

// Get returns what this binary is: the stamped values, each missing one
// from the VCS information the toolchain recorded when there is some.
func Get() Info {
	return resolve(version, commit, date, debug.ReadBuildInfo)
}

// resolve is Get with its inputs given, for tests.
func resolve(v, c, d string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: v, Commit: c, Date: d, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := read(); ok {
		info.GoVersion = bi.GoVersion
		var rev, at string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if info.Commit == "" && rev != "" {
			info.Commit = rev
			if dirty {
				info.Commit += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = at
		}
		// A module built as a dependency at a tagged version (go install
		// ...@v0.1.0) knows its version.
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
	}
	if info.Version == "" {
		info.Version = Devel
	}
	return info
}

// String is the one line --version prints: "v0.1.0 (commit abc1234,
// built 2026-01-02T03:04:05Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	c, d := i.Commit, i.Date
	if c == "" {
		c = "unknown"
	}
	if hash, dirty := strings.CutSuffix(c, "-dirty"); len(hash) > 12 {
		c = hash[:12]
		if dirty {
			c += "-dirty"
		}
	}
	if d == "" {
		d = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, c, d, i.GoVersion, i.Platform)
}
