// Package apiclient connects ctl and the agents to a controller: TLS pinned
// to the controller's CA, the caller's credential on every call, and every
// known controller address to fail over between.
//
// It holds no state beyond the connection it returns, and knows nothing of
// what the API's methods do.
package apiclient
