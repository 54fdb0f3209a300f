package charm

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// Charm is a parsed and validated charm.
type Charm struct {
	Meta *Metadata
	// Config is never nil: a charm without config.yaml has no options.
	Config *Config
	// Hooks are the names of the executable files in hooks/ (or symlinks
	// to executable files in the charm), sorted. A hook not listed is
	// skipped when it would run.
	Hooks []string
	// Actions is never nil: a charm without actions.yaml has no actions.
	// Each has its executable, actions/NAME (or a symlink to one in the
	// charm), and every executable in actions/ is declared.
	Actions *Actions
	// ActionsYAML is actions.yaml as read (nil without one): the
	// controller keeps it with the charm's record and parses it again
	// (ParseActions) when it needs the actions.
	ActionsYAML []byte
}

// ReadDir parses and validates the charm in dir: its metadata.yaml,
// config.yaml and actions.yaml, and a tree that Pack can archive (only regular files,
// directories and symlinks that stay inside the charm).
func ReadDir(dir string) (*Charm, error) {
	c, _, err := scanDir(dir)
	return c, err
}

// scanDir reads the charm in dir and returns it with its file tree. Errors
// name dir.
func scanDir(dir string) (*Charm, *tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read charm: %w", err)
	}
	defer root.Close()
	t := newTree()
	walk := func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name == "." {
			return nil
		}
		e := &entry{name: name}
		switch typ := d.Type(); {
		case typ.IsDir():
			e.kind = kindDir
		case typ.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			e.kind, e.size, e.exec = kindFile, info.Size(), info.Mode()&0o111 != 0
		case typ&fs.ModeSymlink != 0:
			if e.link, err = root.Readlink(name); err != nil {
				return err
			}
			e.kind = kindSymlink
		default:
			return invalidf("%q is not a regular file, directory or symlink", name)
		}
		return t.add(e)
	}
	if err := fs.WalkDir(root.FS(), ".", walk); err != nil {
		return nil, nil, fmt.Errorf("charm %s: %w", dir, err)
	}
	c, err := load(t, func(names []string) (map[string][]byte, error) {
		data := make(map[string][]byte, len(names))
		for _, name := range names {
			b, err := root.ReadFile(name)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			data[name] = b
		}
		return data, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("charm %s: %w", dir, err)
	}
	return c, t, nil
}

// load validates a charm's tree and parses its metadata.yaml, config.yaml
// and actions.yaml, whose contents read returns given their resolved names.
func load(t *tree, read func(names []string) (map[string][]byte, error)) (*Charm, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	meta, err := t.regular(metadataFile)
	if err != nil {
		return nil, err
	}
	if meta == nil {
		return nil, invalidf("%s is missing", metadataFile)
	}
	cfg, err := t.regular(configFile)
	if err != nil {
		return nil, err
	}
	acts, err := t.regular(actionsFile)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range []*entry{meta, cfg, acts} {
		if e == nil {
			continue
		}
		if e.size > maxYAMLSize {
			return nil, invalidf("%s is over the %s limit", e.name, sizeString(maxYAMLSize))
		}
		names = append(names, e.name)
	}
	data, err := read(names)
	if err != nil {
		return nil, err
	}
	c := &Charm{}
	if c.Meta, err = ParseMetadata(data[meta.name]); err != nil {
		return nil, err
	}
	c.Config = &Config{Options: map[string]Option{}}
	if cfg != nil {
		if c.Config, err = ParseConfig(data[cfg.name]); err != nil {
			return nil, err
		}
	}
	c.Actions = &Actions{Specs: map[string]ActionSpec{}}
	if acts != nil {
		if c.Actions, err = ParseActions(data[acts.name]); err != nil {
			return nil, err
		}
		c.ActionsYAML = data[acts.name]
	}
	if c.Hooks, err = t.executables("hooks"); err != nil {
		return nil, err
	}
	if err := checkActionFiles(t, c.Actions); err != nil {
		return nil, err
	}
	return c, nil
}

// checkActionFiles checks that every action declared has its executable in
// actions/ and that every executable there is declared: a name misspelt on
// either side is found when the charm is read, not when the action is run.
func checkActionFiles(t *tree, a *Actions) error {
	execs, err := t.executables("actions")
	if err != nil {
		return err
	}
	for _, name := range a.Names() {
		if slices.Contains(execs, name) {
			continue
		}
		e, err := t.lookup("actions/" + name)
		if err != nil {
			return err
		}
		if e == nil {
			return invalidf("%s: %s: actions/%s is missing", actionsFile, name, name)
		}
		return invalidf("%s: %s: actions/%s is not an executable file", actionsFile, name, name)
	}
	for _, name := range execs {
		if _, ok := a.Specs[name]; !ok {
			return invalidf("actions/%s is executable but %s does not declare it", name, actionsFile)
		}
	}
	return nil
}
