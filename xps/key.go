package xps

import (
	"encoding/binary"
	"strconv"
)

// KeyKind tells how much of a frame's headers went into its Key. The kinds
// are ordered by specificity: KindInvalid < KindL2 < KindL3 < KindL4.
type KeyKind uint8

const (
	// KindInvalid: a runt shorter than an Ethernet header; the key is zero.
	KindInvalid KeyKind = iota
	// KindL2: source/destination MAC and EtherType (non-IP, or IP whose
	// addresses cannot be read, or too many / truncated VLAN tags).
	KindL2
	// KindL3: IP addresses and protocol (fragments, ICMP, other protocols,
	// malformed or truncated headers beyond the addresses).
	KindL3
	// KindL4: IP addresses, protocol and ports (TCP, UDP, SCTP).
	KindL4
)

func (k KeyKind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindL2:
		return "l2"
	case KindL3:
		return "l3"
	case KindL4:
		return "l4"
	}
	return "KeyKind(" + strconv.Itoa(int(k)) + ")"
}

// Parsing limits.
const (
	// MaxVLANTags is the number of stacked 802.1Q / 802.1ad tags ParseKey
	// skips; a frame with more gets a KindL2 key.
	MaxVLANTags = 8
	// MaxIPv6ExtHeaders is the number of IPv6 extension headers ParseKey
	// walks; a longer chain gets a KindL3 key.
	MaxIPv6ExtHeaders = 8
)

// EtherTypes and IP protocol numbers ParseKey knows.
const (
	EtherTypeIPv4  = 0x0800
	EtherTypeIPv6  = 0x86dd
	EtherTypeVLAN  = 0x8100 // 802.1Q
	EtherTypeQinQ  = 0x88a8 // 802.1ad
	ProtoHopByHop  = 0
	ProtoTCP       = 6
	ProtoUDP       = 17
	ProtoRouting   = 43
	ProtoFragment  = 44
	ProtoAH        = 51
	ProtoDestOpts  = 60
	ProtoSCTP      = 132
	ethHeaderLen   = 14
	ipv4MinHdrLen  = 20
	ipv6HdrLen     = 40
	vlanTagLen     = 4
	tcpMinHdrLen   = 20
	udpHdrLen      = 8
	sctpCommonLen  = 12
	ipv6FragHdrLen = 8
)

// Key is the flow key of a frame: fixed-size (40 bytes) and comparable, so it
// can be copied, compared with == and stored without allocation.
//
// IPv4 addresses occupy Src[:4] and Dst[:4], MAC addresses Src[:6] and
// Dst[:6]; the remaining bytes, and the ports of non-L4 keys, are zero.
// EtherType (0x0800, 0x86dd, or the frame's for L2 keys) keeps IPv4, IPv6
// and non-IP keys apart.
type Key struct {
	Src, Dst         [16]byte
	SrcPort, DstPort uint16
	EtherType        uint16
	Proto            uint8
	Kind             KeyKind
}

// layout records where parse found the fields it read (for the fuzz test's
// endpoint swap): l3 is the IP header offset, l4 the transport header offset,
// -1 when not reached.
type layout struct{ l3, l4 int }

// ParseKey extracts the flow key of an Ethernet frame from its headers. With
// symmetric set, the endpoints (address and port together) are put in a
// canonical order, so both directions of a connection give the same key.
// It never allocates, never reads beyond frame, and never panics: malformed
// or truncated headers give a coarser key (see the package comment).
func ParseKey(frame []byte, symmetric bool) (Key, KeyKind) {
	k, _ := parse(frame, symmetric)
	return k, k.Kind
}

func parse(f []byte, symmetric bool) (k Key, lay layout) {
	lay = layout{-1, -1}
	if len(f) < ethHeaderLen {
		return k, lay
	}
	et := be16(f, 12)
	off := ethHeaderLen
	for tags := 0; et == EtherTypeVLAN || et == EtherTypeQinQ; tags++ {
		if tags == MaxVLANTags || off+vlanTagLen > len(f) {
			l2(&k, f, et, symmetric)
			return k, lay
		}
		et = be16(f, off+2)
		off += vlanTagLen
	}
	switch et {
	case EtherTypeIPv4:
		if off+ipv4MinHdrLen <= len(f) && f[off]>>4 == 4 {
			lay.l3 = off
			lay.l4 = parseIPv4(&k, f, off)
			finish(&k, symmetric)
			return k, lay
		}
	case EtherTypeIPv6:
		if off+ipv6HdrLen <= len(f) && f[off]>>4 == 6 {
			lay.l3 = off
			lay.l4 = parseIPv6(&k, f, off)
			finish(&k, symmetric)
			return k, lay
		}
	}
	l2(&k, f, et, symmetric)
	return k, lay
}

