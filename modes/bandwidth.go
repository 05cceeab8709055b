package modes

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
)

// Bandwidth limits: a switch port that is a pod's may be policed to the
// rates CNI's "bandwidth" capability gives (Kubernetes'
// kubernetes.io/ingress-bandwidth and egress-bandwidth annotations), with
// the reference bandwidth plugin's units and meanings:
//
//   - egress is what the pod sends: a frame from the link over its egress
//     rate is dropped as it is received, counted as rx_rate_limited on the
//     link;
//   - ingress is what the pod receives: a frame the switch forwards to the
//     link over its ingress rate is dropped before it is sent, counted as
//     tx_rate_limited on the link.
//
// Each direction is a token bucket of rate bits/s holding burst bits,
// full to start with: a policer, which drops what is over the rate, as tc's
// police action does, not a shaper, which queues it (tbf, what the
// reference plugin installs): a datapath without a queue cannot delay a
// frame, only pass or drop it. TCP adapts to the drops; a burst of at least
// a few dozen full frames keeps its throughput near the rate.
//
// Every frame is charged whatever it is, broadcasts included, both ways:
// what a pod sends, and what it receives, forwarded or flooded
// (broadcast, multicast, unknown unicast). A flood is charged to each
// limited link it goes to; one over its rate is left out of the flood,
// which the others still get, and the drop counted on it
// (fwd.Packet.FloodDropOut). The reference plugin's tbf shapes
// everything a pod receives too; but where tbf would delay an ARP request
// or a neighbour solicitation behind the pod's traffic, the policer drops
// it: a pod at its ingress limit may miss one for a moment, and its
// neighbour asks again.
//
// Cost: a switch none of whose links is limited pays one atomic load per
// batch. Otherwise a batch loads the set of links with an ingress limit
// once, a frame costs one atomic load of its link's policer (nil for a
// link without limits), a forward one more of the output link's, and a
// flood one per limited link it goes to (the set's bits, not every link);
// a policed frame adds one load and, admitted, one compare-and-swap. No
// lock, no allocation, no clock read (the batch's).

