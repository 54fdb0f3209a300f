package manifest

import (
	"fmt"
	"strconv"
	"strings"
)

// Describe says what an action does, on one line, as a plan shows it:
// "create service web: charm ./charms/app (sha256 1f2e3d4c5b6a), 2 units,
// config port=8080".
func (a Action) Describe() string {
	switch a.Kind {
	case ActCreateService:
		s := fmt.Sprintf("create service %s: charm %s (sha256 %s), %s", a.Service, a.Charm, short(a.CharmSHA256), countText(a.Count, "unit"))
		if a.To != "" {
			s += " on machine " + a.To
		}
		if len(a.Config) > 0 {
			var kv []string
			for _, k := range sortedKeys(a.Config) {
				kv = append(kv, k+"="+valueText(a.Config[k]))
			}
			s += ", config " + strings.Join(kv, " ")
		}
		return s
	case ActRefreshCharm:
		if a.SwitchCharm {
			return fmt.Sprintf("switch service %s from charm %s to charm %s (sha256 %s)", a.Service, a.OldCharm, a.Charm, short(a.CharmSHA256))
		}
		return fmt.Sprintf("refresh service %s to charm %s (sha256 %s, was %s)", a.Service, a.Charm, short(a.CharmSHA256), short(a.OldCharmSHA256))
	case ActSetConfig:
		var cs []string
		for _, c := range a.Changes {
			cs = append(cs, fmt.Sprintf("%s: %s → %s", c.Key, valueText(c.Old), valueText(c.New)))
		}
		return fmt.Sprintf("set config of %s: %s", a.Service, strings.Join(cs, ", "))
	case ActAddUnits:
		s := fmt.Sprintf("add %s to %s", countText(a.Count, "unit"), a.Service)
		if a.To != "" {
			s += " on machine " + a.To
		}
		return s
	case ActRemoveUnits:
		return fmt.Sprintf("remove %s of %s: %s", countText(a.Count, "unit"), a.Service, strings.Join(a.Units, ", "))
	case ActAddRelation:
		var eps []string
		for _, e := range a.Endpoints {
			eps = append(eps, valueText(e))
		}
		return "add relation " + strings.Join(eps, " ")
	case ActAddMachines:
		kind := "machine"
		if a.Manual {
			kind = "manual machine"
		}
		return "add " + countText(a.Count, kind)
	case ActPlugin:
		s := a.Plugin.Name
		if a.Plugin.Description != "" {
			s += ": " + a.Plugin.Description
		}
		return s
	case ActDestroyService:
		return "destroy service " + a.Service
	case ActDestroyRelation:
		var eps []string
		for _, e := range a.Endpoints {
			eps = append(eps, valueText(e))
		}
		return "destroy relation " + strings.Join(eps, " ")
	case ActDestroyMachine:
		return "destroy machine " + strings.Join(a.Units, ", ")
	case ActPluginState:
		return "the plugin's actions are known after apply: its configuration reads a dependency's state"
	}
	return a.Kind
}

// short is the first 12 hex digits of a digest.
func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	if d == "" {
		return "none"
	}
	return d
}

// countText is "2 units", "1 unit" or "(known after apply) units".
func countText(n any, noun string) string {
	if i, ok := n.(int64); ok {
		if i == 1 {
			return "1 " + noun
		}
		return strconv.FormatInt(i, 10) + " " + noun + "s"
	}
	return valueText(n) + " " + noun + "s"
}

// valueText is a value as a plan shows it: text quoted, unset as
// "(unset)".
func valueText(v any) string {
	switch x := v.(type) {
	case nil:
		return "(unset)"
	case Unknown:
		return x.String()
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
