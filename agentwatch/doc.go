// Package agentwatch follows one AgentService watch subject for an agent:
// it reconnects after every interruption, resuming after the last revision
// it delivered, so that the agent sees every change once and in order.
//
// It owns only the stream's life; what a change means is its caller's.
package agentwatch
