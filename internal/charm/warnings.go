package charm

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v3"
)

// maxWarnings bounds Warnings' answer: a metadata.yaml of many unknown
// keys says so once more, not once a key.
const maxWarnings = 32

// Warnings returns one line for each thing in the charm directory dir
// that Lifeline does not use although a charm written for Juju may rely
// on it: a metadata.yaml key other than those ParseMetadata reads, an
// endpoint's key other than interface, scope and limit (Juju's optional),
// and Juju's files Lifeline ignores (metrics.yaml, lxd-profile.yaml,
// dispatch, ...). A charm that ParseMetadata refuses is not warned about:
// its error says more. At most maxWarnings lines, the last saying how
// many more there were.
func Warnings(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", metadataFile, err)
	}
	return warnings(data, func(name string) (bool, error) {
		_, err := os.Lstat(filepath.Join(dir, name))
		if err == nil {
			return true, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	})
}

// ArchiveWarnings is Warnings of a packed charm, data (as ReadArchive
// accepted it): what the controller finds in an upload, for ctl to print.
func ArchiveWarnings(data []byte) ([]string, error) {
	var meta []byte
	top := map[string]bool{}
	err := walkArchive(data, func(hdr *tar.Header, name string, r io.Reader) error {
		top[name] = true
		if name == metadataFile && hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(io.LimitReader(r, maxYAMLSize+1))
			if err != nil {
				return archiveError(err)
			}
			meta = b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return warnings(meta, func(name string) (bool, error) { return top[name], nil })
}

// warnings is Warnings of a charm whose metadata.yaml is data and whose
// top-level entries exists tells.
func warnings(data []byte, exists func(string) (bool, error)) ([]string, error) {
	var out []string
	var doc yaml.Node
	if len(data) <= maxYAMLSize && yaml.Unmarshal(data, &doc) == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		top := doc.Content[0].Content
		for i := 0; i+1 < len(top); i += 2 {
			key, val := top[i].Value, top[i+1]
			switch key {
			case "name", "summary", "description", "subordinate", "host":
			case "provides", "requires", "peers":
				out = append(out, endpointWarnings(key, val)...)
			default:
				out = append(out, fmt.Sprintf("%s: %s: %s", metadataFile, key, ignoredKey(key)))
			}
		}
	}
	for _, f := range []string{"metrics.yaml", "lxd-profile.yaml", "dispatch", "version", "manifest.yaml", "charmcraft.yaml"} {
		if ok, err := exists(f); err != nil {
			return nil, err
		} else if ok {
			out = append(out, fmt.Sprintf("%s: not used by Lifeline", f))
		}
	}
	if len(out) > maxWarnings {
		n := len(out) - maxWarnings + 1
		out = append(out[:maxWarnings-1], fmt.Sprintf("... and %d more", n))
	}
	return out, nil
}

// endpointWarnings warns of the keys of section's endpoints Lifeline does
// not read.
func endpointWarnings(section string, val *yaml.Node) []string {
	if val.Kind != yaml.MappingNode {
		return nil
	}
	var out []string
	for i := 0; i+1 < len(val.Content); i += 2 {
		name, ep := val.Content[i].Value, val.Content[i+1]
		if ep.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(ep.Content); j += 2 {
			k := ep.Content[j].Value
			if !slices.Contains([]string{"interface", "scope", "limit"}, k) {
				out = append(out, fmt.Sprintf("%s: %s.%s.%s: %s", metadataFile, section, name, k, ignoredKey(k)))
			}
		}
	}
	return out
}

// ignoredKey says why a key does nothing here.
func ignoredKey(key string) string {
	switch key {
	case "maintainer", "maintainers", "categories", "tags", "display-name", "docs", "issues", "source", "website", "terms":
		return "descriptive, ignored"
	case "series", "bases", "min-juju-version", "assumes":
		return "ignored: Lifeline does not check where or on what a charm runs"
	case "extra-bindings", "resources", "storage", "devices", "containers", "payloads", "optional", "deployment":
		return "not supported, ignored"
	}
	return "unknown, ignored"
}
