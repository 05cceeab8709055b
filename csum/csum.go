// Package csum finishes TCP and UDP checksums that a sender left partial
// for offload, in place, on raw Ethernet frames.
//
// A container's veth transmits with TX checksum offload (CHECKSUM_PARTIAL):
// the TCP or UDP checksum field holds only the folded pseudo-header sum
// (the kernel writes ~csum_tcpudp_magic(saddr, daddr, len, proto, 0) for
// IPv4 and ~csum_ipv6_magic(...) for IPv6), and hardware is expected to sum
// the segment and finish the field. A frame that leaves through XDP or
// AF_XDP meets no such hardware, and the receiver drops it. User space is
// not told which frames are partial, so Complete recognises them itself.
//
// Detection is cheap and header-only: the folded pseudo-header sum P
// (addresses, protocol, L4 length) is computed, and the frame is partial
// iff its checksum field equals P. Only then is the segment summed, and the
// field rewritten with the full checksum. A frame whose field is anything
// else is left untouched, even if its checksum is wrong: it is not ours to
// fix. A genuinely complete checksum that happens to equal P is verified
// while being summed and is left as it is, so the rule is safe.
//
// Parsing covers Ethernet with up to four 802.1Q/802.1ad tags, IPv4 (with
// options; the IP total length, not the frame length, bounds the segment,
// so Ethernet padding is ignored), IPv6 (hop-by-hop, routing and
// destination-options extension headers are skipped, at most eight; a
// routing header with segments left names the final destination used in
// the pseudo-header), TCP and UDP. Fragments, other protocols and anything
// malformed or truncated are reported as NotL4 and left untouched.
//
// CompleteChain does the same for a frame held in pieces (a multi-buffer
// packet's descriptors), summing across them in place, with no copy.
//
// Everything here is pure and allocation-free: no state, no kernel, so any
// goroutine may call it on a frame it owns. The caller completes a frame
// before its TX descriptor is published, while no one else, the kernel
// included, reads it. It never reads or writes outside the slices it is
// given, and never changes a checksum it has not found partial.
package csum

import (
	"encoding/binary"
	"math/bits"
)

// Result says what Complete found and did.
type Result uint8

const (
	// NotL4: not TCP or UDP over IPv4 or IPv6, or a fragment, or malformed
	// or truncated. The frame is untouched.
	NotL4 Result = iota
	// AlreadyComplete: the checksum is already correct, or it is not
	// detectably partial (whether or not it is correct). The frame is
	// untouched.
	AlreadyComplete
	// Completed: the checksum was partial and now holds the full checksum.
	// Only the two bytes of the checksum field changed.
	Completed
	// UDPZero: IPv4 UDP with checksum 0, meaning none. The frame is
	// untouched.
	UDPZero
	numResults
)

var resultNames = [numResults]string{"not-l4", "already-complete", "completed", "udp-zero"}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "invalid"
}

const (
	ethHeaderLen = 14
	vlanTagLen   = 4
	// MaxVLANTags is how many 802.1Q/802.1ad tags Complete looks through.
	MaxVLANTags = 4
	// MaxIPv6ExtHeaders is how many IPv6 extension headers Complete skips.
	MaxIPv6ExtHeaders = 8

	etherTypeIPv4     = 0x0800
	etherTypeIPv6     = 0x86dd
	etherTypeVLAN     = 0x8100
	etherTypeQinQ     = 0x88a8
	etherTypeQinQ9100 = 0x9100

	protoHopByHop = 0
	protoTCP      = 6
	protoUDP      = 17
	protoRouting  = 43
	protoDestOpts = 60

	tcpHeaderLen = 20
	tcpCsumOff   = 16
	udpHeaderLen = 8
	udpCsumOff   = 6
)

// Complete finishes, in place, a TCP or UDP checksum that the sender of
// frame (a raw Ethernet frame) left partial for offload. It writes at most
// the two bytes of the checksum field, and only when it returns Completed;
// it never reads or writes outside frame. Calling it again on its own
// output returns AlreadyComplete.
func Complete(frame []byte) Result {
	var loc where
	if !locate(&loc, frame, len(frame)) {
		return NotL4
	}
	field := binary.BigEndian.Uint16(frame[loc.field:])
	if r, partial := loc.classify(field); !partial {
		return r
	}
	c, ok := loc.finish(sum(frame[loc.l4:loc.l4+loc.l4Len], loc.pseudo), field)
	if !ok {
		return AlreadyComplete
	}
	binary.BigEndian.PutUint16(frame[loc.field:], c)
	return Completed
}

