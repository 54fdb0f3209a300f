package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/names"
)

// The tools and flags of charms written for Juju, with Juju's output
// formats: "smart" (strings as they are, string lists one a line,
// booleans True/False, the rest YAML), "yaml" and "json".

// ApplicationContext is what a Context offers, beside Context, for the
// tools that act on the unit's service as a whole: status-set and
// status-get --application, application-version-set. A Context without it
// fails those tools.
type ApplicationContext interface {
	// SetApplicationStatus sets the service's status at once.
	SetApplicationStatus(ctx context.Context, status, message string) error
	// ApplicationStatus returns the service's status.
	ApplicationStatus(ctx context.Context) (status, message string, err error)
	// SetApplicationVersion records the version of the service's
	// workload, at once.
	SetApplicationVersion(ctx context.Context, version string) error
}

// AppSettingsContext is what a Context offers for relation-get and
// relation-set --app: a service's settings in a relation, beside its
// units'. A Context without it fails them.
type AppSettingsContext interface {
	// AppRelationGet returns service's settings in relation relationID:
	// the unit's own service's (with this hook's changes) or the remote
	// one's.
	AppRelationGet(ctx context.Context, relationID, service string) (map[string]string, error)
	// AppRelationSet buffers changes to the unit's service's settings in
	// relation relationID, committed as RelationSet's are.
	AppRelationSet(ctx context.Context, relationID string, set map[string]string, unset []string) error
}

// LeaderContext is a Context that knows whether its unit leads its
// service. requireLeader asks it; a Context without it lets every unit
// act for its service.
type LeaderContext interface {
	IsLeader(ctx context.Context) (bool, error)
}

// MaxVersionBytes bounds application-version-set's VERSION.
const MaxVersionBytes = 256

// jujuTools returns the tools that exist for charms written for Juju.
func jujuTools() map[string]tool {
	return map[string]tool{
		"juju-log": {
			usage: "[-l LEVEL|--log-level LEVEL] [--debug] MESSAGE...",
			doc: `Writes MESSAGE into the unit agent's log, as log does; in a relation hook
the message starts with the relation id ("db:3: "). An unknown LEVEL logs
at INFO with a warning, as Juju does.`,
			flags: []string{"log-level", "debug", "format"},
			run:   (*call).jujuLog,
		},
		"application-version-set": {
			usage: "VERSION",
			doc: `Records VERSION as the version of the service's workload, shown by
ctl status. At most 256 bytes; an empty VERSION clears it.`,
			run: (*call).applicationVersionSet,
		},
		"network-get": {
			usage: "BINDING [--ingress-address] [--bind-address] [--egress-subnets] [-r ID] [--format=smart|yaml|json]",
			doc: `Prints the network configuration of BINDING (an endpoint of the charm),
as Juju shapes it: bind-addresses, egress-subnets and ingress-addresses,
all from the unit's address. With one of --ingress-address, --bind-address
or --egress-subnets, only that; with several, a map of them.`,
			flags: []string{"relation", "format", "ingress-address", "bind-address", "egress-subnets", "primary-address"},
			run:   (*call).networkGet,
		},
	}
}

// jujuFlagDefs are the flags of jujuTools and of Juju's forms of the other
// tools; a flag without arg takes no value.
func jujuFlagDefs() map[string]flagDef {
	return map[string]flagDef{
		"debug":           {"debug", "", "", "log at DEBUG"},
		"all":             {"all", "a", "", "print every option, those without a value too"},
		"file":            {"file", "", "FILE", `read settings from FILE ("-": standard input): a YAML map or KEY=VALUE lines`},
		"app":             {"app", "", "", "the service's settings, not the unit's"},
		"application":     {"application", "", "", "the service's status, not the unit's"},
		"include-data":    {"include-data", "", "", "print the status's message too"},
		"ingress-address": {"ingress-address", "", "", "print the address other units reach this one at"},
		"bind-address":    {"bind-address", "", "", "print the address to listen on"},
		"egress-subnets":  {"egress-subnets", "", "", "print the subnets this unit's traffic comes from"},
		"primary-address": {"primary-address", "", "", "print the address to listen on (deprecated in Juju)"},
	}
}

