package gen

import (
	"math"
	"testing"
	"time"
)

// TestPacer: Due counts the packets due by a time, the first at the start;
// Next is the inverse; a zero rate is unpaced.
func TestPacer(t *testing.T) {
	const start = 1_000_000
	for _, tc := range []struct {
		name string
		pps  float64
		at   int64 // ns after start
		due  uint64
	}{
		{"before-start", 100e3, -1, 0},
		{"at-start", 100e3, 0, 1},
		{"just-before-second", 100e3, 9_999, 1},
		{"second", 100e3, 10_000, 2},
		{"one-second", 100e3, int64(time.Second), 100_001},
		{"1mpps-1ms", 1e6, int64(time.Millisecond), 1001},
		{"odd-rate", 3, int64(time.Second), 4},
		{"hour-at-10mpps", 10e6, int64(time.Hour), 36_000_000_001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPacer(tc.pps, start)
			if got := p.Due(start + tc.at); got != tc.due {
				t.Fatalf("Due(+%d ns) at %v pps = %d, want %d", tc.at, tc.pps, got, tc.due)
			}
		})
	}
	for _, pps := range []float64{1, 3, 7, 100e3, 1e6, 14.88e6} {
		p := NewPacer(pps, start)
		for n := uint64(0); n < 5000; n += 1 + n/3 {
			at := p.Next(n)
			if p.Due(at) < n+1 {
				t.Fatalf("%v pps: packet %d due at %d, but Due there is %d", pps, n, at, p.Due(at))
			}
			if at > start && p.Due(at-1) > n {
				t.Fatalf("%v pps: packet %d already due 1 ns before Next (%d)", pps, n, p.Due(at-1))
			}
		}
	}
	if p := NewPacer(0, start); p.Due(0) != math.MaxUint64 || p.Next(123) != start {
		t.Fatal("a zero rate is not unpaced")
	}
}

// TestNow: the clock is CLOCK_MONOTONIC and moves forward.
func TestNow(t *testing.T) {
	a := Now()
	var ts = monotonicRaw()
	b := Now()
	if ts < a-int64(time.Millisecond) || ts > b+int64(time.Millisecond) {
		t.Fatalf("CLOCK_MONOTONIC %d outside [%d, %d] ±1ms", ts, a, b)
	}
	if b < a {
		t.Fatalf("Now went back: %d then %d", a, b)
	}
}
