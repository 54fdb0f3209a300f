// Package logship carries a daemon's log lines out of its process: Buffer
// is an hclog sink that keeps the newest lines in a bounded buffer, and
// Shipper sends them to the controller (AgentService.ShipLogs) in
// batches. Nothing here ever blocks the logger: a full buffer drops its
// oldest lines, a failed call drops its batch, and both are counted and
// told to the controller with the next batch. It does not touch etcd nor
// keep anything on disk.
package logship