func l2(k *Key, f []byte, et uint16, symmetric bool) {
	copy(k.Dst[:6], f[0:6])
	copy(k.Src[:6], f[6:12])
	k.EtherType = et
	k.Kind = KindL2
	finish(k, symmetric)
}

// parseIPv4 fills k from the IPv4 header at off (at least 20 bytes are
// there) and returns the transport header offset if it made an L4 key.
func parseIPv4(k *Key, f []byte, off int) int {
	k.EtherType = EtherTypeIPv4
	k.Kind = KindL3
	k.Proto = f[off+9]
	copy(k.Src[:4], f[off+12:off+16])
	copy(k.Dst[:4], f[off+16:off+20])
	ihl := int(f[off]&0x0f) * 4
	total := int(be16(f, off+2))
	if ihl < ipv4MinHdrLen || total < ihl || off+total > len(f) {
		return -1 // malformed, or truncated frame (off+ihl ≤ off+total)
	}
	if be16(f, off+6)&0x3fff != 0 { // MF or fragment offset: a fragment
		return -1
	}
	return l4(k, f, off+ihl, off+total)
}

// parseIPv6 fills k from the IPv6 header at off (40 bytes are there) and
// returns the transport header offset if it made an L4 key.
func parseIPv6(k *Key, f []byte, off int) int {
	k.EtherType = EtherTypeIPv6
	k.Kind = KindL3
	copy(k.Src[:], f[off+8:off+24])
	copy(k.Dst[:], f[off+24:off+40])
	nh := f[off+6]
	k.Proto = nh
	end := off + ipv6HdrLen + int(be16(f, off+4))
	if end > len(f) {
		return -1 // truncated (or a jumbogram: payload length 0 fits)
	}
	p := off + ipv6HdrLen
	for ext := 0; ; ext++ {
		k.Proto = nh
		var hl int
		switch nh {
		case ProtoTCP, ProtoUDP, ProtoSCTP:
			return l4(k, f, p, end)
		case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoAH, ProtoFragment:
			if ext == MaxIPv6ExtHeaders || p+2 > end {
				return -1
			}
			switch nh {
			case ProtoAH:
				hl = (int(f[p+1]) + 2) * 4
			case ProtoFragment:
				hl = ipv6FragHdrLen
			default:
				hl = (int(f[p+1]) + 1) * 8
			}
			if p+hl > end {
				return -1
			}
			if nh == ProtoFragment && be16(f, p+2)&0xfff9 != 0 {
				// Offset ≠ 0 or M set: a real fragment. Key on the
				// fragmentable part's protocol, common to all fragments.
				k.Proto = f[p]
				return -1
			}
			nh = f[p]
			p += hl
		default:
			return -1 // ICMPv6, ESP, No Next Header, anything else: L3
		}
	}
}

// l4 makes k an L4 key if the minimal header of k.Proto lies in f[p:end].
func l4(k *Key, f []byte, p, end int) int {
	var min int
	switch k.Proto {
	case ProtoTCP:
		min = tcpMinHdrLen
	case ProtoUDP:
		min = udpHdrLen
	case ProtoSCTP:
		min = sctpCommonLen
	default:
		return -1
	}
	if p+min > end {
		return -1
	}
	k.SrcPort = be16(f, p)
	k.DstPort = be16(f, p+2)
	k.Kind = KindL4
	return p
}

// finish puts the endpoints of k in canonical order when symmetric: the
// lower (address, port) pair first.
func finish(k *Key, symmetric bool) {
	if !symmetric {
		return
	}
	c := cmp16(&k.Src, &k.Dst)
	if c > 0 || (c == 0 && k.SrcPort > k.DstPort) {
		k.Src, k.Dst = k.Dst, k.Src
		k.SrcPort, k.DstPort = k.DstPort, k.SrcPort
	}
}

func cmp16(a, b *[16]byte) int {
	a0, b0 := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	if a0 != b0 {
		if a0 < b0 {
			return -1
		}
		return 1
	}
	a1, b1 := binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:])
	switch {
	case a1 < b1:
		return -1
	case a1 > b1:
		return 1
	}
	return 0
}

func be16(f []byte, off int) uint16 {
	return binary.BigEndian.Uint16(f[off : off+2])
}
