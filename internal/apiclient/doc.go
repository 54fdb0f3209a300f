// Package apiclient connects ctl and the agents to a controller: TLS pinned
// to the controller's CA, the caller's credential on every call (one its
// holder may replace, told of the calls refused with it: AsRenewable), every
// known controller address to fail over between, and fixed flow-control
// windows (no bandwidth pings on connections that carry small bursts).
//
// The one call it makes itself is FetchCA's, a registration's first step:
// the model's CA, from a connection not yet verified, accepted only if it
// is the one a registration token pins.
//
// It holds no state beyond the connection it returns, and knows nothing
// else of what the API's methods do.
package apiclient
