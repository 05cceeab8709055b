package gen

import (
	"math"
	"time"
)

// Pacer spaces packets at a rate without a timer per packet: the owner
// asks, once per round, how many packets to send now and when the next
// round is (Round), sends them as one batch and sleeps until then. Time is
// in ns of any monotonic clock. A zero rate is unpaced: every packet is
// due at once.
//
// A round sends at most a burst (Burst: what is due in a window, 1 ms by
// default, at least one packet), so packets go out one at a time at low
// rates and in bursts of at most a window's worth at high ones. The next
// round is when a whole burst is due again. A round that wakes late sends
// one burst and the next follows at once, catching up, but only while the
// debt is at most MaxDebt of packets: a pacer further behind (the machine
// did not run it) forgives its debt (Forgiven) rather than send it back
// to back, and goes on at the rate from there.
type Pacer struct {
	interval float64 // ns per packet; 0: unpaced
	start    int64
	burst    uint64
	// forgiven packets were due and never sent: Due counts from the
	// schedule moved on by them.
	forgiven uint64
}

// DefaultWindow is how long a round's burst lasts at most by default: the
// sleep a Go program can count on (a timer or nanosleep wakes tens of µs
// late on a busy machine).
const DefaultWindow = time.Millisecond

// MaxDebt is how far behind, in time, a pacer catches up.
const MaxDebt = 10 * time.Millisecond

// Interval is the time between two packets at pps packets a second, in
// ns, and whether the pacer can keep it: pps is a number, positive, and
// the interval fits in a time.Duration (pps > ~1.1e-10). Zero pps is
// unpaced: interval 0, ok.
func Interval(pps float64) (float64, bool) {
	switch {
	case pps == 0:
		return 0, true
	case math.IsNaN(pps) || math.IsInf(pps, 0) || pps < 0:
		return 0, false
	}
	iv := 1e9 / pps
	return iv, iv < math.MaxInt64
}

// Burst is the most packets a round sends at pps: what is due in window,
// at least one, at most most (the unpaced batch).
func Burst(pps float64, window time.Duration, most int) uint64 {
	if pps == 0 {
		return uint64(max(most, 1))
	}
	n := math.Floor(pps * window.Seconds())
	return uint64(max(1, min(n, float64(max(most, 1)))))
}

// NewPacer paces pps packets a second from start, at most burst a round.
// pps must pass Interval.
func NewPacer(pps float64, start int64, burst uint64) Pacer {
	iv, _ := Interval(pps)
	return Pacer{interval: iv, start: start, burst: max(burst, 1)}
}

// Due is how many packets should have been sent by now, counting the
// first, due at start.
func (p *Pacer) Due(now int64) uint64 {
	if p.interval == 0 {
		return math.MaxUint64
	}
	if now < p.start {
		return 0
	}
	return p.raw(now) - p.forgiven
}

// raw is Due before forgiving.
func (p *Pacer) raw(now int64) uint64 {
	return uint64(float64(now-p.start)/p.interval) + 1
}

// Next is when packet n (0-based: the n+1-th) is due; math.MaxInt64 if
// that is past what an int64 of ns holds.
func (p *Pacer) Next(n uint64) int64 {
	if p.interval == 0 || n+p.forgiven == 0 {
		return p.start
	}
	n += p.forgiven
	f := math.Ceil(float64(n) * p.interval)
	if f >= float64(math.MaxInt64-p.start) {
		return math.MaxInt64
	}
	t := p.start + int64(f)
	// Floating-point rounding may put t a few ns off raw's step: a few
	// steps each way, bounded.
	for i := 0; i < 64 && p.raw(t) < n+1; i++ {
		t++
	}
	for i := 0; i < 64 && t > p.start && p.raw(t-1) >= n+1; i++ {
		t--
	}
	return t
}

// Forgiven is how many packets the pacer gave up on, being further behind
// than MaxDebt.
func (p *Pacer) Forgiven() uint64 { return p.forgiven }

// Burst is the most packets a round sends.
func (p *Pacer) Burst() uint64 { return p.burst }

// Round is the pacer's answer at now to an owner that has sent sent
// packets: send n now (at most a burst; 0 when none is due), then start
// the next round at at (at ≤ now: at once, catching up).
func (p *Pacer) Round(now int64, sent uint64) (n uint64, at int64) {
	if p.interval == 0 {
		return p.burst, now
	}
	if due := p.Due(now); due > sent {
		n = min(due-sent, p.burst)
		// Behind by more than a burst and MaxDebt: forgive the debt.
		if left := due - sent - n; left >= p.burst && float64(left)*p.interval > float64(MaxDebt) {
			p.forgiven += left
		}
	}
	return n, p.Next(sent + n + p.burst - 1)
}
