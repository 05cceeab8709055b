package modes

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// FiveTupleSwap is testpmd's 5tswap engine: every frame goes back out of
// the link and queue it came in on with its Ethernet, IP (v4 and v6)
// addresses and TCP or UDP ports swapped, so a generator's flows come back
// to it as replies. See SwapFiveTuple for what is swapped in which frame.
//
// Nothing is recomputed: swapping two words of a ones'-complement sum
// leaves the sum as it was, and the IPv4 header checksum covers both
// addresses, the TCP and UDP checksums both addresses (pseudo-header) and
// both ports. A checksum left partial by the sender (offload) is still
// the pseudo-header's, which the forwarder completes as for any frame.
//
// A frame shorter than its IPv4 total length or IPv6 payload length never
// reaches a handler: the forwarder drops it (rx_truncated). One whose
// first segment ends inside its headers, or whose headers contradict
// themselves, gets the Ethernet swap only and is counted (Stats); one
// shorter than an Ethernet header is dropped (handler_drops) and counted
// as truncated. It receives frames for other MACs, like Reflect:
// promiscuous under --promisc auto.
type FiveTupleSwap struct {
	counts [len(swapResultNames)]atomic.Uint64 // by SwapResult
	short  atomic.Uint64                       // under 14 bytes: dropped
}

// NewFiveTupleSwap returns a 5tswap handler with its counters at zero.
func NewFiveTupleSwap() *FiveTupleSwap { return new(FiveTupleSwap) }

// SwapStats are a FiveTupleSwap's counters: frames by what was swapped
// (SwapResult), and those swapped at L2 only because of what they claimed.
type SwapStats struct {
	// L2, L3 and L4 are frames swapped as SwapL2 (not IP), SwapL3 (IP
	// without ports) and SwapL4 (TCP or UDP) say.
	L2, L3, L4 uint64
	// Dropped: under 14 bytes (counted in Truncated too).
	Dropped uint64
	// Truncated: the frame (its first segment, for the headers; its
	// length, for the IP total or payload length) ends before what its
	// headers claim. Those under 14 bytes were dropped, the others
	// reflected with their MACs swapped.
	Truncated uint64
	// Malformed: an IP header whose version, header length or total
	// length contradicts itself, a TCP data offset or UDP length out of
	// range, more than MaxSwapVLANTags tags. Reflected with their MACs
	// swapped.
	Malformed uint64
}

// Stats returns the counters.
func (s *FiveTupleSwap) Stats() SwapStats {
	return SwapStats{
		L2: s.counts[SwapL2].Load(), L3: s.counts[SwapL3].Load(), L4: s.counts[SwapL4].Load(),
		Truncated: s.counts[SwapTruncated].Load(), Malformed: s.counts[SwapMalformed].Load(),
		Dropped: s.short.Load(),
	}
}

// Handle implements fwd.Handler.
func (s *FiveTupleSwap) Handle(pkts []fwd.Packet) {
	// Counted per batch: the counters are shared by every worker.
	var n [len(swapResultNames)]uint64
	var short uint64
	for i := range pkts {
		p := &pkts[i]
		n[SwapFiveTuple(p.Data, p.Len)]++
		if len(p.Data) < ethHeaderLen {
			p.Drop()
			short++
			continue
		}
		p.Reflect()
	}
	for r, c := range n {
		if c != 0 {
			s.counts[r].Add(c)
		}
	}
	if short != 0 {
		s.short.Add(short)
	}
}

// SwapResult says what SwapFiveTuple swapped.
type SwapResult uint8

const (
	// SwapL2: not IP (ARP, LLDP, ...): the MAC addresses only.
	SwapL2 SwapResult = iota
	// SwapL3: IP without ports to swap: the MAC and IP addresses. A
	// non-first fragment (no L4 header), a protocol other than TCP and
	// UDP (ICMP, SCTP, ESP, ...), an IPv6 routing header with segments
	// left (the L4 checksum's pseudo-header names the final destination,
	// not the header's), more than MaxSwapIPv6ExtHeaders extension
	// headers, or one that is not hop-by-hop, routing, destination
	// options or fragment.
	SwapL3
	// SwapL4: TCP or UDP over IPv4 or IPv6 (a first fragment included):
	// MAC and IP addresses and ports.
	SwapL4
	// SwapTruncated: shorter than its headers claim: the MAC addresses
	// only (nothing, under 14 bytes).
	SwapTruncated
	// SwapMalformed: headers that contradict themselves: the MAC
	// addresses only.
	SwapMalformed
)

