// The latency histogram of the request/response and latency workloads.

package traffic

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram is a log-linear latency histogram: 32 buckets per power of two
// (about 3 % resolution), safe for concurrent use.
type Histogram struct {
	b [2048]atomic.Uint64
}

const histSub = 32

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(v) - 6 // v>>e is in [32, 63]
	return e*histSub + int(v>>e)
}

// histBounds is the range of values that fall into bucket i.
func histBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i) + 1
	}
	e := i/histSub - 1
	sub := uint64(i%histSub + histSub)
	return sub << e, (sub + 1) << e
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	h.b[histIndex(uint64(max(d, 0)))].Add(1)
}

// quantile returns the q-quantile (0..1) in ns, the middle of its bucket.
func (h *Histogram) Quantile(q float64) float64 {
	var total uint64
	for i := range h.b {
		total += h.b[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var cum uint64
	for i := range h.b {
		cum += h.b[i].Load()
		if cum >= rank {
			lo, hi := histBounds(i)
			return float64(lo+hi) / 2
		}
	}
	return 0
}