// formats are the --format values every tool takes: text is Lifeline's
// (the default of its own tools), smart, yaml and json Juju's.
func formats() []string { return []string{"text", "smart", "yaml", "json"} }

// format returns the call's --format, or def.
func (c *call) format(def string) string {
	if f, ok := c.flags["format"]; ok {
		return f
	}
	return def
}

// set reports whether the boolean flag name was given.
func (c *call) set(name string) bool { _, ok := c.flags[name]; return ok }

// printAs prints v in format: json, yaml, smart, or with text for text.
func (c *call) printAs(format string, v any, text func()) error {
	switch format {
	case "json":
		return c.printJSON(v)
	case "yaml":
		return c.printYAML(v)
	case "smart":
		return c.printSmart(v)
	}
	text()
	return nil
}

// printYAML prints v as YAML, nothing for nil.
func (c *call) printYAML(v any) error {
	if v == nil {
		return nil
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	if s := strings.TrimRight(b.String(), "\n"); s != "" {
		fmt.Fprintln(c.out, s)
	}
	return nil
}

// printSmart prints v as Juju's smart format does: a string as it is
// (nothing when empty), a string list one a line, a boolean True or
// False, nothing for nil, anything else as YAML.
func (c *call) printSmart(v any) error {
	var s string
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		s = x
	case []string:
		s = strings.Join(x, "\n")
	case bool:
		s = "False"
		if x {
			s = "True"
		}
	default:
		return c.printYAML(v)
	}
	if s != "" {
		fmt.Fprintln(c.out, s)
	}
	return nil
}

// stringMap turns settings into a map of any, for the printers.
func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// requireLeader refuses what only the service's leader may do, when the
// Context knows leadership (LeaderContext); what names what was refused,
// "set the service's status".
func (c *call) requireLeader(ctx context.Context, what string) error {
	lc, ok := c.hc.(LeaderContext)
	if !ok {
		return nil
	}
	leader, err := lc.IsLeader(ctx)
	if err != nil {
		return err
	}
	if !leader {
		return fmt.Errorf("cannot %s: this unit is not the leader", what)
	}
	return nil
}

// appContext returns the Context's ApplicationContext.
func (c *call) appContext() (ApplicationContext, error) {
	ac, ok := c.hc.(ApplicationContext)
	if !ok {
		return nil, errors.New("not available here: the unit agent does not act for the service in this context")
	}
	return ac, nil
}

// appSettings returns the Context's AppSettingsContext.
func (c *call) appSettings() (AppSettingsContext, error) {
	ac, ok := c.hc.(AppSettingsContext)
	if !ok {
		return nil, errors.New("--app: the unit agent keeps no service settings in this context")
	}
	return ac, nil
}

func (c *call) jujuLog(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return usagef("no message specified")
	}
	level := "info"
	switch l, ok := c.flags["log-level"]; {
	case c.set("debug"):
		level = "debug"
	case ok:
		if lv, ok := logLevel(l); ok {
			level = lv
		} else {
			c.hc.Log("warn", fmt.Sprintf("Specified log level of %q is not valid", l))
		}
	}
	prefix := ""
	if rid := c.env[EnvRelationID]; rid != "" {
		prefix = rid + ": "
	}
	c.hc.Log(level, prefix+strings.Join(c.args, " "))
	if c.set("format") {
		fmt.Fprintf(c.stderr, "--format flag deprecated for command %q\n", c.name)
	}
	return nil
}

