package fwd

import (
	"strings"
	"testing"
)

// TestSpinner plays dry spells through a spinner: 'c' a spin that caught
// a packet, 'm' one that ran out, '.' a dry spell it slept through at
// once. The default spins every time until spinGiveUp spins in a row
// caught nothing, then sleeps at once and probes with a spin every
// spinProbe-th dry spell, and spins every time again once a probe
// catches; --spin N never gives up; a negative spin never spins.
func TestSpinner(t *testing.T) {
	gaveUp := strings.Repeat(".", spinProbe-1)
	for _, tc := range []struct {
		name string
		spin int
		// outcome of each spin, in order; dry spells without a spin take
		// none.
		outcomes string
		want     string
	}{
		{"a burst: every spin", 0, "cmcmcm", "cmcmcm"},
		{"gives up after spinGiveUp misses", 0, strings.Repeat("m", spinGiveUp+2),
			strings.Repeat("m", spinGiveUp) + gaveUp + "m" + gaveUp + "m"},
		{"a caught probe spins again", 0, strings.Repeat("m", spinGiveUp) + "cmm",
			strings.Repeat("m", spinGiveUp) + gaveUp + "cmm"},
		{"one catch resets the count", 0, strings.Repeat("m", spinGiveUp-1) + "c" + strings.Repeat("m", spinGiveUp-1),
			strings.Repeat("m", spinGiveUp-1) + "c" + strings.Repeat("m", spinGiveUp-1)},
		{"--spin N never gives up", 64, strings.Repeat("m", 2*spinGiveUp), strings.Repeat("m", 2*spinGiveUp)},
		{"never", -1, "", "....."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpinner(tc.spin)
			var got strings.Builder
			outcomes := tc.outcomes
			for got.Len() < len(tc.want) {
				if !s.start() {
					got.WriteByte('.')
					continue
				}
				o := outcomes[0]
				outcomes = outcomes[1:]
				got.WriteByte(o)
				if o == 'c' {
					s.caught()
				} else {
					s.missed()
				}
			}
			if got.String() != tc.want {
				t.Fatalf("dry spells:\n got %s\nwant %s", got.String(), tc.want)
			}
		})
	}
}

// TestSpinnerRounds: a worker makes this many empty rounds in all before
// it sleeps: 64 by default, N with --spin N, and with no spin only the
// round that found the rings dry.
func TestSpinnerRounds(t *testing.T) {
	for _, tc := range []struct{ spin, empty int }{{0, defaultSpinRounds}, {8, 8}, {-1, 1}} {
		s := newSpinner(tc.spin)
		empty := 1
		for s.more(empty) {
			empty++
		}
		if empty != tc.empty {
			t.Errorf("spin %d: %d empty rounds before sleeping, want %d", tc.spin, empty, tc.empty)
		}
	}
}