// Limits are a link's bandwidth limits as CNI's bandwidth capability gives
// them: rates in bits per second, bursts in bits, 0 for no limit that way.
type Limits struct {
	IngressRate, IngressBurst uint64 // into the pod: frames the switch sends to the link
	EgressRate, EgressBurst   uint64 // out of the pod: frames the link sends
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Rates and bursts the policer takes. A burst under one full frame would
// pass no full frame at all; 2^32-1 bytes (4 GiB) or more is no limit
// worth the name, and the bandwidth plugin's bound (burst/8 under
// 2^32-1).
const (
	MinRate  = 1000                 // bits/s: Kubernetes' smallest, 1k
	MaxRate  = 1e15                 // bits/s: 1 Pbit/s
	MinBurst = 1518 * 8             // bits: a full Ethernet frame
	MaxBurst = math.MaxUint32*8 - 1 // bits: under 4 GiB
)

// Check says what is wrong with l, if anything: each direction has a
// rate and a burst, or neither (the bandwidth plugin's rule).
func (l Limits) Check() error {
	for _, d := range []struct {
		name        string
		rate, burst uint64
	}{{"ingress", l.IngressRate, l.IngressBurst}, {"egress", l.EgressRate, l.EgressBurst}} {
		switch {
		case d.rate == 0 && d.burst == 0:
		case d.rate == 0 || d.burst == 0:
			return fmt.Errorf("bandwidth: %s rate %d and burst %d: want both or neither", d.name, d.rate, d.burst)
		case d.rate < MinRate || d.rate > MaxRate:
			return fmt.Errorf("bandwidth: %s rate %d bits/s: want %d..%.0f", d.name, d.rate, MinRate, MaxRate)
		case d.burst < MinBurst || d.burst > MaxBurst:
			return fmt.Errorf("bandwidth: %s burst %d bits: want %d (a full frame) .. %d bits (under 4 GiB)", d.name, d.burst, MinBurst, uint64(MaxBurst))
		}
	}
	return nil
}

// TokenBucket is a token bucket shared by the workers that charge it: rate
// bits/s, burst bits deep. It is kept as GCRA's theoretical arrival time
// (the time at which the bucket would be full again), one int64 that an
// admitted frame moves forward by its cost with a compare-and-swap: no
// lock, no allocation.
type TokenBucket struct {
	tat     atomic.Int64 // ticks: when the bucket is full again
	perByte uint64       // ticks per byte, 32 fractional bits
	depth   int64        // burst in ticks
}

// tickShift: the bucket counts time in ticks of 1/16 ns, so that a byte
// at the highest rate still costs 0.128 of one (32 fractional bits keep
// it exact enough); an int64 of ticks lasts 18 years of the clock.
const tickShift = 4

// NewTokenBucket returns a full bucket of rate bits/s and burst bits (as Check
// bounds them; others are clamped).
func NewTokenBucket(rate, burst uint64) *TokenBucket {
	rate = min(max(rate, MinRate), MaxRate)
	burst = min(burst, MaxBurst)
	const ticksPerBit = 1e9 << tickShift
	b := &TokenBucket{}
	// (8 bits × ticksPerBit << 32) / rate: 128 bits wide, under rate
	// in the high word as MinRate makes it.
	hi, lo := bits.Mul64(8*ticksPerBit, 1<<32)
	b.perByte, _ = bits.Div64(hi, lo, rate)
	hi, lo = bits.Mul64(burst, ticksPerBit)
	d, _ := bits.Div64(hi, lo, rate)
	b.depth = int64(min(d, math.MaxInt64>>2))
	return b
}

// cost is n bytes' worth of ticks, rounded up: what the rounding loses
// is the link's, never over its rate.
func (b *TokenBucket) cost(n int) int64 {
	hi, lo := bits.Mul64(uint64(n), b.perByte)
	c := hi<<32 | lo>>32
	if lo<<32 != 0 {
		c++
	}
	return int64(c)
}

// Admit charges n bytes at time now (ns, a monotonic clock shared by the
// callers) and reports whether they fit: if not, nothing is charged. Safe
// for concurrent use; callers whose clocks lag a little are judged as if
// the bucket were that much emptier.
func (b *TokenBucket) Admit(n int, now int64) bool {
	t := now << tickShift
	c := b.cost(n)
	for {
		old := b.tat.Load()
		next := max(old, t) + c
		if next-t > b.depth {
			return false
		}
		if b.tat.CompareAndSwap(old, next) {
			return true
		}
	}
}

// policer is a link's limits as the switch applies them per frame:
// immutable, replaced whole; a nil bucket is no limit that way.
type policer struct {
	in, out *TokenBucket // ingress (to the link), egress (from it)
}

func newPolicer(l Limits) *policer {
	p := &policer{}
	if l.IngressRate != 0 {
		p.in = NewTokenBucket(l.IngressRate, l.IngressBurst)
	}
	if l.EgressRate != 0 {
		p.out = NewTokenBucket(l.EgressRate, l.EgressBurst)
	}
	return p
}

// LimitPort gives the link named name bandwidth limits l: at once if the
// switch forwards it already, else when it is added (LinkAddedAs), and
// again whenever a link of that name is (ReleaseLimits ends it). Zero
// limits are ReleaseLimits; the same limits again are a no-op (the
// buckets keep their state).
func (s *Switch) LimitPort(name string, l Limits) error {
	if name == "" {
		return errors.New("bandwidth: a link name is required")
	}
	if err := l.Check(); err != nil {
		return err
	}
	if l.IsZero() {
		s.ReleaseLimits(name)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.limits[name]; ok && q == l {
		return nil
	}
	if s.limits == nil {
		s.limits = map[string]Limits{}
	}
	s.limits[name] = l
	for i, n := range s.names {
		if n == name {
			s.setLimiter(i, newPolicer(l))
		}
	}
	return nil
}

// ReleaseLimits takes the link named name's limits away: for a link
// removed (or never added). A link the switch still forwards is no longer
// policed.
func (s *Switch) ReleaseLimits(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.limits, name)
	for i, n := range s.names {
		if n == name {
			s.setLimiter(i, nil)
		}
	}
}

// PortLimits are the limits of every link that has them, by name.
func (s *Switch) PortLimits() map[string]Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Limits, len(s.limits))
	for n, l := range s.limits {
		out[n] = l
	}
	return out
}

// admitOut charges n bytes sent by link i at now to its egress bucket,
// if it has one, and reports whether they fit.
func (s *Switch) admitOut(i uint, n int, now int64) bool {
	pl := s.limiters[i].Load()
	return pl == nil || pl.out == nil || pl.out.Admit(n, now)
}

// admitIn charges n bytes for link i at now to its ingress bucket, if it
// has one, and reports whether they fit.
func (s *Switch) admitIn(i uint, n int, now int64) bool {
	pl := s.limiters[i].Load()
	return pl == nil || pl.in == nil || pl.in.Admit(n, now)
}

// setLimiter puts p (nil: none) on link i, counts the links policed, and
// keeps the set of those with an ingress limit. s.mu is held.
func (s *Switch) setLimiter(i int, p *policer) {
	if old := s.limiters[i].Swap(p); (old == nil) != (p == nil) {
		if p != nil {
			s.policed.Add(1)
		} else {
			s.policed.Add(-1)
		}
	}
	if p != nil && p.in != nil {
		s.ingress.Or(1 << uint(i))
	} else {
		s.ingress.And(^uint64(1 << uint(i)))
	}
}

// applyLimits puts name's limits, or none, on link i. s.mu is held.
func (s *Switch) applyLimits(i int, name string) {
	if l, ok := s.limits[name]; ok {
		s.setLimiter(i, newPolicer(l))
	} else {
		s.setLimiter(i, nil)
	}
}
