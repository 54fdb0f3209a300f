package charm

import "strings"

// ParseKeyValues parses KEY=VALUE arguments (such as `ctl config kv
// port=8080`). Each argument is split at its first "="; the key must be a
// valid option name (see ValidOptionName); the value may be empty and may
// contain "=". A key given twice is an error. Errors name the argument.
func ParseKeyValues(args []string) (map[string]string, error) {
	kv := make(map[string]string, len(args))
	for _, arg := range args {
		key, value, ok := strings.Cut(arg, "=")
		switch {
		case !ok:
			return nil, invalidf("argument %q: want KEY=VALUE", arg)
		case key == "":
			return nil, invalidf("argument %q: the key is empty", arg)
		case !ValidOptionName(key):
			return nil, invalidf("argument %q: key %q is invalid: use letters and digits, starting with a letter, with single - _ or . between them", arg, key)
		}
		if _, dup := kv[key]; dup {
			return nil, invalidf("argument %q: key %q is given twice", arg, key)
		}
		kv[key] = value
	}
	return kv, nil
}
