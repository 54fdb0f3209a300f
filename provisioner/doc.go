// Package provisioner starts an instance, running a machine agent, for
// every alive machine that has none, and for a dead machine stops its
// instance and removes the machine from the model (M4). Its providers
// (package provider) say what an instance is: a process on this host
// (Local) or nothing the controller starts (Manual).
//
// It follows the machines through one watch, keeping them in memory, and
// looks at them all after each change; dead machines are removed a few at
// once, beside the passes, which do not wait for them. Its writes go ahead
// of the agents' queued ones (state.WithPriority). The watch can be behind the
// provisioner's own writes, so before it starts, takes back or stops an
// instance it reads that machine from etcd and acts on what etcd says.
//
// It runs inside the controller and changes the model only through package
// state. It does not run agents' logic: it starts and stops their processes.
package provisioner
