package hostexec

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// A Daemon is a long-running process a unit claims: the supervisor keeps
// it running. Its command runs in the unit's directory with Env (and
// PATH, unless Env sets it) as its whole environment. StopTimeout is
// how long it has after SIGTERM before SIGKILL (0 is 10 s).
type Daemon struct {
	Name        string            `json:"name"`
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	StopTimeout time.Duration     `json:"stop_timeout,omitempty"`
}

// Bounds on a daemon's spec.
const (
	maxDaemonArgs      = 256
	maxDaemonEnv       = 256
	maxDaemonSpec      = 64 << 10
	maxStopTimeout     = 10 * time.Minute
	defaultStopTimeout = 10 * time.Second
	maxUnitDaemons     = 64
)

var daemonName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// defaultPath is a daemon's PATH unless its Env says otherwise.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Validate checks d against the bounds and the syntax of names (a
// daemon's name names its log file).
func (d Daemon) Validate() error {
	if !daemonName.MatchString(d.Name) {
		return fmt.Errorf("daemon name %q: want 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit", d.Name)
	}
	if len(d.Command) == 0 || d.Command[0] == "" {
		return fmt.Errorf("daemon %s: no command", d.Name)
	}
	if len(d.Command) > maxDaemonArgs {
		return fmt.Errorf("daemon %s: %d arguments, at most %d", d.Name, len(d.Command), maxDaemonArgs)
	}
	for _, a := range d.Command {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("daemon %s: an argument holds NUL", d.Name)
		}
	}
	if len(d.Env) > maxDaemonEnv {
		return fmt.Errorf("daemon %s: %d environment variables, at most %d", d.Name, len(d.Env), maxDaemonEnv)
	}
	for k, v := range d.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) || k == MarkEnv {
			return fmt.Errorf("daemon %s: environment variable %q: not allowed", d.Name, k)
		}
	}
	if d.StopTimeout < 0 || d.StopTimeout > maxStopTimeout {
		return fmt.Errorf("daemon %s: stop timeout %s: want 0 to %s", d.Name, d.StopTimeout, maxStopTimeout)
	}
	if b, _ := json.Marshal(d); len(b) > maxDaemonSpec {
		return fmt.Errorf("daemon %s: spec of %d bytes, at most %d", d.Name, len(b), maxDaemonSpec)
	}
	return nil
}

// Digest identifies d's spec: two specs with the same digest run the
// same process the same way.
func (d Daemon) Digest() string {
	b, _ := json.Marshal(d) // map keys sorted: the same spec, the same bytes
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (d Daemon) stopTimeout() time.Duration {
	if d.StopTimeout == 0 {
		return defaultStopTimeout
	}
	return d.StopTimeout
}

// environ is d's environment, with its mark.
func (d Daemon) environ(mark string) []string {
	env := make([]string, 0, len(d.Env)+2)
	if _, ok := d.Env["PATH"]; !ok {
		env = append(env, "PATH="+defaultPath)
	}
	for k, v := range d.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return append(env, MarkEnv+"="+mark)
}

func newMark() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// The states of a daemon.
const (
	// Running: its process runs.
	Running = "running"
	// Backoff: its process ended; it is started again when its back-off
	// has passed.
	Backoff = "backoff"
	// Stopping: Stop is ending it.
	Stopping = "stopping"
	// Stopped: it was stopped and is not restarted.
	Stopped = "stopped"
)

// A DaemonState is what the supervisor knows of one of a unit's daemons.
type DaemonState struct {
	Name  string
	State string // Running, Backoff, Stopping or Stopped
	Pid   int    // 0 unless running or stopping
	// Restarts counts the starts after its process ended, since the spec
	// last changed.
	Restarts int
	// LastExit says how its process last ended ("" when it has not).
	LastExit string
	// Since is when it entered its state (for Backoff: when it will be
	// started again).
	Since time.Time
	// Log is its log file.
	Log string
}
