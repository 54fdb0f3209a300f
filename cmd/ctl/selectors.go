package main

import (
	"fmt"
	"slices"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxSelectors bounds the names of one ctl status, as the controller
// does.
const maxSelectors = 100

// statusSelection parses ctl status's arguments, as juju status takes
// them: a service (kv), a unit (kv/0), a machine (3, or "machine 3"). A
// word "machine" followed by a machine's id selects that machine;
// alone, or before anything else, it is a service's name. Names repeated
// are selected once.
func statusSelection(args []string) (services, units, machines []string, err error) {
	add := func(list *[]string, name string) {
		if !slices.Contains(*list, name) {
			*list = append(*list, name)
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "machine" && i+1 < len(args) && names.ValidMachine(args[i+1]):
			add(&machines, args[i+1])
			i++
		case names.ValidMachine(a):
			add(&machines, a)
		case names.ValidUnit(a):
			add(&units, a)
		case names.ValidService(a):
			add(&services, a)
		default:
			return nil, nil, nil, fmt.Errorf("selector %q: want a service (kv), a unit (kv/0) or a machine (3)", a)
		}
	}
	if n := len(services) + len(units) + len(machines); n > maxSelectors {
		return nil, nil, nil, fmt.Errorf("%d selectors: at most %d", n, maxSelectors)
	}
	return services, units, machines, nil
}

// statusRequest is the request of a ctl status with the selection.
func statusRequest(services, units, machines []string) *pb.StatusRequest {
	return &pb.StatusRequest{Services: services, Units: units, Machines: machines}
}
