package main

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestShowUnitHostDocument: show-unit's document carries the unit's host
// as reported, in JSON and YAML alike, and leaves it out before any
// report.
func TestShowUnitHostDocument(t *testing.T) {
	u := &pb.UnitDetail{Name: "kv/0", Service: "kv", Life: "alive", Machine: "0",
		Agent: &pb.StatusDetail{Status: "idle"}, Workload: &pb.StatusDetail{Status: "active"},
		HostRevision: 3, HostReportedUnixNano: 1_700_000_000_000_000_000,
		HostClaims: &pb.HostClaimsReport{Ports: []string{"8080/tcp"}, OpenedPorts: []string{"9000-9010/udp"},
			Files: []string{"/etc/kv.conf"}, Packages: []*pb.HostPackage{{Name: "jq", Version: "1.6*"}}, Daemons: []string{"kv"}},
		HostConflicts: []string{"port 8080/tcp is claimed by app/0: kept revision 3"},
		LastJob: &pb.HostJob{Job: "host-claims", Revision: 3, Run: 2, Changed: 1, Pruned: 4, TasksCut: 1,
			Tasks: []*pb.HostTask{{Kind: "manage", Target: "/etc/kv.conf", Outcome: "changed"}}},
		Daemons: []*pb.DaemonReport{{Name: "kv", State: "running", Pid: 42, Restarts: 2, SinceUnixNano: 1_700_000_000_000_000_000}},
	}
	var out bytes.Buffer
	if err := writeDocument(&out, map[string]any{"kv/0": unitDocument(u)}, formatJSON); err != nil {
		t.Fatal(err)
	}
	want := `  "host": {
      "revision": 3,
      "reported": "2023-11-14T22:13:20Z",
      "claims": {
        "ports": [
          "8080/tcp"
        ],
        "opened_ports": [
          "9000-9010/udp"
        ],
        "files": [
          "/etc/kv.conf"
        ],
        "packages": [
          {
            "name": "jq",
            "version": "1.6*"
          }
        ],
        "daemons": [
          "kv"
        ]
      },
      "conflicts": [
        "port 8080/tcp is claimed by app/0: kept revision 3"
      ],
      "last_job": {
        "job": "host-claims",
        "revision": 3,
        "run": 2,
        "changed": 1,
        "pruned": 4,
        "tasks": [
          {
            "kind": "manage",
            "target": "/etc/kv.conf",
            "outcome": "changed"
          }
        ],
        "tasks_cut": 1
      },
      "daemons": [
        {
          "name": "kv",
          "state": "running",
          "pid": 42,
          "restarts": 2,
          "since": "2023-11-14T22:13:20Z"
        }
      ]
    }`
	if !strings.Contains(out.String(), want) {
		t.Errorf("show-unit --format json said:\n%s\nwant it to hold\n%s", out.String(), want)
	}
	out.Reset()
	if err := writeDocument(&out, map[string]any{"kv/0": unitDocument(u)}, formatYAML); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n  host:\n", "\n      opened_ports:\n        - 9000-9010/udp\n", "\n        - kind: manage\n          target: /etc/kv.conf\n          outcome: changed\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show-unit (yaml) said:\n%s\nwant it to hold %q", out.String(), want)
		}
	}

	u.HostRevision, u.HostReportedUnixNano, u.HostClaims, u.HostConflicts, u.LastJob, u.Daemons = 0, 0, nil, nil, nil, nil
	out.Reset()
	if err := writeDocument(&out, map[string]any{"kv/0": unitDocument(u)}, formatJSON); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), `"host"`) {
		t.Errorf("show-unit of a unit without a host report said:\n%s\nwant no host", out.String())
	}
}
