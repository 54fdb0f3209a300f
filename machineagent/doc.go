// Package machineagent runs on every host: it keeps its machine present at
// the controller, runs a unit agent worker (package unitagent) for every
// unit assigned to its machine and for their subordinates, each with its own
// credential and data directory, removes its dead principal units (U5), and
// sets its dying machine dead once no unit is left (M3), then stops.
//
// It reaches the controller only through the AgentService methods it
// declares, and never talks to etcd. It does not start instances: that is
// the provisioner's job, in the controller.
package machineagent
