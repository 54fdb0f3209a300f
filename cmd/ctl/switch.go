package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
)

// knownControllerDoc is one controller as ctl controllers lists it.
type knownControllerDoc struct {
	Name        string   `json:"name" yaml:"name"`
	Current     bool     `json:"current" yaml:"current"`
	User        string   `json:"user" yaml:"user"`
	Controllers []string `json:"controllers" yaml:"controllers"`
	Config      string   `json:"config" yaml:"config"`
	// Error says why its client config could not be read.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
}

func controllersCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "controllers",
		Short: "List the controllers ctl knows, by name",
		Long: `List the controllers ctl has a client config for: the ones ctl bootstrap
--name started and ctl register --name registered with, and "default" (the
client config of a plain ctl bootstrap or register). The current one, which
every command talks to, is marked with *; ctl switch changes it. Nothing
is asked of the controllers: this reads the client configs only.

$LIFELINE_CONFIG or --config name one client config instead of the
current controller; this says so.

Example:
  ctl controllers
  ctl controllers --format json`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			s, ok := userClientStore()
			if !ok {
				return errors.New("LIFELINE_CONFIG is set: it names the one client config every command uses, and no controller is chosen by name (unset it to use ctl controllers and ctl switch)")
			}
			docs, err := listControllers(s)
			if err != nil {
				return err
			}
			if format != formatTabular {
				return writeDoc(e.stdout, docs, format)
			}
			if len(docs) == 0 {
				_, err := fmt.Fprintln(e.stdout, "no controllers: run `ctl bootstrap --name NAME` to start one, or `ctl register --name NAME TOKEN` to join one")
				return err
			}
			w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CONTROLLER\tUSER\tADDRESSES")
			for _, d := range docs {
				name := d.Name
				if d.Current {
					name += "*"
				}
				addrs := strings.Join(d.Controllers, ", ")
				if d.Error != "" {
					addrs = "(" + d.Error + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", name, d.User, addrs)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if e.configFlag != "" {
				fmt.Fprintf(e.stderr, "note: --config %s is used in place of the current controller\n", e.configFlag)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

// listControllers reads every client config in s.
func listControllers(s clientStore) ([]knownControllerDoc, error) {
	known, err := s.names()
	if err != nil {
		return nil, err
	}
	current := s.current()
	docs := make([]knownControllerDoc, 0, len(known))
	for _, n := range known {
		d := knownControllerDoc{Name: n, Current: n == current, Config: s.path(n)}
		cfg, err := pki.ReadClientConfig(d.Config)
		if err != nil {
			d.Error = errorText(err)
		} else {
			cfg = withCachedAddresses(cfg, d.Config)
			d.User = strings.TrimPrefix(cfg.Tag, names.KindUser+"-")
			d.Controllers = cfg.Controllers
		}
		docs = append(docs, d)
	}
	return docs, nil
}

func switchCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "switch NAME",
		Short: "Make another known controller the current one",
		Long: `Make the controller called NAME (one of ctl controllers) the one every
command talks to. "default" is the client config of a plain ctl bootstrap
or register.

Example:
  ctl switch staging
  ctl switch default`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkControllerName(name); err != nil {
				return usagef(cmd, "%v", err)
			}
			s, ok := userClientStore()
			if !ok {
				return errors.New("LIFELINE_CONFIG is set: it names the one client config every command uses (unset it to switch controllers by name)")
			}
			if _, err := os.Stat(s.path(name)); err != nil {
				known, _ := s.names()
				return fmt.Errorf("no controller called %s (known: %s)", name, knownList(known))
			}
			if err := s.setCurrent(name); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "current controller: %s\n", name)
			return nil
		},
	}
}

// knownList is the known controllers' names in a sentence.
func knownList(known []string) string {
	if len(known) == 0 {
		return "none"
	}
	return strings.Join(known, ", ")
}

// useNamedController points e at the client config of the controller
// called name (bootstrap --name, register --name, kill-controller NAME),
// and returns the store it is in. --config or $LIFELINE_CONFIG, which
// name a file, do not mix with a name.
func (e *env) useNamedController(name string) (clientStore, error) {
	if err := checkControllerName(name); err != nil {
		return clientStore{}, err
	}
	s, ok := userClientStore()
	if !ok || e.configFlag != "" {
		return clientStore{}, errors.New("a controller's name chooses its client config in ctl's store: not with LIFELINE_CONFIG or --config, which name a file")
	}
	path, err := filepath.Abs(s.path(name))
	if err != nil {
		return clientStore{}, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return clientStore{}, err
	}
	e.configPath, e.configErr = path, nil
	return s, nil
}

// namedDataDir is bootstrap's default data directory for the controller
// called name: the default one's for "default", beside it otherwise.
func namedDataDir(defaultDir, name string) string {
	if name == defaultControllerName || defaultDir == "" {
		return defaultDir
	}
	return filepath.Join(filepath.Dir(defaultDir), "controllers", name)
}
