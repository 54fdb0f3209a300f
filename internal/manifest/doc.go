// Package manifest owns manifests: one YAML file saying what should exist
// in the model (services, their units and configuration, relations,
// machines) and outside it (resources of plugin types, programs under
// exec:PATH). It parses a manifest, renders the Jinja templates in its
// resources' configuration, orders its resources by their dependencies,
// validates every configuration against its schema before anything
// touches the model, and plans: it compares the manifest with a snapshot of
// the model read through the OperatorService and says, per resource,
// whether it is VALID or STALE and which actions would make it VALID.
//
// It must not write to the model (planning reads only), talk to etcd, or
// link package state: ctl, which reaches the model only through the
// controller's API, builds on it. docs/MANIFESTS.md describes the format
// and what a plan shows.
package manifest
