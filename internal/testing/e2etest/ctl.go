package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// Result is how one ctl run ended.
type Result struct {
	Args           []string
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("ctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// CtlCommand is ctl with args, in the sandbox's environment, reading the
// client config at config (the sandbox's when empty). Started with
// Sandbox.Start, it dies with the test binary.
func (s *Sandbox) CtlCommand(ctx context.Context, config string, args ...string) *exec.Cmd {
	if config == "" {
		config = s.Config
	}
	cmd := exec.CommandContext(ctx, s.Bin.Ctl, args...)
	cmd.Env = append(os.Environ(),
		"LIFELINE_CONFIG="+config,
		"XDG_DATA_HOME="+s.Dir,
		"XDG_CONFIG_HOME="+s.Dir,
	)
	return cmd
}

// Ctl runs ctl with args and returns how it ended; code -1 when it could
// not run or ran over 3 minutes.
func (s *Sandbox) Ctl(args ...string) Result { return s.CtlVia("", args...) }

// CtlVia is Ctl with the client config at config (such as a controller's
// own, Controller.ClientConfig).
func (s *Sandbox) CtlVia(config string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := s.CtlCommand(ctx, config, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := s.starter.start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	r := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.Code = ee.ExitCode()
	default:
		r.Code = -1
		r.Stderr += fmt.Sprintf("\n(ctl did not finish: %v)", err)
	}
	return r
}

// OK runs ctl, wants exit status 0, and returns its output.
func (s *Sandbox) OK(t testing.TB, args ...string) string {
	t.Helper()
	r := s.Ctl(args...)
	if r.Code != 0 {
		t.Fatalf("%v\nwant exit status 0", r)
	}
	return r.Stdout
}

// Fails runs ctl and wants exit status code with stderr holding msg.
func (s *Sandbox) Fails(t testing.TB, code int, msg string, args ...string) {
	t.Helper()
	r := s.Ctl(args...)
	if r.Code != code || !strings.Contains(r.Stderr, msg) {
		t.Errorf("%v\nwant exit status %d and %q on stderr", r, code, msg)
	}
}

// StatusDoc is the shape of ctl status --format json.
type StatusDoc struct {
	// Revision is the model's revision the status was read at.
	Revision    int64                    `json:"revision"`
	Machines    map[string]MachineDoc    `json:"machines"`
	Services    map[string]ServiceDoc    `json:"services"`
	Relations   []RelationDoc            `json:"relations"`
	Controllers map[string]ControllerDoc `json:"controllers"`
}

// ControllerDoc is a live controller in ctl status.
type ControllerDoc struct {
	Addresses []string `json:"addresses"`
	Leader    bool     `json:"leader"`
}

// Leader returns the id and addresses of the controller that runs the
// singleton workers, if status names one.
func (d *StatusDoc) Leader() (id string, addrs []string, ok bool) {
	for id, c := range d.Controllers {
		if c.Leader {
			return id, c.Addresses, true
		}
	}
	return "", nil, false
}

type MachineDoc struct {
	Life       string   `json:"life"`
	Instance   string   `json:"instance"`
	Address    string   `json:"address"`
	Agent      string   `json:"agent"`
	Units      []string `json:"units"`
	Message    string   `json:"message"`
	Forced     bool     `json:"forced"`
	WaitingFor []string `json:"waiting_for"`
}

type ServiceDoc struct {
	Charm       string             `json:"charm"`
	Revision    int64              `json:"revision"`
	Life        string             `json:"life"`
	Status      string             `json:"status"`
	Subordinate bool               `json:"subordinate"`
	Units       map[string]UnitDoc `json:"units"`
	WaitingFor  []string           `json:"waiting_for"`
}

type UnitDoc struct {
	Life         string   `json:"life"`
	Machine      string   `json:"machine"`
	Principal    string   `json:"principal"`
	Agent        string   `json:"agent"`
	State        string   `json:"state"`
	Workload     string   `json:"workload"`
	Message      string   `json:"message"`
	Address      string   `json:"address"`
	Subordinates []string `json:"subordinates"`
	WaitingFor   []string `json:"waiting_for"`
	// Leader says the unit is its service's leader.
	Leader bool `json:"leader"`
}

type RelationDoc struct {
	ID         int64    `json:"id"`
	Key        string   `json:"key"`
	Life       string   `json:"life"`
	Scope      string   `json:"scope"`
	Units      []string `json:"units"`
	WaitingFor []string `json:"waiting_for"`
}

// Unit finds a unit of any service.
func (d *StatusDoc) Unit(name string) (UnitDoc, bool) {
	svc, _, _ := strings.Cut(name, "/")
	u, ok := d.Services[svc].Units[name]
	return u, ok
}

// Units lists every unit's name, sorted.
func (d *StatusDoc) Units() []string {
	var out []string
	for _, svc := range d.Services {
		for name := range svc.Units {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Empty says whether the model has nothing.
func (d *StatusDoc) Empty() bool {
	return len(d.Machines) == 0 && len(d.Services) == 0 && len(d.Relations) == 0
}

// Stranded lists what is dying (or, for a machine, dead) without saying
// what it waits for: each such entity must name its blocker.
func (d *StatusDoc) Stranded() []string {
	var out []string
	for id, m := range d.Machines {
		if m.Life != "alive" && len(m.WaitingFor) == 0 {
			out = append(out, fmt.Sprintf("machine %s (%s)", id, m.Life))
		}
	}
	for name, svc := range d.Services {
		if svc.Life != "alive" && len(svc.WaitingFor) == 0 {
			out = append(out, fmt.Sprintf("service %s (%s)", name, svc.Life))
		}
		for un, u := range svc.Units {
			if u.Life != "alive" && len(u.WaitingFor) == 0 {
				out = append(out, fmt.Sprintf("unit %s (%s)", un, u.Life))
			}
		}
	}
	for _, r := range d.Relations {
		if r.Life != "alive" && len(r.WaitingFor) == 0 {
			out = append(out, fmt.Sprintf("relation %d %s (%s)", r.ID, r.Key, r.Life))
		}
	}
	sort.Strings(out)
	return out
}

func (d *StatusDoc) String() string {
	data, _ := json.MarshalIndent(d, "", "  ")
	return string(data)
}

// TryStatus runs ctl status --format json and decodes it.
func (s *Sandbox) TryStatus() (*StatusDoc, error) { return s.TryStatusVia("") }

// TryStatusVia is TryStatus with the client config at config.
func (s *Sandbox) TryStatusVia(config string) (*StatusDoc, error) {
	r := s.CtlVia(config, "status", "--format", "json")
	if r.Code != 0 {
		return nil, errors.New(r.String())
	}
	var doc StatusDoc
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		return nil, fmt.Errorf("ctl status --format json: %v\n%s", err, r.Stdout)
	}
	return &doc, nil
}

// Status is TryStatus, failing the test on an error.
func (s *Sandbox) Status(t testing.TB) *StatusDoc {
	t.Helper()
	doc, err := s.TryStatus()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// WaitStatus polls the status until cond holds, failing the test after
// timeout with the last status seen.
func (s *Sandbox) WaitStatus(t testing.TB, what string, timeout time.Duration, cond func(*StatusDoc) bool) *StatusDoc {
	t.Helper()
	var last *StatusDoc
	poll.Within(t, what, timeout, func() (bool, string) {
		doc, err := s.TryStatus()
		if err != nil {
			return false, err.Error()
		}
		last = doc
		return cond(doc), doc.String()
	})
	return last
}
