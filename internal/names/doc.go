// Package names owns the syntax of the names Lifeline's entities go by —
// services, units, machines, endpoints, users — and of the tags that name
// agents and users in credentials.
//
// It is the one place those rules are written, so that the model (state),
// charms (charm) and credentials (pki) agree. It depends on nothing but the
// standard library and holds no state.
package names