// where is what locate found, as offsets in the frame.
type where struct {
	l4, l4Len int    // the segment, bounded by the IP and UDP lengths, not by the frame
	field     int    // the checksum field
	pseudo    uint64 // unfolded pseudo-header sum: addresses, protocol, segment length
	udp       bool
	// zeroMeansNone: a zero field means "no checksum" (IPv4 UDP).
	zeroMeansNone bool
}

// classify says, from the checksum field alone, whether the segment may be
// partial (and must be summed); if not, it returns the answer.
func (l *where) classify(field uint16) (r Result, partial bool) {
	if l.zeroMeansNone && field == 0 {
		return UDPZero, false
	}
	if field != fold(l.pseudo) {
		return AlreadyComplete, false
	}
	return 0, true
}

// finish takes s, the pseudo-header and the segment as it stands (field
// included) summed, and returns the checksum to write, or false when the
// segment is already correct: a complete checksum that happens to equal
// the pseudo-header sum sums to 0xffff.
func (l *where) finish(s uint64, field uint16) (uint16, bool) {
	if fold(s) == 0xffff {
		return 0, false
	}
	// Take the field back out (one's-complement subtraction: add its
	// complement) and complement the result.
	c := ^fold(add(s, uint64(^field)))
	if c == 0 && l.udp {
		c = 0xffff // UDP (v4 and v6): 0 means "none"; send the other zero
	}
	return c, true
}

// locate parses the headers of a frame of frameLen bytes, whose first
// bytes are hdr, down to the TCP or UDP segment, and fills in loc. Every
// header byte it reads, through the checksum field, must lie in hdr (else
// it fails); lengths are checked against frameLen. For a frame in one
// piece, hdr is the whole frame. loc is an out parameter, not a result:
// returned by value, the struct went through memory twice and more than
// doubled the cost of the header-only path every complete packet pays.
func locate(loc *where, hdr []byte, frameLen int) bool {
	if len(hdr) < ethHeaderLen {
		return false
	}
	off := ethHeaderLen
	etype := binary.BigEndian.Uint16(hdr[12:])
	for tags := 0; etype == etherTypeVLAN || etype == etherTypeQinQ || etype == etherTypeQinQ9100; tags++ {
		if tags == MaxVLANTags || len(hdr) < off+vlanTagLen {
			return false
		}
		etype = binary.BigEndian.Uint16(hdr[off+2:])
		off += vlanTagLen
	}
	var l4, end int
	var proto uint8
	var v4, ok bool
	switch etype {
	case etherTypeIPv4:
		l4, end, proto, loc.pseudo, ok = ipv4(hdr, off, frameLen)
		v4 = true
	case etherTypeIPv6:
		l4, end, proto, loc.pseudo, ok = ipv6(hdr, off, frameLen)
	}
	if !ok {
		return false
	}
	n := end - l4
	switch proto {
	case protoTCP:
		if n < tcpHeaderLen || len(hdr) < l4+tcpHeaderLen {
			return false
		}
		if doff := int(hdr[l4+12]>>4) * 4; doff < tcpHeaderLen || doff > n {
			return false
		}
		loc.field = l4 + tcpCsumOff
	case protoUDP:
		if n < udpHeaderLen || len(hdr) < l4+udpHeaderLen {
			return false
		}
		ulen := int(binary.BigEndian.Uint16(hdr[l4+4:]))
		if ulen < udpHeaderLen || ulen > n {
			return false
		}
		n = ulen
		loc.field = l4 + udpCsumOff
		loc.udp = true
		loc.zeroMeansNone = v4
	default:
		return false
	}
	loc.l4, loc.l4Len = l4, n
	loc.pseudo += uint64(proto) + uint64(n)
	return true
}

// ipv4 parses an IPv4 header at hdr[off:] in a frame of frameLen bytes:
// it returns where the payload starts and ends (the total length bounds
// it), the protocol, and the sum of the addresses. Fragments fail.
func ipv4(hdr []byte, off, frameLen int) (l4, end int, proto uint8, addrs uint64, ok bool) {
	if len(hdr) < off+20 || hdr[off]>>4 != 4 {
		return
	}
	b := hdr[off:]
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < 20 || total < ihl || total > frameLen-off {
		return
	}
	if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 { // MF or fragment offset
		return
	}
	addrs = uint64(binary.BigEndian.Uint32(b[12:])) + uint64(binary.BigEndian.Uint32(b[16:]))
	return off + ihl, off + total, b[9], addrs, true
}

