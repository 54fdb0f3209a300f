package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func configCommand(e *env) *cobra.Command {
	var reset []string
	cmd := &cobra.Command{
		Use:   "config SERVICE [KEY | KEY=VALUE...]",
		Short: "Show or change a service's configuration",
		Long: `Show or change a service's configuration, as its charm's config.yaml declares
it.

With SERVICE alone, list every option: its value, type, default and
description. With one KEY, print that option's value. With KEY=VALUE
settings, set them (values are typed by the charm: int, float, boolean or
string); --reset KEY (repeatable) returns options to their defaults. Printing
and changing do not mix.

Example:
  ctl config kv
  ctl config kv port
  ctl config kv port=7071
  ctl config kv --reset port`,
		Args: argsRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			service, rest := args[0], args[1:]
			var keys, settings []string
			for _, a := range rest {
				if strings.Contains(a, "=") {
					settings = append(settings, a)
				} else {
					keys = append(keys, a)
				}
			}
			switch {
			case len(keys) > 0 && (len(settings) > 0 || len(reset) > 0):
				return usagef(cmd, "give one KEY to print it, or KEY=VALUE settings and --reset KEY to change them, not both")
			case len(keys) > 1:
				return usagef(cmd, "give one KEY to print, not %d (%s)", len(keys), strings.Join(keys, ", "))
			case len(keys) == 1:
				return printOption(cmd, e, service, keys[0])
			case len(settings) == 0 && len(reset) == 0:
				return listConfig(cmd, e, service)
			}
			set, err := charm.ParseKeyValues(settings)
			if err != nil {
				return usageError{cmd: cmd, err: err}
			}
			for _, k := range reset {
				if !charm.ValidOptionName(k) {
					return usagef(cmd, "--reset %q: not an option name", k)
				}
				if _, ok := set[k]; ok {
					return usagef(cmd, "option %q is both set and reset", k)
				}
			}
			return setConfig(cmd, e, service, set, reset)
		},
	}
	cmd.Flags().StringArrayVar(&reset, "reset", nil, "return option `KEY` to its default (repeatable)")
	return cmd
}

func getConfig(cmd *cobra.Command, c *client, service string) (*pb.GetConfigResponse, error) {
	ctx, cancel := callContext(cmd.Context())
	defer cancel()
	resp, err := c.op.GetConfig(ctx, &pb.GetConfigRequest{Service: service})
	return resp, c.check(err)
}

func printOption(cmd *cobra.Command, e *env, service, key string) error {
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	resp, err := getConfig(cmd, c, service)
	if err != nil {
		return err
	}
	for _, o := range resp.Options {
		if o.Name == key {
			fmt.Fprintln(e.stdout, charm.FormatValue(resp.Values[key]))
			return nil
		}
	}
	return fmt.Errorf("service %s has no config option %q", service, key)
}

func listConfig(cmd *cobra.Command, e *env, service string) error {
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	resp, err := getConfig(cmd, c, service)
	if err != nil {
		return err
	}
	return renderConfig(e.stdout, service, resp)
}

// renderConfig lists a service's options in a table. An option without a
// value shows "-"; an empty string shows "".
func renderConfig(w io.Writer, service string, resp *pb.GetConfigResponse) error {
	if len(resp.Options) == 0 {
		_, err := fmt.Fprintf(w, "service %s has no config options\n", service)
		return err
	}
	opts := append([]*pb.ConfigOption(nil), resp.Options...)
	sort.Slice(opts, func(i, j int) bool { return opts[i].Name < opts[j].Name })
	tw := newTable(w)
	fmt.Fprintln(tw, "Option\tValue\tType\tDefault\tDescription")
	for _, o := range opts {
		desc := strings.Join(strings.Fields(o.Description), " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.Name, configCell(resp.Values[o.Name]), o.Type, configCell(o.Default), desc)
	}
	return tw.Flush()
}

func configCell(v *pb.ConfigValue) string {
	if v.GetValue() == nil {
		return "-"
	}
	s := charm.FormatValue(v)
	if _, isString := v.GetValue().(*pb.ConfigValue_StringValue); isString && (s == "" || s == "-" || strings.ContainsAny(s, " \t\n")) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func setConfig(cmd *cobra.Command, e *env, service string, set map[string]string, reset []string) error {
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := callContext(cmd.Context())
	defer cancel()
	if _, err := c.op.SetConfig(ctx, &pb.SetConfigRequest{Service: service, Set: set, Unset: reset}); err != nil {
		return c.check(err)
	}
	var changes []string
	for k := range set {
		changes = append(changes, k)
	}
	sort.Strings(changes)
	for _, k := range reset {
		changes = append(changes, k+" (reset)")
	}
	fmt.Fprintf(e.stdout, "updated the config of %s: %s\n", service, strings.Join(changes, ", "))
	return nil
}