func (c *call) applicationVersionSet(ctx context.Context) error {
	if err := c.want(1, 1); err != nil {
		return usagef("give one VERSION")
	}
	v := c.args[0]
	if len(v) > MaxVersionBytes || strings.ContainsAny(v, "\n\r") {
		return usagef("bad version: at most %d bytes, one line", MaxVersionBytes)
	}
	ac, err := c.appContext()
	if err != nil {
		return err
	}
	return ac.SetApplicationVersion(ctx, v)
}

// bindAddress is one address of a binding, as network-get prints it,
// with both of Juju's names of its fields.
type bindAddress struct {
	Hostname string `json:"hostname" yaml:"hostname"`
	Value    string `json:"value" yaml:"value"`
	CIDR     string `json:"cidr" yaml:"cidr"`
	Address  string `json:"address" yaml:"address"`
}

// bindDevice is one device of a binding, as network-get prints it.
type bindDevice struct {
	MACAddress       string        `json:"mac-address" yaml:"mac-address"`
	InterfaceName    string        `json:"interface-name" yaml:"interface-name"`
	Addresses        []bindAddress `json:"addresses" yaml:"addresses"`
	OldMACAddress    string        `json:"macaddress" yaml:"macaddress"`
	OldInterfaceName string        `json:"interfacename" yaml:"interfacename"`
}

// networkInfo is network-get's answer.
type networkInfo struct {
	BindAddresses    []bindDevice `json:"bind-addresses" yaml:"bind-addresses"`
	EgressSubnets    []string     `json:"egress-subnets" yaml:"egress-subnets"`
	IngressAddresses []string     `json:"ingress-addresses" yaml:"ingress-addresses"`
}

func (c *call) networkGet(ctx context.Context) error {
	if err := c.want(1, 1); err != nil {
		return usagef("name one binding: an endpoint of the charm")
	}
	binding := c.args[0]
	if !names.ValidEndpoint(binding) {
		return usagef("no network config found for binding %q", binding)
	}
	if _, ok := c.flags["relation"]; ok {
		rid, err := c.relationID(ctx)
		if err != nil {
			return err
		}
		ids, err := c.hc.RelationIDs(ctx, "")
		if err != nil {
			return err
		}
		if !slices.Contains(ids, rid) {
			return fmt.Errorf("relation %s not found", rid)
		}
	}
	addr, err := c.hc.UnitAddress(ctx, "private-address")
	if err != nil {
		return err
	}
	info := networkOf(addr)
	var picked []string
	for _, f := range []string{"ingress-address", "bind-address", "egress-subnets", "primary-address"} {
		if c.set(f) {
			picked = append(picked, f)
		}
	}
	value := func(f string) any {
		switch f {
		case "egress-subnets":
			return info.EgressSubnets
		case "ingress-address":
			return first(info.IngressAddresses)
		}
		return first(info.BindAddresses[0].Addresses).Value
	}
	format := c.format("smart")
	switch len(picked) {
	case 0:
		return c.printAs(format, info, func() { _ = c.printYAML(info) })
	case 1:
		v := value(picked[0])
		return c.printAs(format, v, func() { _ = c.printSmart(v) })
	}
	m := map[string]any{}
	for _, f := range picked {
		m[f] = value(f)
	}
	return c.printAs(format, m, func() { _ = c.printYAML(m) })
}

func first[T any](s []T) T {
	var zero T
	if len(s) == 0 {
		return zero
	}
	return s[0]
}

