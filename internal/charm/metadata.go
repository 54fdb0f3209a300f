package charm

import (
	"math"
	"sort"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.yaml.in/yaml/v3"
)

// InfoEndpoint is the provider endpoint every principal charm has implicitly,
// with interface InfoInterface and global scope, so that a subordinate can
// attach to any principal through a container-scoped requirer of that
// interface, as in Juju. InfoAlias is a second name of both, which
// Lifeline's own charms and records may hold: a requirer of either
// interface relates to the endpoint, and either name names it (state
// treats the two alike).
const (
	InfoEndpoint  = "juju-info"
	InfoInterface = "juju-info"
	InfoAlias     = "lifeline-info"
)

// IsInfoName says whether name is the implicit endpoint's name, or its
// interface's, under either of its names.
func IsInfoName(name string) bool { return name == InfoEndpoint || name == InfoAlias }

// Limits on a charm's endpoints. state enforces the same numbers when a
// service is added.
const (
	// MaxEndpoints bounds a charm's endpoints, counting the implicit
	// juju-info provider.
	MaxEndpoints = 32
	// MaxPeers bounds a charm's peer endpoints.
	MaxPeers = 8
)

const metadataFile = "metadata.yaml"

// Metadata is a charm's metadata.yaml.
type Metadata struct {
	Name        string
	Summary     string
	Description string
	Subordinate bool
	// Provides, Requires and Peers map endpoint names to relations; an
	// endpoint name appears in at most one of them. The implicit
	// juju-info provider is not listed (see Endpoints).
	Provides map[string]Relation
	Requires map[string]Relation
	Peers    map[string]Relation
	// Host is what the charm's units claim on their host (the host
	// section); nil when the charm claims nothing.
	Host *HostClaims
}

// Relation is what metadata.yaml says of one endpoint.
type Relation struct {
	Interface string
	// Scope is pb.Scope_SCOPE_GLOBAL or pb.Scope_SCOPE_CONTAINER.
	Scope pb.Scope
	// Limit is the most relations the endpoint may be in; 0 means no limit.
	Limit int32
}

// roles lists the endpoint sections of metadata.yaml in the order they are
// checked.
var roles = [...]struct {
	key  string
	role pb.Role
}{
	{"provides", pb.Role_ROLE_PROVIDER},
	{"requires", pb.Role_ROLE_REQUIRER},
	{"peers", pb.Role_ROLE_PEER},
}

// ParseMetadata parses and validates metadata.yaml. Unknown top-level keys
// are tolerated; known keys of the wrong type are not. The rules are listed
// in the package documentation.
func ParseMetadata(data []byte) (*Metadata, error) {
	f := &yamlFile{name: metadataFile}
	top, err := f.parse(data)
	if err != nil {
		return nil, err
	}
	if top == nil {
		return nil, f.errorf("", "file is empty")
	}
	pairs, err := f.mapping("", top)
	if err != nil {
		return nil, err
	}
	m := &Metadata{}
	sections := map[string]*yaml.Node{}
	for _, p := range pairs {
		if isNull(p.value) {
			continue
		}
		switch p.key {
		case "name":
			m.Name, err = f.text(p.key, p.value)
		case "summary":
			m.Summary, err = f.text(p.key, p.value)
		case "description":
			m.Description, err = f.text(p.key, p.value)
		case "subordinate":
			m.Subordinate, err = f.boolean(p.key, p.value)
		case "provides", "requires", "peers":
			sections[p.key] = p.value
		case "host":
			m.Host, err = parseHost(f, p.value)
		}
		if err != nil {
			return nil, err
		}
	}
	if m.Name == "" {
		return nil, f.errorf("name", "is missing")
	}
	if !names.ValidService(m.Name) {
		return nil, f.errorf("name", "%q is invalid: use lowercase letters, digits and hyphens, starting with a letter", m.Name)
	}
	declared := map[string]string{} // endpoint name → section
	for _, r := range roles {
		rels, err := parseRelations(f, r.key, sections[r.key], declared)
		if err != nil {
			return nil, err
		}
		switch r.role {
		case pb.Role_ROLE_PROVIDER:
			m.Provides = rels
		case pb.Role_ROLE_REQUIRER:
			m.Requires = rels
		case pb.Role_ROLE_PEER:
			m.Peers = rels
		}
	}
	if err := m.check(f); err != nil {
		return nil, err
	}
	return m, nil
}

// parseRelations parses one of the provides, requires and peers sections,
// recording each endpoint's section in declared.
func parseRelations(f *yamlFile, section string, n *yaml.Node, declared map[string]string) (map[string]Relation, error) {
	pairs, err := f.mapping(section, n)
	if err != nil {
		return nil, err
	}
	rels := make(map[string]Relation, len(pairs))
	for _, p := range pairs {
		if !names.ValidEndpoint(p.key) {
			return nil, f.errorf(section, "endpoint name %q is invalid: use lowercase letters, digits, hyphens and underscores, starting with a letter", p.key)
		}
		field := join(section, p.key)
		if len(declared) >= MaxEndpoints {
			return nil, f.errorf("", "more than %d endpoints", MaxEndpoints)
		}
		if other, ok := declared[p.key]; ok {
			return nil, f.errorf(field, "endpoint %q is also declared in %s", p.key, other)
		}
		declared[p.key] = section
		rel, err := parseRelation(f, field, p.value)
		if err != nil {
			return nil, err
		}
		rels[p.key] = rel
	}
	return rels, nil
}