// ipv6 parses an IPv6 header and its hop-by-hop, routing and
// destination-options extension headers at hdr[off:] in a frame of
// frameLen bytes: it returns where the upper-layer payload starts and ends
// (the payload length bounds it), its protocol, and the sum of the source
// and final destination addresses. Fragments, unknown extension headers
// and unknown routing types with segments left fail.
func ipv6(hdr []byte, off, frameLen int) (l4, end int, proto uint8, addrs uint64, ok bool) {
	if len(hdr) < off+40 || hdr[off]>>4 != 6 {
		return
	}
	b := hdr[off:]
	plen := int(binary.BigEndian.Uint16(b[4:]))
	if 40+plen > frameLen-off {
		return
	}
	end = off + 40 + plen
	next := b[6]
	dst := b[24:40]
	pos := off + 40
	for n := 0; next != protoTCP && next != protoUDP; n++ {
		if n == MaxIPv6ExtHeaders || end-pos < 8 || len(hdr) < pos+8 {
			return
		}
		hlen := (int(hdr[pos+1]) + 1) * 8
		if hlen > end-pos {
			return
		}
		switch next {
		case protoHopByHop, protoDestOpts:
		case protoRouting:
			if hdr[pos+3] != 0 { // segments left: the final destination is in here
				if len(hdr) < pos+hlen {
					return
				}
				var final []byte
				if final, ok = finalDestination(hdr[pos : pos+hlen]); !ok {
					return
				}
				dst = final
			}
		default: // fragment, ESP, AH, no next header, ICMPv6, ...
			return
		}
		next = hdr[pos]
		pos += hlen
	}
	var s uint64
	for i := 8; i < 24; i += 4 {
		s += uint64(binary.BigEndian.Uint32(b[i:]))
	}
	for i := 0; i < 16; i += 4 {
		s += uint64(binary.BigEndian.Uint32(dst[i:]))
	}
	return pos, end, next, s, true
}

// finalDestination returns the final destination named by a routing
// header rh (whole header, at least 8 bytes) that has segments left.
func finalDestination(rh []byte) ([]byte, bool) {
	switch rh[2] {
	case 0, 2: // RH0 (deprecated) and Mobile IPv6 type 2: the last address
		n := int(rh[1]) / 2
		if n == 0 {
			return nil, false
		}
		return rh[8+16*(n-1) : 8+16*n], true
	case 4: // Segment Routing Header: Segment List[0] is the final segment
		if len(rh) < 8+16 {
			return nil, false
		}
		return rh[8:24], true
	}
	return nil, false
}

// add is 64-bit one's-complement addition (end-around carry).
func add(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	return s + c
}

// Sum is the one's-complement sum of b, as big-endian 16-bit words, added
// to initial, unfolded (sum): for a checksum to verify or build elsewhere
// (the sink's check of a generator's UDP checksum), with Fold.
func Sum(b []byte, initial uint64) uint64 { return sum(b, initial) }

// Fold folds a sum of Sum to the 16 bits of a checksum field's complement.
func Fold(s uint64) uint16 { return fold(s) }

// fold folds a 64-bit one's-complement sum to 16 bits. It returns 0 only
// for 0.
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff // ≤ 0x1_ffff_fffe
	s = s>>32 + s&0xffffffff // ≤ 0xffff_ffff
	s = s>>16 + s&0xffff     // ≤ 0x1_fffe
	s = s>>16 + s&0xffff     // ≤ 0xffff
	return uint16(s)
}

// sum adds the bytes of b, as big-endian 16-bit words (an odd last byte
// padded with zero), to initial in one's-complement arithmetic, and
// returns the unfolded 64-bit sum: fold it for the 16-bit one. It reads
// eight bytes at a time into a 64-bit accumulator, carrying with add-with-
// carry and folding the final carry back in (2^64 ≡ 1 modulo 2^64-1, of
// which 2^16-1 is a divisor). Any length and alignment; no allocation.
func sum(b []byte, initial uint64) uint64 {
	s := initial
	var c uint64
	for len(b) >= 64 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[0:8]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:16]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:24]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:32]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[32:40]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[40:48]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[48:56]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[56:64]), c)
		b = b[64:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	// At most seven bytes left, starting at a multiple of eight: place them
	// where a big-endian load of a zero-padded word would.
	var t uint64
	pos := 0
	if len(b)&4 != 0 {
		t = uint64(binary.BigEndian.Uint32(b)) << 32
		pos = 4
	}
	if len(b)&2 != 0 {
		t |= uint64(binary.BigEndian.Uint16(b[pos:])) << (48 - 8*pos)
		pos += 2
	}
	if len(b)&1 != 0 {
		t |= uint64(b[pos]) << (56 - 8*pos)
	}
	s, c = bits.Add64(s, t, c)
	return s + c
}
