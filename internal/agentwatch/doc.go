// Package agentwatch follows AgentService watch subjects for an agent: it
// reconnects after every interruption, resuming after the last revision
// it delivered, so that the agent sees every change once and in order.
// Follow watches one subject on a stream of its own (Watch); a Mux
// carries many on one stream (WatchMany): an agent's, and those of the
// agents that follow as themselves on it (Mux.ForAgent), units of one service
// sharing one subscription of each subject the controller serves them
// alike (their service's, and their relations'). An agent's credential
// may be replaced while it follows (Mux.ForRenewableAgent): a subscription the
// controller refuses as Unauthenticated is reported to the credential's
// holder and made again, after a pause, with the credential current then.
// A Group follows an agent's subjects on a Mux with one goroutine for
// them all. A Mux serves its Follows while its owner runs Mux.Run.
//
// It owns only the stream's life; what a change means is its caller's.
package agentwatch
