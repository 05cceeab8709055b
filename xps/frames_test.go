package xps

import "encoding/binary"

// Frame builders for the tests, benchmarks and the fuzz seed corpus.

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ip4A = [4]byte{10, 0, 0, 1}
	ip4B = [4]byte{10, 0, 0, 2}
	ip6A = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	ip6B = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 2}
)

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// eth builds an Ethernet header with the given stacked tag TPIDs (VID i+1).
func eth(dst, src [6]byte, et uint16, tpids ...uint16) []byte {
	b := cat(dst[:], src[:])
	for i, tp := range tpids {
		b = binary.BigEndian.AppendUint16(b, tp)
		b = binary.BigEndian.AppendUint16(b, uint16(i+1))
	}
	return binary.BigEndian.AppendUint16(b, et)
}

// ipv4 builds an IPv4 header (IHL 5, total length right) plus payload;
// fragField is the flags/fragment-offset word.
func ipv4(proto uint8, src, dst [4]byte, fragField uint16, payload []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	binary.BigEndian.PutUint16(h[4:], 0x1234)
	binary.BigEndian.PutUint16(h[6:], fragField)
	h[8] = 64
	h[9] = proto
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	return cat(h, payload)
}

// ipv6 builds an IPv6 header (payload length right) plus payload.
func ipv6(nh uint8, src, dst [16]byte, payload []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = nh
	h[7] = 64
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	return cat(h, payload)
}

// ext6 is an 8-byte hop-by-hop / routing / destination options header.
func ext6(nh uint8) []byte { return []byte{nh, 0, 1, 4, 0, 0, 0, 0} }

// ah6 is a 12-byte AH header (payload length 1: (1+2)·4 = 12).
func ah6(nh uint8) []byte { return []byte{nh, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1} }

// frag6 is a fragment header with offset (in 8-byte units) and M.
func frag6(nh uint8, offset uint16, more bool) []byte {
	w := offset << 3
	if more {
		w |= 1
	}
	b := []byte{nh, 0, 0, 0, 0, 0, 0x42, 0x42}
	binary.BigEndian.PutUint16(b[2:], w)
	return b
}

func tcp(sport, dport uint16) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	h[12] = 5 << 4
	h[13] = 0x10
	return h
}

func udp(sport, dport uint16, payload []byte) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
	return cat(h, payload)
}

func sctp(sport, dport uint16) []byte {
	h := make([]byte, 12)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	return h
}

func icmp() []byte { return []byte{8, 0, 0, 0, 0, 1, 0, 1} }

func tcp4(sport, dport uint16) []byte {
	return cat(eth(macB, macA, EtherTypeIPv4), ipv4(ProtoTCP, ip4A, ip4B, 0x4000, tcp(sport, dport)))
}

func tcp6ext() []byte {
	return cat(eth(macB, macA, EtherTypeIPv6),
		ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoRouting), ext6(ProtoTCP), tcp(40000, 443))))
}

// with returns a copy of b with f applied.
func with(b []byte, f func([]byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return c
}
