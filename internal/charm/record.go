package charm

import (
	"sort"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Record describes the charm as the controller stores it: everything the
// model needs without unpacking the archive (actions.yaml as read, the
// static host claims placement checks). The archive's revision, sha256 and
// size are the store's to fill in.
func (c *Charm) Record() *pb.Charm {
	return &pb.Charm{
		Name:         c.Meta.Name,
		Summary:      c.Meta.Summary,
		Subordinate:  c.Meta.Subordinate,
		Endpoints:    c.Meta.Endpoints(),
		Options:      c.Config.OptionRecords(),
		Hooks:        append([]string(nil), c.Hooks...),
		ActionsYaml:  c.ActionsYAML,
		StaticClaims: c.Meta.Host.Static(),
	}
}

// OptionRecords returns the config's options, sorted by name, as stored.
func (c *Config) OptionRecords() []*pb.ConfigOption {
	if c == nil {
		return nil
	}
	out := make([]*pb.ConfigOption, 0, len(c.Options))
	for name, opt := range c.Options {
		out = append(out, &pb.ConfigOption{Name: name, Type: opt.Type, Default: toValue(opt.Default), Description: opt.Description})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ConfigFromOptions rebuilds a charm's Config from its stored options, to
// type and check values against it.
func ConfigFromOptions(opts []*pb.ConfigOption) *Config {
	c := &Config{Options: make(map[string]Option, len(opts))}
	for _, o := range opts {
		c.Options[o.Name] = Option{Type: o.Type, Default: ConfigValueOf(o.Default), Description: o.Description}
	}
	return c
}

// ConfigValueOf returns a configuration value as the Go value of its
// type (string, int64, float64, bool), nil when unset: what templates,
// hook tools and manifests read.
func ConfigValueOf(v *pb.ConfigValue) any {
	switch v := v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		return v.StringValue
	case *pb.ConfigValue_IntValue:
		return v.IntValue
	case *pb.ConfigValue_FloatValue:
		return v.FloatValue
	case *pb.ConfigValue_BoolValue:
		return v.BoolValue
	}
	return nil
}
