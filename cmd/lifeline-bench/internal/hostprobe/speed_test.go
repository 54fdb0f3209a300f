package hostprobe

import "testing"

func TestMeasureSpeed(t *testing.T) {
	// Small, to stay quick under the race detector; the run's are larger.
	p := MeasureSpeedOf(16, 1<<16, 1<<16)
	if p.HashNanosPerKiB <= 0 || p.ChaseNanosPerLoad <= 0 {
		t.Fatalf("speed probe %+v: want both figures above zero", p)
	}
	t.Logf("%s", p)
}
