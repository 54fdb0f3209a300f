// Package controllertest runs a real controller API (over TLS on loopback,
// on the test package's etcd) for the tests of the packages that call it:
// agents, and end-to-end tests. Only tests import it.
package controllertest
