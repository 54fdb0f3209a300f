package manifest

import (
	"slices"
	"strings"
)

// Order returns the manifest's resources in dependency order: each after
// every resource it depends on (a relation also after the services of the
// manifest its endpoints name), and otherwise in the file's order. A cycle
// is refused naming it: "a → b → a".
func (m *Manifest) Order() ([]string, error) {
	const (
		unseen = iota
		visiting
		done
	)
	mark := make(map[string]int, len(m.Names))
	order := make([]string, 0, len(m.Names))
	errs := &Errors{}
	var path []string
	// visit is a depth-first walk; its depth is bounded by the resources
	// (at most MaxResources), each on the path once.
	var visit func(name string)
	visit = func(name string) {
		switch mark[name] {
		case done:
			return
		case visiting:
			i := slices.Index(path, name)
			cycle := append(slices.Clone(path[i:]), name)
			errs.add("dependency cycle: %s", strings.Join(cycle, " → "))
			return
		}
		mark[name] = visiting
		path = append(path, name)
		r := m.Resources[name]
		for _, local := range sortedKeys(r.Dependencies) {
			if _, ok := m.Resources[r.Dependencies[local]]; ok {
				visit(r.Dependencies[local])
			}
		}
		// A relation comes after the services of the manifest it relates,
		// whether it lists them as dependencies or not.
		for _, svc := range relationServices(r) {
			if t, ok := m.Resources[svc]; ok && t.Type == TypeService {
				visit(svc)
			}
		}
		path = path[:len(path)-1]
		mark[name] = done
		order = append(order, name)
	}
	for _, name := range m.Names {
		visit(name)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return order, nil
}
