package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/lifelinehq/lifeline/controller"
)

// limitFlags are the controller's limits on what its clients can make it
// hold: connections (anyone who reaches the API's port can open them,
// before any credential) and what the agents' watch streams hold
// (docs/RELIABILITY.md, "Limits and budgets").
type limitFlags struct {
	maxConns, maxConnsPerAddress  int
	handshakeTimeout, idleTimeout time.Duration
	watchStream, watchCredential  string
	watchTotal                    string
	watchStreams                  int
}

// Connections by default: half the process's descriptors, at most
// maxDefaultConnections; a quarter of that from one address.
const maxDefaultConnections = 16384

func (l *limitFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&l.maxConns, "api-max-connections", 0, fmt.Sprintf("connections the API holds open at once, past which it refuses new ones (default: half the process's descriptor limit, at most %d; the rest are etcd's and the controller's own)", maxDefaultConnections))
	fl.IntVar(&l.maxConnsPerAddress, "api-max-connections-per-address", 0, "connections the API holds open at once from one remote address, an IPv6 one by its /64 (default: a quarter of --api-max-connections); agents behind one address share it")
	fl.DurationVar(&l.handshakeTimeout, "api-handshake-timeout", 10*time.Second, "how long a new connection may take to complete its TLS handshake and start HTTP/2 before it is closed")
	fl.DurationVar(&l.idleTimeout, "api-idle-timeout", 5*time.Minute, "how long a connection may carry no call before it is closed (an agent's carries its watch and presence streams)")
	fl.StringVar(&l.watchStream, "watch-stream-bytes", "64MiB", "changes held for one agent watch stream that does not read them, past which the stream is cut and its agent resumes on a new one; a size such as 64MiB, or none")
	fl.StringVar(&l.watchCredential, "watch-credential-bytes", "128MiB", "changes held for all the watch streams of one agent credential, past which a stream is cut; a size, or none")
	fl.StringVar(&l.watchTotal, "watch-total-bytes", "512MiB", "changes held for all the agents' watch streams together, past which the stream holding the most is cut; a size, or none")
	fl.IntVar(&l.watchStreams, "watch-streams-per-credential", 16, "watch streams one agent credential may hold open at once; 0 for no limit")
}

// limits are the limits in force.
type limits struct {
	conns      controller.ConnLimits
	handshake  time.Duration
	idle       time.Duration
	watch      controller.WatchLimits
	watchTotal int64
}

// resolve checks the flags and works out the limits for a process that may
// hold nofile descriptors.
func (l *limitFlags) resolve(nofile uint64) (limits, error) {
	var out limits
	switch {
	case l.maxConns < 0 || l.maxConnsPerAddress < 0:
		return out, errors.New("--api-max-connections and --api-max-connections-per-address must not be negative")
	case l.handshakeTimeout <= 0 || l.idleTimeout <= 0:
		return out, errors.New("--api-handshake-timeout and --api-idle-timeout must be positive")
	case l.watchStreams < 0:
		return out, errors.New("--watch-streams-per-credential must not be negative")
	}
	most := int(min(nofile-nofile/4, math.MaxInt32)) // a quarter at least for etcd and the rest
	out.conns = controller.ConnLimits{Max: l.maxConns, PerAddress: l.maxConnsPerAddress}
	if out.conns.Max == 0 {
		out.conns.Max = int(min(nofile/2, maxDefaultConnections))
	}
	if out.conns.Max > most {
		return out, fmt.Errorf("--api-max-connections %d leaves too few of the process's %d descriptors for etcd and the rest: at most %d", out.conns.Max, nofile, most)
	}
	if out.conns.PerAddress == 0 {
		out.conns.PerAddress = max(out.conns.Max/4, 1)
	}
	out.handshake, out.idle = l.handshakeTimeout, l.idleTimeout
	var err error
	if out.watch.StreamBytes, err = parseSizeFlag("--watch-stream-bytes", l.watchStream, true); err != nil {
		return out, err
	}
	if out.watch.CredentialBytes, err = parseSizeFlag("--watch-credential-bytes", l.watchCredential, true); err != nil {
		return out, err
	}
	if out.watchTotal, err = parseSizeFlag("--watch-total-bytes", l.watchTotal, true); err != nil {
		return out, err
	}
	out.watchTotal = max(out.watchTotal, 0) // the hub's: zero is none
	out.watch.StreamsPerCredential = l.watchStreams
	if l.watchStreams == 0 {
		out.watch.StreamsPerCredential = -1 // none
	}
	return out, nil
}

// raiseDescriptorLimit raises the process's soft limit on open
// descriptors to its hard limit, where it is not already (Go's runtime
// does so at start on Linux), and returns the soft limit then in force.
// A limit that cannot be raised stays as it was.
func raiseDescriptorLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("descriptor limit: %w", err)
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			l = raised
		}
	}
	return l.Cur, nil
}

// parseSizeFlag reads a size flag: bytes, or a whole number with B, KiB,
// MiB, GiB or TiB (as GOMEMLIMIT takes it). Where none allows it, "none"
// and 0 are no limit, returned as -1.
func parseSizeFlag(name, s string, none bool) (int64, error) {
	if none && (s == "none" || s == "0") {
		return -1, nil
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}} {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64>>u.shift {
			break
		}
		return n << u.shift, nil
	}
	if none {
		return 0, fmt.Errorf("%s %q: want a size such as 64MiB, 1GiB or 1048576, or none", name, s)
	}
	return 0, fmt.Errorf("%s %q: want a size such as 64MiB, 1GiB or 1048576", name, s)
}