var swapResultNames = [...]string{"l2", "l3", "l4", "truncated", "malformed"}

func (r SwapResult) String() string {
	if int(r) < len(swapResultNames) {
		return swapResultNames[r]
	}
	return "SwapResult(?)"
}

const (
	// MaxSwapVLANTags is how many 802.1Q/802.1ad tags SwapFiveTuple
	// looks through (QinQ is two).
	MaxSwapVLANTags = 4
	// MaxSwapIPv6ExtHeaders is how many IPv6 extension headers it skips.
	MaxSwapIPv6ExtHeaders = 8
)

const (
	ethHeaderLen = 14
	protoTCP     = 6
	protoUDP     = 17
)

// SwapFiveTuple swaps, in place, the MAC addresses of the Ethernet frame
// f and, for IPv4 and IPv6 (behind up to MaxSwapVLANTags 802.1Q, 802.1ad
// or 0x9100 tags), the source and destination addresses, and for TCP and
// UDP the ports. length is the whole packet's length, len(f) or more for
// a multi-buffer packet whose first segment f is: the IP lengths are
// checked against it, the headers must lie in f. It parses before it
// writes, so a frame is swapped at one level, all or nothing; it never
// reads or writes outside f, allocates nothing, and keeps every checksum
// valid that was.
func SwapFiveTuple(f []byte, length int) SwapResult {
	if len(f) < ethHeaderLen {
		return SwapTruncated
	}
	length = max(length, len(f))
	off := ethHeaderLen
	etype := binary.BigEndian.Uint16(f[12:])
	for tags := 0; etype == 0x8100 || etype == 0x88a8 || etype == 0x9100; tags++ {
		if tags == MaxSwapVLANTags {
			swapMACs(f)
			return SwapMalformed
		}
		if len(f) < off+4 {
			swapMACs(f)
			return SwapTruncated
		}
		etype = binary.BigEndian.Uint16(f[off+2:])
		off += 4
	}
	var r SwapResult
	var l4 int
	switch etype {
	case 0x0800:
		r, l4 = parseIPv4(f, off, length)
	case 0x86dd:
		r, l4 = parseIPv6(f, off, length)
	default:
		r = SwapL2
	}
	swapMACs(f)
	switch r {
	case SwapL4:
		p := f[l4 : l4+4]
		s, d := binary.NativeEndian.Uint16(p), binary.NativeEndian.Uint16(p[2:])
		binary.NativeEndian.PutUint16(p, d)
		binary.NativeEndian.PutUint16(p[2:], s)
		fallthrough
	case SwapL3:
		if etype == 0x0800 {
			a := f[off+12 : off+20]
			s, d := binary.NativeEndian.Uint32(a), binary.NativeEndian.Uint32(a[4:])
			binary.NativeEndian.PutUint32(a, d)
			binary.NativeEndian.PutUint32(a[4:], s)
		} else {
			a := f[off+8 : off+40]
			s0, s1 := binary.NativeEndian.Uint64(a), binary.NativeEndian.Uint64(a[8:])
			d0, d1 := binary.NativeEndian.Uint64(a[16:]), binary.NativeEndian.Uint64(a[24:])
			binary.NativeEndian.PutUint64(a, d0)
			binary.NativeEndian.PutUint64(a[8:], d1)
			binary.NativeEndian.PutUint64(a[16:], s0)
			binary.NativeEndian.PutUint64(a[24:], s1)
		}
	}
	return r
}

// swapMACs is fwd.SwapMACs in word loads and stores, without a copy
// through memory (f has at least 14 bytes).
func swapMACs(f []byte) {
	h := f[:12]
	d0, d1 := binary.NativeEndian.Uint32(h), binary.NativeEndian.Uint16(h[4:])
	s0, s1 := binary.NativeEndian.Uint16(h[6:]), binary.NativeEndian.Uint32(h[8:])
	binary.NativeEndian.PutUint16(h, s0)
	binary.NativeEndian.PutUint32(h[2:], s1)
	binary.NativeEndian.PutUint32(h[6:], d0)
	binary.NativeEndian.PutUint16(h[10:], d1)
}

