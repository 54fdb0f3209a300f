package hostexec

import (
	"fmt"
	"testing"
)

// BenchmarkSupervisorPoll measures one pass of Run's watch over 100
// running daemons (reading each one's /proc/<pid>/stat and log size).
func BenchmarkSupervisorPoll(b *testing.B) {
	s, err := NewSupervisor(testConfig(b, b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Ensure(fmt.Sprintf("u/%d", i), Daemon{Name: "srv", Command: []string{"sleep", "1000"}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for i := range 100 {
			s.StopAll(fmt.Sprintf("u/%d", i))
		}
	})
	b.ResetTimer()
	for b.Loop() {
		s.poll()
	}
}

// BenchmarkWriteFileUnchanged measures WriteFile of a file already so:
// what a pruned-away revision change would cost if it were not pruned.
func BenchmarkWriteFileUnchanged(b *testing.B) {
	dir := b.TempDir()
	f := File{Path: "app.conf", Content: make([]byte, 4096)}
	if _, err := WriteFile(dir, f); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if changed, err := WriteFile(dir, f); err != nil || changed {
			b.Fatal(changed, err)
		}
	}
}

// BenchmarkEnsureUnchanged measures Ensure of a daemon running with the
// same spec.
func BenchmarkEnsureUnchanged(b *testing.B) {
	s, err := NewSupervisor(testConfig(b, b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	d := Daemon{Name: "srv", Command: []string{"sleep", "1000"}, Env: map[string]string{"A": "1", "B": "2"}}
	if _, err := s.Ensure("u/0", d); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.StopAll("u/0") })
	for b.Loop() {
		if changed, err := s.Ensure("u/0", d); err != nil || changed {
			b.Fatal(changed, err)
		}
	}
}
