package gen

import "math"

// Pacer spaces packets at a rate without a timer per packet: the owner
// asks, once per round, how many packets are due by now (Due) and sends
// them as one batch; between rounds it sleeps until the next is due
// (Next). Time is in ns of any monotonic clock. A zero rate is unpaced:
// every packet is due at once.
type Pacer struct {
	rate  float64 // packets per ns
	start int64
}

// NewPacer paces pps packets a second from start.
func NewPacer(pps float64, start int64) Pacer {
	return Pacer{rate: pps / 1e9, start: start}
}

// Due is how many packets should have been sent by now, counting the
// first, due at start.
func (p Pacer) Due(now int64) uint64 {
	if p.rate == 0 {
		return math.MaxUint64
	}
	if now < p.start {
		return 0
	}
	return uint64(float64(now-p.start)*p.rate) + 1
}

// Next is when packet n (0-based: the n+1-th) is due.
func (p Pacer) Next(n uint64) int64 {
	if p.rate == 0 || n == 0 {
		return p.start
	}
	t := p.start + int64(math.Ceil(float64(n)/p.rate))
	// Floating-point rounding may put t a ns off Due's step.
	for p.Due(t) < n+1 {
		t++
	}
	for t > p.start && p.Due(t-1) >= n+1 {
		t--
	}
	return t
}
