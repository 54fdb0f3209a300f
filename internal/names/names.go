package names

import (
	"fmt"
	"strconv"
	"strings"
)

// The rules below are the regular expressions in names_test.go, written
// out: names are checked on every call an agent makes, and a match of a
// regular expression cost a microsecond or more each.

func lower(c byte) bool { return 'a' <= c && c <= 'z' }
func digit(c byte) bool { return '0' <= c && c <= '9' }

// ValidService reports whether name can name a service: lowercase letters,
// digits and hyphens, starting with a letter, each hyphenated part holding a
// letter (so that "kv-2" cannot be mistaken for a unit), at most 63
// characters. Charm names follow the same rule.
func ValidService(name string) bool {
	if len(name) == 0 || len(name) > 63 || !lower(name[0]) {
		return false
	}
	letter := true // the part being read holds a letter
	for i := 1; i < len(name); i++ {
		switch c := name[i]; {
		case lower(c):
			letter = true
		case digit(c):
		case c == '-':
			if !letter {
				return false
			}
			letter = false
		default:
			return false
		}
	}
	return letter
}

// ValidMachine reports whether id can name a machine: a number without
// leading zeros.
func ValidMachine(id string) bool { return validNumber(id) }

// validNumber reports whether s is a number of at most 18 digits without
// leading zeros.
func validNumber(s string) bool {
	if s == "0" {
		return true
	}
	if len(s) == 0 || len(s) > 18 || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !digit(s[i]) {
			return false
		}
	}
	return true
}

// ValidUnit reports whether name can name a unit: "<service>/<number>".
func ValidUnit(name string) bool {
	svc, n, ok := strings.Cut(name, "/")
	return ok && ValidService(svc) && validNumber(n)
}

// ValidEndpoint reports whether name can name a relation endpoint or an
// interface: lowercase letters and digits, parts joined by "-" or "_",
// starting with a letter, at most 63 characters.
func ValidEndpoint(name string) bool {
	if len(name) == 0 || len(name) > 63 || !lower(name[0]) {
		return false
	}
	joined := false // the last character read was a "-" or "_"
	for i := 1; i < len(name); i++ {
		switch c := name[i]; {
		case lower(c) || digit(c):
			joined = false
		case c == '-' || c == '_':
			if joined {
				return false
			}
			joined = true
		default:
			return false
		}
	}
	return !joined
}

// UnitService returns the service part of a unit name.
func UnitService(unit string) string {
	svc, _, _ := strings.Cut(unit, "/")
	return svc
}

// UnitNumber returns the number part of a valid unit name.
func UnitNumber(unit string) int64 {
	_, n, _ := strings.Cut(unit, "/")
	v, _ := strconv.ParseInt(n, 10, 64)
	return v
}

// Unit returns the name of unit n of service.
func Unit(service string, n int64) string { return fmt.Sprintf("%s/%d", service, n) }

// Tags name the holders of credentials:
//
//	admin              the user admin, whom the first controller makes
//	user-<name>        any other user (an operator): "user-alice"
//	machine-<id>       a machine agent: "machine-3"
//	unit-<unit>        a unit agent: "unit-kv/0" (the unit's name as it is)
//
// The kind is what precedes the first "-" (kinds hold none) and the id all
// that follows it, unchanged, so a tag maps back to its entity's name
// whatever service names look like. The user admin keeps the tag "admin"
// that client configs carried before there were other users, so that they
// go on working: "user-admin" is not a tag, and each user has one.
const (
	AdminTag = "admin"

	KindUser    = "user"
	KindMachine = "machine"
	KindUnit    = "unit"
)

// AdminUser is the name of the user the first controller makes, with the
// admin role.
const AdminUser = "admin"

// ValidUser reports whether name can name a user: the syntax of service
// names.
func ValidUser(name string) bool { return ValidService(name) }

// UserTag returns the tag of the named user: AdminTag for the user admin,
// "user-<name>" for any other. It does not check name; ParseTag does.
func UserTag(name string) string {
	if name == AdminUser {
		return AdminTag
	}
	return KindUser + "-" + name
}

// MachineTag returns the tag of machine id's agent. It does not check id;
// ParseTag does.
func MachineTag(id string) string { return KindMachine + "-" + id }

// UnitTag returns the tag of unit's agent (unit as "kv/0"). It does not
// check unit; ParseTag does.
func UnitTag(unit string) string { return KindUnit + "-" + unit }

// ParseTag splits tag into its kind (KindUser, KindMachine or KindUnit) and
// id: the user's name ("admin" for AdminTag, "alice" for "user-alice"), the
// machine id ("3") for a machine, the unit name ("kv/0") for a unit.
// Anything else is an error.
func ParseTag(tag string) (kind, id string, err error) {
	if tag == AdminTag {
		return KindUser, AdminUser, nil
	}
	kind, id, _ = strings.Cut(tag, "-")
	switch kind {
	case KindUser:
		if id == AdminUser {
			return "", "", fmt.Errorf("invalid tag %q: the user admin's tag is %q", tag, AdminTag)
		}
		if ValidUser(id) {
			return kind, id, nil
		}
		return "", "", fmt.Errorf("invalid tag %q: want user-<name>", tag)
	case KindMachine:
		if ValidMachine(id) {
			return kind, id, nil
		}
		return "", "", fmt.Errorf("invalid tag %q: want machine-<number>", tag)
	case KindUnit:
		if ValidUnit(id) {
			return kind, id, nil
		}
		return "", "", fmt.Errorf("invalid tag %q: want unit-<service>/<number>", tag)
	}
	return "", "", fmt.Errorf("invalid tag %q: want admin, user-<name>, machine-<number> or unit-<service>/<number>", tag)
}

// CheckUser explains why name cannot name a user, or returns nil.
func CheckUser(name string) error {
	if !ValidUser(name) {
		return fmt.Errorf("invalid user name %q: use lowercase letters, digits and hyphens, starting with a letter", name)
	}
	return nil
}

// CheckService explains why name cannot name a service, or returns nil.
func CheckService(name string) error {
	if !ValidService(name) {
		return fmt.Errorf("invalid service name %q: use lowercase letters, digits and hyphens, starting with a letter", name)
	}
	return nil
}

// CheckUnit explains why name cannot name a unit, or returns nil.
func CheckUnit(name string) error {
	if !ValidUnit(name) {
		return fmt.Errorf("invalid unit name %q: want <service>/<number>", name)
	}
	return nil
}

// CheckMachine explains why id cannot name a machine, or returns nil.
func CheckMachine(id string) error {
	if !ValidMachine(id) {
		return fmt.Errorf("invalid machine id %q: want a number", id)
	}
	return nil
}
