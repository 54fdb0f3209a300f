package main

import (
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func showUnitCommand(e *env) *cobra.Command {
	var format string
	var history int
	cmd := &cobra.Command{
		Use:   "show-unit UNIT",
		Short: "Show everything known about a unit, with its relations' data",
		Long: `Show everything known about one unit, as juju show-unit does: its life,
machine, principal or subordinates, its agent's and its workload's status
and since when, the spec revision it runs (and the one it moves to), what a
dying unit waits for, each relation of its service with its endpoints, its
scope, whether the unit has joined it, the unit's settings in it and the
related units' (at most 20, related_units_cut saying how many more), the
unit's open tasks of operations, its last status changes, and its host as
its agent last reported it: the revision whose packages and files are in
place, its claims as rendered (ports declared and opened with open-port,
file paths, packages, daemons), conflicts that kept it back, its last host
job's tasks with their outcomes (run, changed and pruned counted; at most
200 listed, tasks_cut saying how many more) and its daemons' states.

--format yaml (the default, as juju's) or json:

  {"kv/0": {"service", "life", "machine", "charm", "charm_revision",
            "agent": {"status", "message", "since"}, "state",
            "workload": {"status", "message", "since"},
            "revision", "relations": [{"id", "key", "scope", "endpoint",
            "related_endpoints", "in_scope", "settings", "related_units"}],
            "open_tasks": [{"operation", "action", "state"}],
            "history": [{"time", "type", "status", "message"}],
            "host": {"revision", "reported", "claims": {"ports",
                     "opened_ports", "files", "packages", "daemons"},
                     "conflicts", "last_job": {"job", "revision", "run",
                     "changed", "pruned", "failed", "ended", "tasks":
                     [{"kind", "target", "outcome", "message"}]},
                     "daemons": [{"name", "state", "pid", "restarts",
                     "since", "last_exit"}]}}}

Example:
  ctl show-unit kv/0
  ctl show-unit kv/0 --format json --history 3`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != formatYAML && format != formatJSON {
				return usagef(cmd, "--format %q: want yaml or json", format)
			}
			if history < 0 || history > 100 {
				return usagef(cmd, "--history %d: want 1 to 100", history)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.ShowUnit(ctx, &pb.ShowUnitRequest{Unit: args[0], History: int32(history)})
			if err != nil {
				return c.check(err)
			}
			return writeDocument(e.stdout, map[string]any{resp.Unit.GetName(): unitDocument(resp.Unit)}, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatYAML, "yaml or json")
	cmd.Flags().IntVar(&history, "history", 0, "show the newest `N` status changes (default 10, at most 100)")
	return cmd
}

func showMachineCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show-machine MACHINE",
		Short: "Show everything known about a machine and its units",
		Long: `Show everything known about one machine: its life, instance, address,
whether it is manual, its agent's status and since when, what a dying
machine waits for, and its units, each principal followed by its
subordinates, with their agents' and workloads' status (at most 100,
units_cut saying how many more).

--format yaml (the default, as juju's) or json:

  {"3": {"life", "instance", "address", "manual",
         "agent": {"status", "message", "since"},
         "units": [{"name", "principal", "life", "agent", "workload",
                    "message", "revision"}]}}

Example:
  ctl show-machine 0
  ctl show-machine 0 --format json`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != formatYAML && format != formatJSON {
				return usagef(cmd, "--format %q: want yaml or json", format)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.ShowMachine(ctx, &pb.ShowMachineRequest{Machine: args[0]})
			if err != nil {
				return c.check(err)
			}
			return writeDocument(e.stdout, map[string]any{resp.Machine.GetId(): machineDocument(resp.Machine)}, format)
		},
	}
	cmd.Flags().StringVar(&format, "format", formatYAML, "yaml or json")
	return cmd
}

// sinceText is a status's since as a document shows it: RFC 3339 in UTC,
// "" when the status was never set.
func sinceText(unixNano int64) string {
	if unixNano == 0 {
		return ""
	}
	return time.Unix(0, unixNano).UTC().Format(time.RFC3339Nano)
}

type statusDetailDoc struct {
	Status  string `json:"status" yaml:"status"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
	Since   string `json:"since,omitempty" yaml:"since,omitempty"`
}

func statusDetailDocument(d *pb.StatusDetail) statusDetailDoc {
	return statusDetailDoc{Status: d.GetStatus(), Message: d.GetMessage(), Since: sinceText(d.GetSinceUnixNano())}
}

type historyDoc struct {
	Time    string            `json:"time" yaml:"time"`
	Type    string            `json:"type" yaml:"type"`
	Status  string            `json:"status" yaml:"status"`
	Message string            `json:"message,omitempty" yaml:"message,omitempty"`
	Data    map[string]string `json:"data,omitempty" yaml:"data,omitempty"`
}

type endpointDoc struct {
	Service   string `json:"service" yaml:"service"`
	Endpoint  string `json:"endpoint" yaml:"endpoint"`
	Role      string `json:"role,omitempty" yaml:"role,omitempty"`
	Interface string `json:"interface,omitempty" yaml:"interface,omitempty"`
}

func endpointDocument(ep *pb.RelationEndpointStatus) endpointDoc {
	return endpointDoc{Service: ep.GetService(), Endpoint: ep.GetEndpoint(), Role: ep.GetRole(), Interface: ep.GetInterface()}
}

type unitRelationDoc struct {
	ID               int64                        `json:"id" yaml:"id"`
	Key              string                       `json:"key" yaml:"key"`
	Life             string                       `json:"life" yaml:"life"`
	Scope            string                       `json:"scope" yaml:"scope"`
	Endpoint         endpointDoc                  `json:"endpoint" yaml:"endpoint"`
	RelatedEndpoints []endpointDoc                `json:"related_endpoints" yaml:"related_endpoints"`
	InScope          bool                         `json:"in_scope" yaml:"in_scope"`
	Settings         map[string]string            `json:"settings,omitempty" yaml:"settings,omitempty"`
	RelatedUnits     map[string]map[string]string `json:"related_units" yaml:"related_units"`
	RelatedUnitsCut  int32                        `json:"related_units_cut,omitempty" yaml:"related_units_cut,omitempty"`
}

type unitTaskDoc struct {
	Operation int64  `json:"operation" yaml:"operation"`
	Action    string `json:"action" yaml:"action"`
	State     string `json:"state" yaml:"state"`
}

// unitDetailDoc is ctl show-unit's document of one unit.
type unitDetailDoc struct {
	Service        string            `json:"service" yaml:"service"`
	Life           string            `json:"life" yaml:"life"`
	Machine        string            `json:"machine" yaml:"machine"`
	Principal      string            `json:"principal,omitempty" yaml:"principal,omitempty"`
	Subordinates   []string          `json:"subordinates,omitempty" yaml:"subordinates,omitempty"`
	Address        string            `json:"address,omitempty" yaml:"address,omitempty"`
	Charm          string            `json:"charm" yaml:"charm"`
	CharmRevision  int64             `json:"charm_revision" yaml:"charm_revision"`
	Agent          statusDetailDoc   `json:"agent" yaml:"agent"`
	State          string            `json:"state" yaml:"state"`
	Workload       statusDetailDoc   `json:"workload" yaml:"workload"`
	Revision       int64             `json:"revision,omitempty" yaml:"revision,omitempty"`
	TargetRevision int64             `json:"target_revision,omitempty" yaml:"target_revision,omitempty"`
	WaitingFor     []string          `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	Relations      []unitRelationDoc `json:"relations" yaml:"relations"`
	OpenTasks      []unitTaskDoc     `json:"open_tasks" yaml:"open_tasks"`
	History        []historyDoc      `json:"history" yaml:"history"`
	Host           *hostDoc          `json:"host,omitempty" yaml:"host,omitempty"`
}

func unitDocument(u *pb.UnitDetail) unitDetailDoc {
	d := unitDetailDoc{
		Service: u.Service, Life: u.Life, Machine: u.Machine, Principal: u.Principal, Subordinates: u.Subordinates,
		Address: u.Address, Charm: u.Charm, CharmRevision: u.CharmRevision,
		Agent: statusDetailDocument(u.Agent), State: u.State, Workload: statusDetailDocument(u.Workload),
		Revision: u.Revision, TargetRevision: u.TargetRevision, WaitingFor: u.WaitingFor,
		Relations: []unitRelationDoc{}, OpenTasks: []unitTaskDoc{}, History: []historyDoc{},
		Host: hostDocument(u),
	}
	for _, r := range u.Relations {
		rd := unitRelationDoc{ID: r.Id, Key: r.Key, Life: r.Life, Scope: r.Scope, Endpoint: endpointDocument(r.Endpoint),
			RelatedEndpoints: []endpointDoc{}, InScope: r.InScope, Settings: r.Settings,
			RelatedUnits: map[string]map[string]string{}, RelatedUnitsCut: r.RelatedUnitsCut}
		for _, ep := range r.RelatedEndpoints {
			rd.RelatedEndpoints = append(rd.RelatedEndpoints, endpointDocument(ep))
		}
		for _, ru := range r.RelatedUnits {
			rd.RelatedUnits[ru.Unit] = nonNilMap(ru.Settings)
		}
		d.Relations = append(d.Relations, rd)
	}
	for _, t := range u.OpenTasks {
		d.OpenTasks = append(d.OpenTasks, unitTaskDoc{Operation: t.Operation, Action: t.Action, State: t.State})
	}
	for _, h := range u.History {
		d.History = append(d.History, historyDoc{Time: sinceText(h.SinceUnixNano), Type: h.Kind, Status: h.Status,
			Message: h.Message, Data: h.Data})
	}
	return d
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

type machineUnitDoc struct {
	Name      string `json:"name" yaml:"name"`
	Principal string `json:"principal,omitempty" yaml:"principal,omitempty"`
	Life      string `json:"life" yaml:"life"`
	Agent     string `json:"agent" yaml:"agent"`
	Workload  string `json:"workload" yaml:"workload"`
	Message   string `json:"message,omitempty" yaml:"message,omitempty"`
	Revision  int64  `json:"revision,omitempty" yaml:"revision,omitempty"`
}

// machineDetailDoc is ctl show-machine's document of one machine.
type machineDetailDoc struct {
	Life       string           `json:"life" yaml:"life"`
	Instance   string           `json:"instance" yaml:"instance"`
	Address    string           `json:"address" yaml:"address"`
	Manual     bool             `json:"manual" yaml:"manual"`
	Forced     bool             `json:"forced,omitempty" yaml:"forced,omitempty"`
	Agent      statusDetailDoc  `json:"agent" yaml:"agent"`
	WaitingFor []string         `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	Units      []machineUnitDoc `json:"units" yaml:"units"`
	UnitsCut   int32            `json:"units_cut,omitempty" yaml:"units_cut,omitempty"`
}

func machineDocument(m *pb.MachineDetail) machineDetailDoc {
	d := machineDetailDoc{Life: m.Life, Instance: m.Instance, Address: m.Address, Manual: m.Manual, Forced: m.Forced,
		Agent: statusDetailDocument(m.Agent), WaitingFor: m.WaitingFor, Units: []machineUnitDoc{}, UnitsCut: m.UnitsCut}
	for _, u := range m.Units {
		d.Units = append(d.Units, machineUnitDoc{Name: u.Name, Principal: u.Principal, Life: u.Life, Agent: u.Agent,
			Workload: u.Workload, Message: u.Message, Revision: u.Revision})
	}
	return d
}
