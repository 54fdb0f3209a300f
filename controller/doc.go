// Package controller owns Lifeline's gRPC API: the OperatorService that ctl
// calls and the AgentService that machine and unit agents call, the
// authentication of every call by its credential and its authorization by
// what the caller is, the mapping of state's errors to status codes, the
// status ctl shows, and the API's metrics.
//
// It changes the model only through package state, never by writing to etcd
// itself, and it starts no listeners and no workers of its own: the
// composition root (cmd/lifelined) serves it and runs the cleaner. The
// goroutines it keeps between calls (workers.go) only run calls' handlers,
// and end when idle.
package controller
