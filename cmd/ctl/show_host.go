package main

import (
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The host part of ctl show-unit's document: what the unit holds on its
// host through its host claims, as its agent last reported it.

type hostPackageDoc struct {
	Name    string `json:"name" yaml:"name"`
	Version string `json:"version,omitempty" yaml:"version,omitempty"`
}

type hostClaimsDoc struct {
	Ports       []string         `json:"ports" yaml:"ports"`
	OpenedPorts []string         `json:"opened_ports" yaml:"opened_ports"`
	Files       []string         `json:"files" yaml:"files"`
	Packages    []hostPackageDoc `json:"packages" yaml:"packages"`
	Daemons     []string         `json:"daemons" yaml:"daemons"`
}

type hostTaskDoc struct {
	Kind    string `json:"kind" yaml:"kind"`
	Target  string `json:"target" yaml:"target"`
	Outcome string `json:"outcome" yaml:"outcome"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

type hostJobDoc struct {
	Job      string        `json:"job" yaml:"job"`
	Revision int64         `json:"revision,omitempty" yaml:"revision,omitempty"`
	Run      int32         `json:"run" yaml:"run"`
	Changed  int32         `json:"changed" yaml:"changed"`
	Pruned   int32         `json:"pruned" yaml:"pruned"`
	Failed   string        `json:"failed,omitempty" yaml:"failed,omitempty"`
	Ended    string        `json:"ended,omitempty" yaml:"ended,omitempty"`
	Tasks    []hostTaskDoc `json:"tasks" yaml:"tasks"`
	TasksCut int32         `json:"tasks_cut,omitempty" yaml:"tasks_cut,omitempty"`
}

type daemonDoc struct {
	Name     string `json:"name" yaml:"name"`
	State    string `json:"state" yaml:"state"`
	Pid      int64  `json:"pid,omitempty" yaml:"pid,omitempty"`
	Restarts int32  `json:"restarts" yaml:"restarts"`
	Since    string `json:"since,omitempty" yaml:"since,omitempty"`
	LastExit string `json:"last_exit,omitempty" yaml:"last_exit,omitempty"`
}

// hostDoc is the unit's host: the revision whose packages and files are
// in place, its claims, the machine's refusals of them, its last job and
// its daemons.
type hostDoc struct {
	Revision  int64         `json:"revision" yaml:"revision"`
	Reported  string        `json:"reported,omitempty" yaml:"reported,omitempty"`
	Claims    hostClaimsDoc `json:"claims" yaml:"claims"`
	Conflicts []string      `json:"conflicts,omitempty" yaml:"conflicts,omitempty"`
	LastJob   *hostJobDoc   `json:"last_job,omitempty" yaml:"last_job,omitempty"`
	Daemons   []daemonDoc   `json:"daemons" yaml:"daemons"`
}

// hostDocument is the unit's host, nil when its agent has reported none.
func hostDocument(u *pb.UnitDetail) *hostDoc {
	if u.HostClaims == nil && u.LastJob == nil && u.Daemons == nil && u.HostReportedUnixNano == 0 && u.HostRevision == 0 {
		return nil
	}
	c := u.HostClaims
	d := &hostDoc{Revision: u.HostRevision, Reported: sinceText(u.HostReportedUnixNano), Conflicts: u.HostConflicts,
		Claims: hostClaimsDoc{Ports: nonNil(c.GetPorts()), OpenedPorts: nonNil(c.GetOpenedPorts()), Files: nonNil(c.GetFiles()),
			Packages: []hostPackageDoc{}, Daemons: nonNil(c.GetDaemons())},
		Daemons: []daemonDoc{}}
	for _, p := range c.GetPackages() {
		d.Claims.Packages = append(d.Claims.Packages, hostPackageDoc{Name: p.Name, Version: p.Version})
	}
	if j := u.LastJob; j != nil {
		jd := &hostJobDoc{Job: j.Job, Revision: j.Revision, Run: j.Run, Changed: j.Changed, Pruned: j.Pruned, Failed: j.Failed,
			Ended: sinceText(j.EndedUnixNano), Tasks: []hostTaskDoc{}, TasksCut: j.TasksCut}
		for _, t := range j.Tasks {
			jd.Tasks = append(jd.Tasks, hostTaskDoc{Kind: t.Kind, Target: t.Target, Outcome: t.Outcome, Message: t.Message})
		}
		d.LastJob = jd
	}
	for _, dm := range u.Daemons {
		d.Daemons = append(d.Daemons, daemonDoc{Name: dm.Name, State: dm.State, Pid: dm.Pid, Restarts: dm.Restarts,
			Since: sinceText(dm.SinceUnixNano), LastExit: dm.LastExit})
	}
	return d
}
