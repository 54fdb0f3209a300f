package state

import (
	"strconv"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// The keyspace, relative to the configured namespace. Every entity has one
// key; every reference another rule depends on has its own key too, so that
// "has none" is a prefix-empty comparison rather than a shared counter.
// Prefixes end in "/" so that machine 3 never sees machine 30's keys.
const (
	machinesPrefix  = "machines/"
	servicesPrefix  = "services/"
	unitsPrefix     = "units/"
	relationsPrefix = "relations/"
	scopesPrefix    = "scopes/"
	settingsPrefix  = "settings/"
	configPrefix    = "config/"
	relkeysPrefix   = "relkeys/"
	statusPrefix    = "status/"
	cleanupsPrefix  = "cleanups/"
	seqPrefix       = "seq/"

	refMachineUnits      = "refs/machine-units/"       // <machine>/<unit>: principals assigned
	refMachineAliveUnits = "refs/machine-alive-units/" // <machine>/<unit>: the alive ones among them
	refServiceRelations  = "refs/service-relations/"   // <service>/<relation-id>
	refSubordinates      = "refs/subordinates/"        // <principal>/<unit>
	refUnitScopes        = "refs/unit-scopes/"         // <unit>/<relation-id>
)

// EntityPrefixes are the prefixes under which the model's entities, their
// references and their records live. When the model is empty none of them
// holds a key; only the id sequences (which must never be reused) remain.
var EntityPrefixes = append([]string{
	machinesPrefix, servicesPrefix, unitsPrefix, relationsPrefix, scopesPrefix,
	settingsPrefix, configPrefix, relkeysPrefix, statusPrefix, cleanupsPrefix, "refs/",
	resolvedPrefix, statusHistoryPrefix, machineJoinsPrefix, hostReportsPrefix, hostPortsPrefix,
}, append(append(revisionPrefixes, leadershipPrefixes...), appSettingsPrefix)...)

// modelPrefixes are what Snapshot reads: everything but charm archives,
// and of the controllers' keys the model's CA and the join tokens. The
// users, their registrations, the audit log and the operations are read
// too, though not among EntityPrefixes: they outlast the model's
// entities.
var modelPrefixes = append(append([]string{seqPrefix, credentialsPrefix, charmsPrefix, charmShasPrefix, caPrefix, controllerJoinsPrefix, BarrierKey,
	usersPrefix, registrationsPrefix, auditPrefix, ownersPrefix, ownedPrefix}, operationPrefixes...), EntityPrefixes...)

// MachineKey is the key of machine id.
func MachineKey(id string) string { return machinesPrefix + id }

// ServiceKey is the key of the named service.
func ServiceKey(name string) string { return servicesPrefix + name }

// ServiceConfigKey is the key of the named service's configuration.
func ServiceConfigKey(name string) string { return configPrefix + name }

// UnitKey is the key of the named unit ("kv/0").
func UnitKey(name string) string { return unitsPrefix + name }

// ServiceUnitsPrefix is the prefix of the service's units.
func ServiceUnitsPrefix(service string) string { return unitsPrefix + service + "/" }

// RelationKey is the key of relation id.
func RelationKey(id int64) string { return relationsPrefix + strconv.FormatInt(id, 10) }

// ScopePrefix is the prefix of the units in relation id's scope.
func ScopePrefix(relation int64) string {
	return scopesPrefix + strconv.FormatInt(relation, 10) + "/"
}

// ScopeKey is the key saying unit is in relation id's scope.
func ScopeKey(relation int64, unit string) string { return ScopePrefix(relation) + unit }

// SettingsPrefix is the prefix of the unit settings of relation id.
func SettingsPrefix(relation int64) string {
	return settingsPrefix + strconv.FormatInt(relation, 10) + "/"
}

// SettingsServicePrefix is the prefix of the settings of service's units
// in relation id: unit names carry their service ("kv/0"), so the keys of
// one side of a relation share it.
func SettingsServicePrefix(relation int64, service string) string {
	return SettingsPrefix(relation) + service + "/"
}

// SettingsKey is the key of unit's settings in relation id.
func SettingsKey(relation int64, unit string) string { return SettingsPrefix(relation) + unit }

// StatusKey is the key of an entity's status of the given kind.
func StatusKey(kind StatusKind, id string) string { return statusPrefix + string(kind) + "/" + id }

func relkeyKey(key string) string                  { return relkeysPrefix + key }
func cleanupKey(kind string, target string) string { return cleanupsPrefix + kind + "/" + target }
func machineUnitRef(m, u string) string            { return refMachineUnits + m + "/" + u }
func machineUnitsPrefix(m string) string           { return refMachineUnits + m + "/" }
func machineAliveRef(m, u string) string           { return refMachineAliveUnits + m + "/" + u }
func machineAlivePrefix(m string) string           { return refMachineAliveUnits + m + "/" }
func subordinateRef(p, u string) string            { return refSubordinates + p + "/" + u }
func subordinatesPrefix(p string) string           { return refSubordinates + p + "/" }
func unitScopeRef(u string, rel int64) string {
	return unitScopesPrefix(u) + strconv.FormatInt(rel, 10)
}
func unitScopesPrefix(u string) string       { return refUnitScopes + u + "/" }
func serviceRelationsPrefix(s string) string { return refServiceRelations + s + "/" }
func serviceRelationRef(s string, rel int64) string {
	return serviceRelationsPrefix(s) + strconv.FormatInt(rel, 10)
}

// Sequences. Their keys are never deleted: ids are never reused (I7).
const (
	seqMachine  = seqPrefix + "machine"
	seqRelation = seqPrefix + "relation"
)

func seqUnitKey(service string) string { return seqPrefix + "unit/" + service }

// prefixEnd is the first key after every key with the prefix.
func prefixEnd(prefix string) string { return etcdkv.PrefixEnd(prefix) }

// lastSegment returns what follows the last "/" of key.
func lastSegment(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// The checks of names, as state's errors of kind ErrInvalid.
func checkServiceName(name string) error { return asInvalid(names.CheckService(name)) }
func checkUnitName(name string) error    { return asInvalid(names.CheckUnit(name)) }
func checkMachineID(id string) error     { return asInvalid(names.CheckMachine(id)) }

func asInvalid(err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: ErrInvalid, msg: err.Error()}
}

func unitName(service string, n int64) string { return names.Unit(service, n) }
