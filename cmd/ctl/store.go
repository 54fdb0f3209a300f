package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
)

// The client store: the controllers ctl knows, by name, under the user's
// config directory (lifeline/):
//
//	client.json                 the controller named "default"
//	controllers/NAME/client.json  every other one
//	current-controller          the name of the one commands talk to
//
// Beside each client config are bootstrap's record of the controller it
// started (client.controller.json) and the addresses ctl learned since
// (client.addresses.json): reading commands write only the latter, never
// the file holding the credential. $LIFELINE_CONFIG or --config name one
// client config file instead, and the store is not consulted.
const (
	defaultControllerName = "default"
	currentControllerFile = "current-controller"
	// maxControllerNameLen bounds a controller's name (a directory name).
	maxControllerNameLen = 63
)

// clientStore is the directory of the named client configs.
type clientStore struct{ dir string }

// userClientStore is the store under the user's config directory, and
// whether there is one: none when $LIFELINE_CONFIG names the client config.
func userClientStore() (clientStore, bool) {
	if os.Getenv("LIFELINE_CONFIG") != "" {
		return clientStore{}, false
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return clientStore{}, false
	}
	return clientStore{dir: filepath.Join(dir, "lifeline")}, true
}

// checkControllerName refuses a name that cannot be a controller's.
func checkControllerName(name string) error {
	if len(name) > maxControllerNameLen || !names.ValidService(name) {
		return fmt.Errorf("controller name %q: want lowercase letters, digits and single hyphens, starting with a letter, at most %d characters", name, maxControllerNameLen)
	}
	return nil
}

// path is the client config of the controller called name.
func (s clientStore) path(name string) string {
	if name == defaultControllerName {
		return filepath.Join(s.dir, "client.json")
	}
	return filepath.Join(s.dir, "controllers", name, "client.json")
}

// current is the name of the controller commands talk to: the one the
// last bootstrap, register or switch chose, else "default".
func (s clientStore) current() string {
	data, err := os.ReadFile(filepath.Join(s.dir, currentControllerFile))
	if err != nil {
		return defaultControllerName
	}
	name := strings.TrimSpace(string(data))
	if checkControllerName(name) != nil {
		return defaultControllerName
	}
	return name
}

// setCurrent makes name the controller commands talk to.
func (s clientStore) setCurrent(name string) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return pki.WriteFileAtomic(filepath.Join(s.dir, currentControllerFile), []byte(name+"\n"), 0o600)
}

// clearCurrent makes "default" current again if name was (its client
// config is gone).
func (s clientStore) clearCurrent(name string) error {
	if s.current() != name {
		return nil
	}
	if err := os.Remove(filepath.Join(s.dir, currentControllerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// names lists the controllers that have a client config, sorted.
func (s clientStore) names() ([]string, error) {
	var out []string
	if _, err := os.Stat(s.path(defaultControllerName)); err == nil {
		out = append(out, defaultControllerName)
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, "controllers"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() || checkControllerName(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(s.path(e.Name())); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// addressCachePath is where ctl keeps the controllers' addresses it
// learned for the client config at configPath.
func addressCachePath(configPath string) string {
	return strings.TrimSuffix(configPath, ".json") + ".addresses.json"
}

// addressCache is what the cache file holds.
type addressCache struct {
	Controllers []string `json:"controllers"`
}

// maxCachedAddresses bounds the cache: a model has a few controllers.
const maxCachedAddresses = 64

// readAddressCache returns the learned addresses for configPath, or none.
func readAddressCache(configPath string) []string {
	data, err := os.ReadFile(addressCachePath(configPath))
	if err != nil || len(data) > 64<<10 {
		return nil
	}
	var c addressCache
	if json.Unmarshal(data, &c) != nil || len(c.Controllers) > maxCachedAddresses {
		return nil
	}
	return c.Controllers
}

// writeAddressCache keeps addrs as the learned addresses for configPath.
func writeAddressCache(configPath string, addrs []string) error {
	data, err := json.Marshal(addressCache{Controllers: addrs})
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(addressCachePath(configPath), append(data, '\n'), 0o600)
}

// withCachedAddresses is cfg with the learned addresses first, then the
// config's own that the cache lacks (an address the operator wrote may be
// one the controllers do not advertise).
func withCachedAddresses(cfg pki.ClientConfig, configPath string) pki.ClientConfig {
	cached := readAddressCache(configPath)
	if len(cached) == 0 {
		return cfg
	}
	merged := slices.Clone(cached)
	for _, a := range cfg.Controllers {
		if !slices.Contains(merged, a) {
			merged = append(merged, a)
		}
	}
	for _, a := range merged {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return cfg // a damaged cache is ignored, not fatal
		}
	}
	cfg.Controllers = merged
	return cfg
}