// parseIPv4 checks the IPv4 header at f[off:] in a packet of length bytes
// and returns what to swap, and where the L4 header starts for SwapL4.
func parseIPv4(f []byte, off, length int) (SwapResult, int) {
	if len(f) < off+20 {
		return SwapTruncated, 0
	}
	b := f[off:]
	if b[0]>>4 != 4 {
		return SwapMalformed, 0
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	switch {
	case ihl < 20 || total < ihl:
		return SwapMalformed, 0
	case off+total > length || len(f) < off+ihl:
		return SwapTruncated, 0
	}
	frag := binary.BigEndian.Uint16(b[6:])
	if frag&0x1fff != 0 { // a later fragment: no L4 header in it
		return SwapL3, 0
	}
	first := frag&0x2000 != 0 // MF: the first fragment, ports but not all of the segment
	return parseL4(f, b[9], off+ihl, off+total, first)
}

// parseIPv6 checks the IPv6 header at f[off:] and the extension headers
// after it, in a packet of length bytes.
func parseIPv6(f []byte, off, length int) (SwapResult, int) {
	if len(f) < off+40 {
		return SwapTruncated, 0
	}
	b := f[off:]
	if b[0]>>4 != 6 {
		return SwapMalformed, 0
	}
	end := off + 40 + int(binary.BigEndian.Uint16(b[4:]))
	if end > length {
		return SwapTruncated, 0
	}
	next, pos, first := b[6], off+40, false
	for n := 0; next != protoTCP && next != protoUDP; n++ {
		switch next {
		case 0, 43, 44, 60: // hop-by-hop, routing, fragment, destination options
		default: // ICMPv6, ESP, AH, no next header, ...: nothing to swap past L3
			return SwapL3, 0
		}
		if n == MaxSwapIPv6ExtHeaders {
			return SwapL3, 0
		}
		if end-pos < 8 {
			return SwapMalformed, 0
		}
		if len(f) < pos+8 {
			return SwapTruncated, 0
		}
		hlen := (int(f[pos+1]) + 1) * 8
		switch next {
		case 44: // fragment: its length field is reserved, always 8 bytes
			hlen = 8
			if binary.BigEndian.Uint16(f[pos+2:])>>3 != 0 {
				return SwapL3, 0
			}
			first = true
		case 43:
			if f[pos+3] != 0 { // segments left
				return SwapL3, 0
			}
		}
		if hlen > end-pos {
			return SwapMalformed, 0
		}
		next = f[pos]
		pos += hlen
	}
	return parseL4(f, next, pos, end, first)
}

// parseL4 checks the TCP or UDP header at f[l4:] of a segment ending at
// end (the IP length's end): the ports must be in f, and, unless it is a
// first fragment (which carries only part of the segment), the header's
// own length must fit the segment.
func parseL4(f []byte, proto byte, l4, end int, fragment bool) (SwapResult, int) {
	if proto != protoTCP && proto != protoUDP {
		return SwapL3, 0
	}
	n := end - l4
	if fragment {
		if n < 8 { // a fragment's payload is a multiple of 8 bytes
			return SwapMalformed, 0
		}
	} else if proto == protoTCP {
		if n < 20 {
			return SwapMalformed, 0
		}
		if len(f) < l4+13 {
			return SwapTruncated, 0
		}
		if doff := int(f[l4+12]>>4) * 4; doff < 20 || doff > n {
			return SwapMalformed, 0
		}
	} else {
		if n < 8 {
			return SwapMalformed, 0
		}
		if len(f) < l4+6 {
			return SwapTruncated, 0
		}
		if ulen := int(binary.BigEndian.Uint16(f[l4+4:])); ulen < 8 || ulen > n {
			return SwapMalformed, 0
		}
	}
	if len(f) < l4+4 {
		return SwapTruncated, 0
	}
	return SwapL4, l4
}
