package e2etest

import "testing"

// TestPortsNeverRepeat checks that no port is handed out twice in one
// process, even though each is closed again before it is returned: a
// sandbox's controller port is chosen long before the controller binds it,
// and an etcd cluster's ports are chosen in between.
func TestPortsNeverRepeat(t *testing.T) {
	seen := make(map[int]bool)
	add := func(p int) {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	for range 200 {
		p := FreePorts(t)
		add(p)
		add(p + 1)
		add(p + 2)
		for _, q := range FreeLoopbackPorts(t, 3) {
			add(q)
		}
	}
}
