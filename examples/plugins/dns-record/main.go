// Command dns-record is an example Lifeline plugin standing in for a DNS
// provider: the resource type "a DNS record NAME → ADDRESS". The records
// of a zone live in records.json under the writable plug "zone" (a
// directory); a real plugin would call its provider's API where this one
// reads and writes that file.
//
// Its config is {name, address, ttl}. It is VALID when the zone holds the
// record as configured, and STALE with a "create" or "update" action
// otherwise. With no argument it answers init, with "state" the state
// action, with "set" it runs either action.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// schema is the config a resource of this type takes.
const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["name", "address"],
  "properties": {
    "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
    "address": {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "string", "format": "ipv6"}]},
    "ttl": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 300}
  }
}`

// zoneEnv is the variable through which Lifeline hands over the plug
// "zone": LIFELINE_PLUG_ and the plug's name in upper case.
const zoneEnv = "LIFELINE_PLUG_ZONE"

type message struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Version string `json:"version"`
	Verbose bool   `json:"verbose"`
	Config  record `json:"config"`
}

// record is a DNS record as the config names it and as the zone keeps it.
type record struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	TTL     int    `json:"ttl,omitempty"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dns-record:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	var m message
	if err := json.NewDecoder(stdin).Decode(&m); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if len(args) == 0 {
		return answer(stdout, map[string]any{
			"config_schema": json.RawMessage(schema),
			"plugs": map[string]any{
				"zone": map[string]any{"container_path": "/zone", "optional": false, "writable": true},
			},
			"state_action": map[string]any{"args": []string{"state"}},
		})
	}
	dir := os.Getenv(zoneEnv)
	if dir == "" {
		return errors.New(zoneEnv + " is not set: the plug \"zone\" was not handed over")
	}
	want := m.Config
	if want.TTL == 0 {
		want.TTL = 300
	}
	if m.Verbose {
		fmt.Fprintf(os.Stderr, "dns-record: zone %s, record %s\n", dir, want.Name)
	}
	switch args[0] {
	case "state":
		zone, err := withZone(dir, false, nil)
		if err != nil {
			return err
		}
		return answer(stdout, state(zone, want))
	case "set":
		_, err := withZone(dir, true, func(zone map[string]record) { zone[want.Name] = want })
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s → %s (ttl %d)\n", want.Name, want.Address, want.TTL)
		return nil
	}
	return fmt.Errorf("unknown action %q", args[0])
}

func state(zone map[string]record, want record) map[string]any {
	have, ok := zone[want.Name]
	if ok && have == want {
		return map[string]any{"status": "VALID", "state": want}
	}
	action := map[string]any{
		"name":        "create",
		"description": fmt.Sprintf("create %s → %s (ttl %d)", want.Name, want.Address, want.TTL),
		"args":        []string{"set"},
	}
	out := map[string]any{"status": "STALE", "actions": []any{action}}
	if ok {
		action["name"] = "update"
		action["description"] = fmt.Sprintf("update %s: %s → %s, ttl %d → %d", want.Name, have.Address, want.Address, have.TTL, want.TTL)
		out["staleState"] = have
	}
	return out
}

// withZone reads the zone's records under a lock on the zone (shared to
// read, exclusive to change), and when change is given applies it and
// writes the records back atomically. Resources applied in parallel may
// share a zone; the lock keeps one from losing another's record.
func withZone(dir string, exclusive bool, change func(map[string]record)) (map[string]record, error) {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(lock.Fd()), how); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "records.json")
	zone := map[string]record{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, &zone); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if change == nil {
		return zone, nil
	}
	change(zone)
	b, err = json.MarshalIndent(zone, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	return zone, os.Rename(tmp, path)
}

func answer(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