// parseRelation parses one endpoint: either the short form "name: interface"
// or a mapping with interface, scope and limit.
func parseRelation(f *yamlFile, field string, n *yaml.Node) (Relation, error) {
	rel := Relation{Scope: pb.Scope_SCOPE_GLOBAL}
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		rel.Interface = n.Value
	} else {
		pairs, err := f.mapping(field, n)
		if err != nil {
			return rel, err
		}
		for _, p := range pairs {
			if isNull(p.value) {
				continue
			}
			pf := join(field, p.key)
			switch p.key {
			case "interface":
				if rel.Interface, err = f.text(pf, p.value); err != nil {
					return rel, err
				}
			case "scope":
				s, err := f.text(pf, p.value)
				if err != nil {
					return rel, err
				}
				switch s {
				case "global":
					rel.Scope = pb.Scope_SCOPE_GLOBAL
				case "container":
					rel.Scope = pb.Scope_SCOPE_CONTAINER
				default:
					return rel, f.errorf(field, "scope %q is invalid: want global or container", s)
				}
			case "limit":
				l, err := f.integer(pf, p.value)
				if err != nil {
					return rel, err
				}
				if l < 0 || l > math.MaxInt32 {
					return rel, f.errorf(field, "limit %d is invalid: want 0 (no limit) or more", l)
				}
				rel.Limit = int32(l)
			}
		}
	}
	if rel.Interface == "" {
		return rel, f.errorf(field, "interface is missing")
	}
	if !names.ValidEndpoint(rel.Interface) {
		return rel, f.errorf(field, "interface %q is invalid: use lowercase letters, digits, hyphens and underscores, starting with a letter", rel.Interface)
	}
	return rel, nil
}

// check applies the rules that span endpoints.
func (m *Metadata) check(f *yamlFile) error {
	declared := 0
	for _, name := range []string{InfoEndpoint, InfoAlias} {
		rel, ok := m.Provides[name]
		if !ok {
			continue
		}
		declared++
		if !IsInfoName(rel.Interface) || rel.Scope != pb.Scope_SCOPE_GLOBAL {
			return f.errorf(join("provides", name), "is reserved: it must have interface %s (or %s) and global scope", InfoInterface, InfoAlias)
		}
		if declared > 1 {
			return f.errorf(join("provides", name), "is the same endpoint as provides.%s: declare one of them", InfoEndpoint)
		}
	}
	// A subordinate has no implicit provider, so its requirer may take the
	// name, as Juju's subordinates' requirers of juju-info often do.
	for _, section := range []string{"requires", "peers"} {
		rels := m.Requires
		if section == "peers" {
			rels = m.Peers
		}
		for _, name := range []string{InfoEndpoint, InfoAlias} {
			if _, ok := rels[name]; ok && !m.Subordinate {
				return f.errorf(join(section, name), "is reserved for the provider endpoint every principal charm has")
			}
		}
	}
	total := len(m.Provides) + len(m.Requires) + len(m.Peers)
	if declared == 0 && !m.Subordinate {
		total++
	}
	if total > MaxEndpoints {
		return f.errorf("", "%d endpoints (counting the implicit %s): at most %d", total, InfoEndpoint, MaxEndpoints)
	}
	if len(m.Peers) > MaxPeers {
		return f.errorf("peers", "%d endpoints: at most %d", len(m.Peers), MaxPeers)
	}
	if !m.Subordinate {
		for _, name := range sortedKeys(m.Peers) {
			if m.Peers[name].Scope == pb.Scope_SCOPE_CONTAINER {
				return f.errorf(join("peers", name), "container scope is only for subordinate charms")
			}
		}
		return nil
	}
	for _, rel := range m.Requires {
		if rel.Scope == pb.Scope_SCOPE_CONTAINER {
			return nil
		}
	}
	return f.errorf("subordinate", "a subordinate charm needs a requires endpoint with scope: container")
}

// Endpoints returns the charm's endpoints sorted by name, with the implicit
// juju-info provider of a principal charm that declares it under neither of
// its names, ready for state.AddServiceArgs.
func (m *Metadata) Endpoints() []*pb.Endpoint {
	var eps []*pb.Endpoint
	add := func(rels map[string]Relation, role pb.Role) {
		for name, rel := range rels {
			eps = append(eps, &pb.Endpoint{
				Name:      name,
				Interface: rel.Interface,
				Role:      role,
				Scope:     rel.Scope,
				Limit:     rel.Limit,
			})
		}
	}
	add(m.Provides, pb.Role_ROLE_PROVIDER)
	add(m.Requires, pb.Role_ROLE_REQUIRER)
	add(m.Peers, pb.Role_ROLE_PEER)
	_, named := m.Provides[InfoEndpoint]
	_, aliased := m.Provides[InfoAlias]
	if !named && !aliased && !m.Subordinate {
		eps = append(eps, &pb.Endpoint{
			Name:      InfoEndpoint,
			Interface: InfoInterface,
			Role:      pb.Role_ROLE_PROVIDER,
			Scope:     pb.Scope_SCOPE_GLOBAL,
		})
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Name < eps[j].Name })
	return eps
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
