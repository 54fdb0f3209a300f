package controller

import (
	"net"
	"testing"
)

// TestAddressOf: the per-address limit counts an IPv4 address as itself,
// an IPv4-mapped IPv6 one as its IPv4 address, and an IPv6 one by its
// /64, what one host is commonly given.
func TestAddressOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.2:5000", "127.0.0.2"},
		{"[::ffff:10.1.2.3]:5000", "10.1.2.3"},
		{"[2001:db8:1:2:aaaa::1]:5000", "2001:db8:1:2::"},
		{"[2001:db8:1:2:bbbb::9]:6000", "2001:db8:1:2::"},
		{"[2001:db8:1:3::1]:5000", "2001:db8:1:3::"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := addressOf(a).String(); got != tc.want {
			t.Errorf("addressOf(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}
