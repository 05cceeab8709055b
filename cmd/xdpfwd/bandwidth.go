// A switch port's bandwidth limits: what a link add's options ask for
// (controlSocket.limitsFor), and the rate flags of `xdpfwd link add`.

package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/bytesize"
	"github.com/xdpfwd/xdpfwd/modes"
)

// Bandwidth limits of the links added over the control socket (modes'
// bandwidth.go): an add that gives them (xdpfwd-cni's, from CNI's
// "bandwidth" capability; xdpfwd link add --ingress-rate...) has its link
// policed to them in switch mode; another mode refuses them.

// limitsFor is the bandwidth limits an add's options ask for (none: zero
// Limits). Limits that cannot be met are the request's fault.
func (cs *controlSocket) limitsFor(o linkop.AddOptions) (modes.Limits, error) {
	if o.Bandwidth == nil {
		return modes.Limits{}, nil
	}
	b := o.Bandwidth
	l := modes.Limits{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
	if err := l.Check(); err != nil {
		return l, err
	}
	if !l.IsZero() && cs.sw == nil {
		return l, fmt.Errorf("bandwidth limits are a switch's: this daemon runs in %s mode", cs.mode)
	}
	return l, nil
}

// limitsString is l for a log line: "ingress 8Mbit/s burst 64KiB, egress
// none".
func limitsString(l modes.Limits) string {
	dir := func(rate, burst uint64) string {
		if rate == 0 {
			return "none"
		}
		return fmt.Sprintf("%s burst %dB", formatBitRate(rate), burst/8)
	}
	return "ingress " + dir(l.IngressRate, l.IngressBurst) + ", egress " + dir(l.EgressRate, l.EgressBurst)
}

// formatBitRate is a rate in bits/s with an SI unit.
func formatBitRate(r uint64) string {
	for _, u := range []struct {
		div  uint64
		name string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if r >= u.div && r%u.div == 0 {
			return strconv.FormatUint(r/u.div, 10) + u.name
		}
	}
	return strconv.FormatUint(r, 10) + "bit/s"
}

// bitRateFlag is a rate in bits per second as tc and Kubernetes write
// it: a number with an optional SI suffix (k, M, G, T: powers of 1000),
// optionally followed by "bit", "bps" or "bit/s" (8M, 8Mbit, 8mbit,
// 100k, 1.5G, 1e9).
type bitRateFlag uint64

func (r *bitRateFlag) String() string {
	if *r == 0 {
		return "0"
	}
	return formatBitRate(uint64(*r))
}

func (r *bitRateFlag) Set(v string) error {
	s := v
	for _, suf := range []string{"bit/s", "bps", "bit"} {
		if strings.HasSuffix(strings.ToLower(s), suf) {
			s = s[:len(s)-len(suf)]
			break
		}
	}
	mult := 1.0
	if n := len(s); n > 0 {
		if m, ok := map[byte]float64{'k': 1e3, 'K': 1e3, 'm': 1e6, 'M': 1e6, 'g': 1e9, 'G': 1e9, 't': 1e12, 'T': 1e12}[s[n-1]]; ok {
			mult, s = m, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	bits := f * mult
	// !(bits >= 0) is NaN's case too.
	if err != nil || !(bits >= 0) || bits > modes.MaxRate || bits != 0 && bits < modes.MinRate {
		return fmt.Errorf("%q: want bits per second, e.g. 8M, 8Mbit or 1G (SI units), %d..%.0f, or 0 (no limit)", v, modes.MinRate, modes.MaxRate)
	}
	*r = bitRateFlag(bits)
	return nil
}

// burstFlag is a policer's burst in bytes, as tc's burst: a size as
// bytesize reads it, from a full frame to the most whose bits the policer
// takes (modes.MaxBurst); 0, as not given, is defaultBurst. Bounded here,
// its bits (×8) cannot overflow.
type burstFlag uint64

// The bursts burstFlag takes, in bytes.
const (
	minBurstBytes = modes.MinBurst / 8
	maxBurstBytes = modes.MaxBurst / 8 // 2^32-2: 2^32-1 bytes' bits are over the bound
)

func (b *burstFlag) String() string { return bytesize.Format(uint64(*b)) }

func (b *burstFlag) Set(v string) error {
	n, ok := bytesize.Parse(v)
	if !ok || n != 0 && (n < minBurstBytes || n > maxBurstBytes) {
		return fmt.Errorf("%q: want bytes, %d (a full frame) .. %d, e.g. 65536 or 64KiB (0: the default)", v, minBurstBytes, maxBurstBytes)
	}
	*b = burstFlag(n)
	return nil
}

// bandwidthFlags are link add's limits: rates in bits/s, bursts in bytes
// (as tc's burst), sent in the add's bits.
type bandwidthFlags struct {
	ingressRate, egressRate   bitRateFlag
	ingressBurst, egressBurst burstFlag
}

// defaultBurst is a burst for a rate given without one: 10 ms at the rate,
// at least 64 KiB (a TCP window's worth at small rates).
func defaultBurst(rate uint64) uint64 { return max(64<<10*8, rate/100) }

// options is the add's Bandwidth, nil when no limit is given.
func (f *bandwidthFlags) options() (*linkop.Bandwidth, error) {
	if f.ingressRate == 0 && f.egressRate == 0 && f.ingressBurst == 0 && f.egressBurst == 0 {
		return nil, nil
	}
	b := &linkop.Bandwidth{IngressRate: uint64(f.ingressRate), EgressRate: uint64(f.egressRate)}
	for _, d := range []struct {
		name  string
		rate  uint64
		burst burstFlag
		out   *uint64
	}{{"ingress", b.IngressRate, f.ingressBurst, &b.IngressBurst}, {"egress", b.EgressRate, f.egressBurst, &b.EgressBurst}} {
		switch {
		case d.rate == 0 && d.burst != 0:
			return nil, fmt.Errorf("--%s-burst without --%s-rate", d.name, d.name)
		case d.rate == 0:
		case d.burst == 0:
			*d.out = defaultBurst(d.rate)
		case d.burst < minBurstBytes || d.burst > maxBurstBytes: // compared before ×8
			return nil, fmt.Errorf("--%s-burst %d bytes: want %d (a full frame) .. %d", d.name, uint64(d.burst), minBurstBytes, maxBurstBytes)
		default:
			*d.out = uint64(d.burst) * 8
		}
	}
	l := modes.Limits{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
	if err := l.Check(); err != nil {
		return nil, err
	}
	return b, nil
}
