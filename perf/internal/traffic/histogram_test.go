package traffic

import (
	"math"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500e3}, {0.99, 990e3}, {0.999, 999e3}} {
		if got := h.Quantile(c.q); math.Abs(got-c.want)/c.want > 0.04 {
			t.Errorf("quantile(%v) = %.0f ns, want %.0f ± 4 %%", c.q, got, c.want)
		}
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		lo, hi := histBounds(histIndex(v))
		if v < lo || v >= hi {
			t.Fatalf("value %d outside its bucket [%d, %d)", v, lo, hi)
		}
	}
}
