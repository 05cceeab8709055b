package report

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestNiceTicks: every axis gets 4 to 8 labels, each a round value written
// exactly ("0.3", never "0.30000000000000004"), and no more decimals than
// the step needs.
func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi  float64
		maxDecs int
	}{
		{0, 0.8, 1}, {0, 1.55, 2}, {0, 3.2, 1}, {0, 16000, 0}, {0, 5200, 0}, {0, 126, 0}, {0, 120, 0}, {0, 0.0042, 4}, {0, 1, 1}, {0, 2.59, 1},
	} {
		var labels []string
		for _, tk := range (niceTicks{}).Ticks(c.lo, c.hi) {
			if tk.Label == "" {
				continue
			}
			labels = append(labels, tk.Label)
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-9*math.Max(1, c.hi) {
				t.Errorf("[%v, %v]: label %q for value %v", c.lo, c.hi, tk.Label, tk.Value)
			}
			if _, frac, ok := strings.Cut(tk.Label, "."); ok && len(frac) > c.maxDecs {
				t.Errorf("[%v, %v]: label %q has %d decimals, want ≤ %d", c.lo, c.hi, tk.Label, len(frac), c.maxDecs)
			}
			if tk.Value < c.lo || tk.Value > c.hi*(1+1e-9) {
				t.Errorf("[%v, %v]: tick %v outside the axis", c.lo, c.hi, tk.Value)
			}
		}
		if len(labels) < 4 || len(labels) > 8 {
			t.Errorf("[%v, %v]: %d labels %v, want 4..8", c.lo, c.hi, len(labels), labels)
		}
		t.Logf("[%v, %v]: %v", c.lo, c.hi, labels)
	}
}

// TestChartYMax: a percentage chart stops at 120 % (delivery.png ran past
// 160 %), unless a bar is taller; other charts keep room for the legend.
func TestChartYMax(t *testing.T) {
	for _, c := range []struct {
		top      float64
		series   int
		cap      float64
		min, max float64
	}{
		{100, 2, 120, 105, 120},
		{99.5, 2, 120, 105, 120},
		{130, 2, 120, 130, 140},
		{1, 10, 0, 2.4, 2.6},
	} {
		if y := chartYMax(c.top, c.series, c.cap); y < c.min || y > c.max {
			t.Errorf("chartYMax(%v, %d, %v) = %v, want %v..%v", c.top, c.series, c.cap, y, c.min, c.max)
		}
	}
}

func TestBarLabel(t *testing.T) {
	for v, want := range map[float64]string{0.132: "0.132", 0.0705: "0.0705", 2.59: "2.59", 35.1: "35.1", 812.4: "812", 0: "0", 16800: "16800"} {
		if got := barLabel(v); got != want {
			t.Errorf("barLabel(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestPaletteDistinct: the palette's colours differ (perf's
// TestChartColours checks that every chart's series fit in it).
func TestPaletteDistinct(t *testing.T) {
	seen := map[[3]uint8]int{}
	for i, c := range palette {
		k := [3]uint8{c.R, c.G, c.B}
		if j, ok := seen[k]; ok {
			t.Errorf("palette colours %d and %d are the same", j, i)
		}
		seen[k] = i
	}
}
