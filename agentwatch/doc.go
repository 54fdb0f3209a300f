// Package agentwatch follows AgentService watch subjects for an agent: it
// reconnects after every interruption, resuming after the last revision
// it delivered, so that the agent sees every change once and in order.
// Follow watches one subject on a stream of its own (Watch); a Mux
// carries all of an agent's subjects on one stream (WatchMany).
//
// It owns only the stream's life; what a change means is its caller's.
package agentwatch