// networkOf returns the network configuration of a unit at addr: the
// interface of this host holding addr (its name, MAC and subnet) when
// there is one, else addr alone (a host name, or an address of another
// host's, as a unit in a container may have).
func networkOf(addr string) networkInfo {
	dev := bindDevice{}
	a := bindAddress{Value: addr, Address: addr}
	ip := net.ParseIP(addr)
	switch {
	case ip == nil:
		a.Hostname = addr
	case ip.To4() != nil:
		a.CIDR = ip.String() + "/32"
	default:
		a.CIDR = ip.String() + "/128"
	}
	egress := []string{}
	if ip != nil {
		egress = append(egress, a.CIDR)
		if iface, subnet, ok := interfaceOf(ip); ok {
			dev.InterfaceName, dev.MACAddress = iface.Name, iface.HardwareAddr.String()
			a.CIDR = subnet.String()
		}
	}
	dev.OldMACAddress, dev.OldInterfaceName = dev.MACAddress, dev.InterfaceName
	dev.Addresses = []bindAddress{a}
	return networkInfo{BindAddresses: []bindDevice{dev}, EgressSubnets: egress, IngressAddresses: []string{addr}}
}

// interfaceOf finds the interface of this host holding ip, and its subnet.
func interfaceOf(ip net.IP) (net.Interface, *net.IPNet, bool) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return net.Interface{}, nil, false
	}
	for _, iface := range ifaces {
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return iface, &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}, true
			}
		}
	}
	return net.Interface{}, nil, false
}

// readSettingsFile parses relation-set --file's content as Juju does: a
// YAML map of keys to scalar values (an empty or null value unsets the
// key); as a Lifeline convenience, KEY=VALUE lines too.
func readSettingsFile(data string) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		return nil, usagef("--file: invalid YAML: %s", strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n", "; "))
	}
	if len(doc.Content) == 0 {
		return map[string]string{}, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && strings.Contains(data, "=") {
		return keyValueLines(data)
	}
	if root.Kind != yaml.MappingNode {
		return nil, usagef("--file: expected a YAML map, got %s", strings.TrimSpace(firstLine(data)))
	}
	out := map[string]string{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, usagef("--file: key %q: want a scalar value", k.Value)
		}
		if v.Tag == "!!null" {
			out[k.Value] = ""
			continue
		}
		out[k.Value] = v.Value
	}
	return out, nil
}

// keyValueLines parses KEY=VALUE lines, blank lines skipped.
func keyValueLines(data string) (map[string]string, error) {
	out := map[string]string{}
	for line := range strings.Lines(data) {
		line = strings.TrimRight(line, "\r\n")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, usagef("--file: bad line %q: want KEY=VALUE or a YAML map", line)
		}
		out[k] = v
	}
	return out, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// jujuOnlyTools are Juju's hook tools Lifeline does not provide (those it
// comes to provide are left out by MissingTools).
func jujuOnlyTools() []string {
	return []string{
		"juju-reboot", "goal-state", "credential-get",
		"add-metric", "storage-get", "storage-add", "storage-list", "resource-get",
		"secret-get", "secret-set", "secret-add", "secret-ids", "secret-info-get", "secret-grant", "secret-revoke", "secret-remove",
		"payload-register", "payload-unregister", "payload-status-set", "pod-spec-get", "pod-spec-set",
		"k8s-spec-get", "k8s-spec-set", "k8s-raw-get", "k8s-raw-set", "state-get", "state-set", "state-delete",
		"relation-model-get", "juju-run", "juju-exec", "unit-get-all", "action-name",
	}
}

// MaxMissingTools bounds MissingTools' answer.
const MaxMissingTools = 8

// MissingTools returns the Juju hook tools a hook's output says its shell
// could not find ("goal-state: not found" from dash, "goal-state: command
// not found" from bash), those Lifeline does not provide, sorted, at most
// MaxMissingTools.
func MissingTools(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, suffix := range []string{": command not found", ": not found"} {
			before, ok := strings.CutSuffix(strings.TrimSpace(l), suffix)
			if !ok {
				continue
			}
			i := strings.LastIndex(before, ": ")
			name := strings.TrimSpace(before[i+1:])
			if slices.Contains(jujuOnlyTools(), name) && !IsTool(name) && !slices.Contains(out, name) && len(out) < MaxMissingTools {
				out = append(out, name)
			}
			break
		}
	}
	slices.Sort(out)
	return out
}
