// Package provider says what a machine's instance is, for the
// provisioner: Local runs each machine's agent as a process on this host,
// in its own session, with its own data directory and loopback address
// (in the network its machines' directory records: ClaimLocalNetwork);
// Manual starts nothing (operators bring their hosts with a join token).
//
// It knows nothing of the model: the provisioner (its parent package)
// decides which machines need an instance, and ctl uses Local alone to
// stop a local controller's machines. So ctl links no etcd code through
// it.
package provider
