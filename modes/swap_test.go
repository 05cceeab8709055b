package modes_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// Frames built byte by byte, with their checksums computed here, apart
// from anything the code under test does.

var (
	macA  = []byte{0x02, 0xaa, 0, 0, 0, 0x01}
	macB  = []byte{0x02, 0xbb, 0, 0, 0, 0x02}
	ip4A  = []byte{198, 18, 0, 1}
	ip4B  = []byte{198, 18, 7, 200}
	ip6A  = []byte{0xfd, 0, 0x58, 0x44, 0x50, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0x01}
	ip6B  = []byte{0xfd, 0, 0x58, 0x44, 0x50, 0x46, 0, 0, 0, 0, 0, 0, 0xfe, 0xdc, 0xcd, 0x02}
	ip6RH = []byte{0xfd, 0, 0x58, 0x44, 0x50, 0x46, 0, 0, 0, 0, 0, 0, 0, 0, 0xef, 0x03}
)

// onesSum is the folded 16-bit ones'-complement sum of b (odd length padded
// with a zero byte) on top of initial.
func onesSum(b []byte, initial uint32) uint16 {
	s := initial
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// pseudo is the unfolded pseudo-header sum of src, dst, proto and n.
func pseudo(src, dst []byte, proto byte, n int) uint32 {
	var s uint32
	for _, a := range [][]byte{src, dst} {
		for i := 0; i < len(a); i += 2 {
			s += uint32(a[i])<<8 | uint32(a[i+1])
		}
	}
	return s + uint32(proto) + uint32(n)
}

// csumOff is where proto's checksum field is in its header, or -1.
func csumOff(proto byte) int {
	switch proto {
	case 6:
		return 16
	case 17:
		return 6
	case 58:
		return 2
	}
	return -1
}

func udpSeg(sport, dport uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	for i := 8; i < len(b); i++ {
		b[i] = byte(i * 7)
	}
	return b
}

func tcpSeg(sport, dport uint16, payload int) []byte {
	b := make([]byte, 20+payload)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0x01020304)
	binary.BigEndian.PutUint32(b[8:], 0x0a0b0c0d)
	b[12] = 5 << 4
	b[13] = 0x18 // PSH ACK
	binary.BigEndian.PutUint16(b[14:], 512)
	for i := 20; i < len(b); i++ {
		b[i] = byte(i*13 + 1)
	}
	return b
}

// sample is a frame and where its fields are.
type sample struct {
	b      []byte
	l3, l4 int // offsets; l4 is -1 without a TCP/UDP header
	v6     bool
	// l4csum: the L4 checksum covers this frame's segment alone (not a
	// fragment) under its IPv6 destination field: check it after.
	l4csum bool
	proto  byte
	segEnd int
}

// eth is an Ethernet header of etype behind tags (TPID, VID pairs).
func eth(etype uint16, tags ...uint16) []byte {
	b := append(append([]byte{}, macA...), macB...)
	for i := 0; i+1 < len(tags); i += 2 {
		b = binary.BigEndian.AppendUint16(b, tags[i])
		b = binary.BigEndian.AppendUint16(b, tags[i+1])
	}
	return binary.BigEndian.AppendUint16(b, etype)
}

// v4 is an IPv4 frame: options of optLen bytes, flags and offset frag, seg
// as the payload with its checksum filled in (for a TCP/UDP/ICMP seg of a
// whole datagram), pad bytes of Ethernet padding after it.
func v4(tags []uint16, proto byte, frag uint16, optLen int, seg []byte, pad int) sample {
	b := eth(0x0800, tags...)
	l3 := len(b)
	ihl := 20 + optLen
	h := make([]byte, ihl)
	h[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(h[2:], uint16(ihl+len(seg)))
	binary.BigEndian.PutUint16(h[4:], 0x1234)
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8] = 64
	h[9] = proto
	copy(h[12:], ip4A)
	copy(h[16:], ip4B)
	for i := 20; i < ihl; i++ {
		h[i] = 1 // NOP options
	}
	binary.BigEndian.PutUint16(h[10:], ^onesSum(h, 0))
	seg = append([]byte{}, seg...)
	whole := frag&0x3fff == 0
	if o := csumOff(proto); o >= 0 && whole && len(seg) >= o+2 && proto != 58 {
		binary.BigEndian.PutUint16(seg[o:], ^onesSum(seg, pseudo(ip4A, ip4B, proto, len(seg))))
	}
	b = append(append(b, h...), seg...)
	s := sample{b: append(b, make([]byte, pad)...), l3: l3, l4: -1, proto: proto, segEnd: len(b)}
	if (proto == 6 || proto == 17) && frag&0x1fff == 0 {
		s.l4, s.l4csum = l3+ihl, whole
	}
	return s
}

// ext is an IPv6 extension header: its type and the bytes after its
// next-header and length bytes (a multiple of 8, less 2).
type ext struct {
	typ  byte
	body []byte
}

// v6 is an IPv6 frame with exts in front of seg.
func v6(tags []uint16, exts []ext, proto byte, seg []byte) sample {
	b := eth(0x86dd, tags...)
	l3 := len(b)
	var x []byte
	for i, e := range exts {
		next := proto
		if i+1 < len(exts) {
			next = exts[i+1].typ
		}
		x = append(x, next, byte((len(e.body)+2)/8-1))
		x = append(x, e.body...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	h[1] = 0x0c // traffic class, flow label: left alone
	binary.BigEndian.PutUint16(h[4:], uint16(len(x)+len(seg)))
	h[6] = proto
	if len(exts) > 0 {
		h[6] = exts[0].typ
	}
	h[7] = 64
	copy(h[8:], ip6A)
	copy(h[24:], ip6B)
	seg = append([]byte{}, seg...)
	if o := csumOff(proto); o >= 0 && len(seg) >= o+2 {
		binary.BigEndian.PutUint16(seg[o:], ^onesSum(seg, pseudo(ip6A, ip6B, proto, len(seg))))
	}
	b = append(append(append(b, h...), x...), seg...)
	s := sample{b: b, l3: l3, l4: -1, v6: true, proto: proto, l4csum: csumOff(proto) >= 0, segEnd: len(b)}
	if proto == 6 || proto == 17 {
		s.l4 = l3 + 40 + len(x)
	}
	return s
}

var (
	hopByHop  = ext{0, []byte{1, 4, 0, 0, 0, 0}}                           // PadN
	destOpts  = ext{60, []byte{1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} // PadN, 16 bytes
	routingSL = func(left byte) ext { return ext{43, append([]byte{4, left, 0, 0, 0, 0}, ip6RH...)} }
	fragHdr   = func(off uint16, more bool) ext {
		v := off << 3
		if more {
			v |= 1
		}
		return ext{44, []byte{byte(v >> 8), byte(v), 0, 0, 0x12, 0x34}} // offset|M, id (the builder writes the reserved byte 0)
	}
	vlan = []uint16{0x8100, 100}
	qinq = []uint16{0x88a8, 200, 0x8100, 300}
	arp  = func() sample {
		b := eth(0x0806)
		b = append(b, 0, 1, 8, 0, 6, 4, 0, 1)
		b = append(append(append(append(b, macB...), ip4A...), 0, 0, 0, 0, 0, 0), ip4B...)
		return sample{b: append(b, make([]byte, 18)...), l4: -1}
	}
)

// swapCase is one frame and what SwapFiveTuple must do with it.
type swapCase struct {
	name   string
	s      sample
	length int // the packet's length, 0: len(s.b)
	cut    int // keep only the first cut bytes of the frame (the first segment), 0: all
	want   modes.SwapResult
}

func swapCases() []swapCase {
	udp4 := v4(nil, 17, 0, 0, udpSeg(1024, 9, 26), 0)
	tcp4 := v4(nil, 6, 0, 0, tcpSeg(40000, 80, 100), 0)
	tcpShort := v4(nil, 6, 0, 0, tcpSeg(40000, 80, 4), 0)
	cut := func(s sample, n int) sample { s.b = append([]byte{}, s.b[:n]...); return s }
	set := func(s sample, off int, v ...byte) sample {
		s.b = append([]byte{}, s.b...)
		copy(s.b[off:], v)
		return s
	}
	udp0 := v4(nil, 17, 0, 0, udpSeg(7, 8, 10), 0)
	binary.BigEndian.PutUint16(udp0.b[udp0.l4+6:], 0) // no checksum
	return []swapCase{
		{"ipv4 udp", udp4, 0, 0, modes.SwapL4},
		{"ipv4 tcp", tcp4, 0, 0, modes.SwapL4},
		{"ipv4 udp checksum 0", udp0, 0, 0, modes.SwapL4},
		{"ipv4 udp padded", v4(nil, 17, 0, 0, udpSeg(5, 6, 1), 17), 0, 0, modes.SwapL4},
		{"ipv4 options tcp", v4(nil, 6, 0, 12, tcpSeg(1, 2, 3), 0), 0, 0, modes.SwapL4},
		{"ipv4 tcp multi-buffer", tcp4, len(tcp4.b) + 3000, 0, modes.SwapL4},
		{"ipv4 icmp", v4(nil, 1, 0, 0, []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}, 0), 0, 0, modes.SwapL3},
		{"ipv4 sctp", v4(nil, 132, 0, 0, make([]byte, 16), 0), 0, 0, modes.SwapL3},
		{"ipv4 first fragment udp", v4(nil, 17, 0x2000, 0, udpSeg(3, 4, 24), 0), 0, 0, modes.SwapL4},
		{"ipv4 later fragment udp", v4(nil, 17, 0x2000|185, 0, make([]byte, 32), 0), 0, 0, modes.SwapL3},
		{"ipv4 last fragment", v4(nil, 6, 3, 0, make([]byte, 12), 0), 0, 0, modes.SwapL3},
		{"vlan ipv4 udp", v4(vlan, 17, 0, 0, udpSeg(1, 2, 30), 0), 0, 0, modes.SwapL4},
		{"qinq ipv4 tcp", v4(qinq, 6, 0, 0, tcpSeg(1, 2, 30), 0), 0, 0, modes.SwapL4},
		{"9100 tag ipv4 udp", v4([]uint16{0x9100, 5}, 17, 0, 0, udpSeg(1, 2, 3), 0), 0, 0, modes.SwapL4},
		{"ipv6 udp", v6(nil, nil, 17, udpSeg(5353, 53, 40)), 0, 0, modes.SwapL4},
		{"ipv6 tcp", v6(nil, nil, 6, tcpSeg(443, 50000, 64)), 0, 0, modes.SwapL4},
		{"vlan ipv6 udp", v6(vlan, nil, 17, udpSeg(1, 2, 3)), 0, 0, modes.SwapL4},
		{"qinq ipv6 tcp", v6(qinq, nil, 6, tcpSeg(1, 2, 3)), 0, 0, modes.SwapL4},
		{"ipv6 hop-by-hop dest-opts tcp", v6(nil, []ext{hopByHop, destOpts}, 6, tcpSeg(9, 10, 11)), 0, 0, modes.SwapL4},
		{"ipv6 routing done udp", v6(nil, []ext{routingSL(0)}, 17, udpSeg(9, 10, 11)), 0, 0, modes.SwapL4},
		{"ipv6 routing segments left", v6(nil, []ext{routingSL(1)}, 17, udpSeg(9, 10, 11)), 0, 0, modes.SwapL3},
		{"ipv6 first fragment udp", v6(nil, []ext{fragHdr(0, true)}, 17, udpSeg(9, 10, 16)), 0, 0, modes.SwapL4},
		{"ipv6 later fragment", v6(nil, []ext{fragHdr(3, false)}, 17, udpSeg(9, 10, 16)), 0, 0, modes.SwapL3},
		{"ipv6 icmpv6", v6(nil, nil, 58, []byte{128, 0, 0, 0, 0, 1, 0, 1}), 0, 0, modes.SwapL3},
		{"ipv6 esp", v6(nil, nil, 50, make([]byte, 16)), 0, 0, modes.SwapL3},
		{"ipv6 nine ext headers", v6(nil, []ext{hopByHop, destOpts, destOpts, destOpts, destOpts, destOpts, destOpts, destOpts, destOpts}, 17, udpSeg(1, 2, 3)), 0, 0, modes.SwapL3},
		{"arp", arp(), 0, 0, modes.SwapL2},
		{"lldp-like", sample{b: append(eth(0x88cc), make([]byte, 46)...), l4: -1}, 0, 0, modes.SwapL2},
		{"vlan arp", sample{b: append(eth(0x0806, vlan...), make([]byte, 46)...), l4: -1}, 0, 0, modes.SwapL2},

		{"truncated ethernet", sample{b: append([]byte{}, macA[:6]...), l4: -1}, 0, 0, modes.SwapTruncated},
		{"truncated 13 bytes", cut(udp4, 13), 0, 0, modes.SwapTruncated},
		{"truncated ethernet header only", cut(udp4, 14), 0, 0, modes.SwapTruncated},
		{"truncated vlan tag", sample{b: eth(0x8100)[:16], l4: -1}, 0, 0, modes.SwapTruncated},
		{"truncated ipv4 header", cut(udp4, 30), 0, 0, modes.SwapTruncated},
		{"truncated ipv4 total length", cut(udp4, len(udp4.b)-1), 0, 0, modes.SwapTruncated},
		{"truncated ipv4 tcp in first segment", tcp4, 0, 14 + 20 + 3, modes.SwapTruncated},
		{"truncated ipv6 header", cut(v6(nil, nil, 17, udpSeg(1, 2, 3)), 50), 0, 0, modes.SwapTruncated},
		{"truncated ipv6 payload length", cut(v6(nil, nil, 17, udpSeg(1, 2, 30)), 80), 0, 0, modes.SwapTruncated},
		{"truncated ipv6 ext header in first segment", v6(nil, []ext{hopByHop}, 17, udpSeg(1, 2, 30)), 0, 14 + 40 + 4, modes.SwapTruncated},

		{"malformed ihl 4", set(udp4, 14, 0x44), 0, 0, modes.SwapMalformed},
		{"malformed ipv4 version 6", set(udp4, 14, 0x65), 0, 0, modes.SwapMalformed},
		{"malformed total length under ihl", set(udp4, 16, 0, 19), 0, 0, modes.SwapMalformed},
		{"malformed udp length", set(udp4, udp4.l4+4, 0xff, 0), 0, 0, modes.SwapMalformed},
		{"malformed udp length 7", set(udp4, udp4.l4+4, 0, 7), 0, 0, modes.SwapMalformed},
		{"malformed tcp data offset", set(tcp4, tcp4.l4+12, 4<<4), 0, 0, modes.SwapMalformed},
		{"malformed tcp data offset past segment", set(tcpShort, tcpShort.l4+12, 15<<4), 0, 0, modes.SwapMalformed},
		{"malformed ipv6 version 4", set(v6(nil, nil, 17, udpSeg(1, 2, 3)), 14, 0x45), 0, 0, modes.SwapMalformed},
		{"malformed ipv6 ext header past payload", set(v6(nil, []ext{hopByHop}, 17, udpSeg(1, 2, 3)), 14+41, 9), 0, 0, modes.SwapMalformed},
		{"malformed five vlan tags", sample{b: append(eth(0x0800, 0x8100, 1, 0x8100, 2, 0x8100, 3, 0x8100, 4, 0x8100, 5), make([]byte, 40)...), l4: -1}, 0, 0, modes.SwapMalformed},
	}
}

// expected is s's frame as SwapFiveTuple must leave it at level r,
// swapped here field by field from where the builder put them.
func expected(s sample, b []byte, r modes.SwapResult) []byte {
	w := append([]byte{}, b...)
	if len(w) < 14 {
		return w
	}
	swap := func(a, b, n int) {
		t := append([]byte{}, w[a:a+n]...)
		copy(w[a:a+n], w[b:b+n])
		copy(w[b:b+n], t)
	}
	swap(0, 6, 6)
	if r == modes.SwapL3 || r == modes.SwapL4 {
		if s.v6 {
			swap(s.l3+8, s.l3+24, 16)
		} else {
			swap(s.l3+12, s.l3+16, 4)
		}
	}
	if r == modes.SwapL4 {
		swap(s.l4, s.l4+2, 2)
	}
	return w
}

// checksumsValid reports whether s's IPv4 header checksum and (where the
// frame holds the whole segment) TCP/UDP/ICMPv6 checksum verify on b,
// computed from the bytes as they are now.
func checksumsValid(s sample, b []byte) error {
	if s.l3 == 0 {
		return nil
	}
	var src, dst []byte
	l4 := 0
	if s.v6 {
		src, dst = b[s.l3+8:s.l3+24], b[s.l3+24:s.l3+40]
		l4 = s.l3 + 40 // ICMPv6 cases have no extension headers
		if s.l4 >= 0 {
			l4 = s.l4
		}
	} else {
		ihl := int(b[s.l3]&0xf) * 4
		if got := onesSum(b[s.l3:s.l3+ihl], 0); got != 0xffff {
			return fmt.Errorf("IPv4 header sums to %#04x, want 0xffff", got)
		}
		src, dst = b[s.l3+12:s.l3+16], b[s.l3+16:s.l3+20]
		l4 = s.l3 + ihl
	}
	if !s.l4csum || csumOff(s.proto) < 0 {
		return nil
	}
	seg := b[l4:s.segEnd]
	if s.proto == 17 && binary.BigEndian.Uint16(seg[6:]) == 0 && !s.v6 {
		return nil // IPv4 UDP without a checksum
	}
	if got := onesSum(seg, pseudo(src, dst, s.proto, len(seg))); got != 0xffff {
		return fmt.Errorf("protocol %d checksum: segment and pseudo-header sum to %#04x, want 0xffff", s.proto, got)
	}
	return nil
}

// TestSwapFiveTuple: each frame is swapped at the level its headers allow,
// byte for byte as swapped independently here, nothing else changes, and
// the checksums that were valid before still verify after.
func TestSwapFiveTuple(t *testing.T) {
	for _, c := range swapCases() {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte{}, c.s.b...)
			length := len(b)
			if c.length != 0 {
				length = c.length
			}
			if c.cut != 0 {
				b = b[:c.cut]
			}
			valid := c.want == modes.SwapL3 || c.want == modes.SwapL4
			if valid {
				if err := checksumsValid(c.s, b); err != nil {
					t.Fatalf("the test's frame before the swap: %v", err)
				}
			}
			want := expected(c.s, b, c.want)
			got := modes.SwapFiveTuple(b, length)
			if got != c.want {
				t.Errorf("SwapFiveTuple = %v, want %v", got, c.want)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("frame after the swap:\n got % x\nwant % x", b, want)
			}
			if valid {
				if err := checksumsValid(c.s, b); err != nil {
					t.Errorf("after the swap: %v", err)
				}
			}
		})
	}
}

// TestFiveTupleSwapHandler: the handler reflects every frame of 14 bytes
// or more, drops shorter ones, and counts every frame by what was swapped
// (L2, L3, L4, truncated, malformed) exactly.
func TestFiveTupleSwapHandler(t *testing.T) {
	h := modes.NewFiveTupleSwap()
	var pkts []fwd.Packet
	var wantTrunc, wantBad, wantDropped uint64
	wantBy := map[modes.SwapResult]uint64{}
	for _, c := range swapCases() {
		b := append([]byte{}, c.s.b...)
		n := len(b)
		if c.length != 0 {
			n = c.length
		}
		if c.cut != 0 {
			b = b[:c.cut]
		}
		pkts = append(pkts, fwd.Packet{Data: b, Len: n, Link: 0})
		switch c.want {
		case modes.SwapTruncated:
			wantTrunc++
			if len(b) < 14 {
				wantDropped++
			}
		case modes.SwapMalformed:
			wantBad++
		default:
			wantBy[c.want]++
		}
	}
	h.Handle(pkts)
	for i, p := range pkts {
		v, _ := p.Verdict()
		want := fwd.VerdictReflect
		if len(p.Data) < 14 {
			want = fwd.VerdictDrop
		}
		if v != want {
			t.Errorf("packet %d (%d bytes): verdict %v, want %v", i, len(p.Data), v, want)
		}
	}
	if s := h.Stats(); s.Truncated != wantTrunc || s.Malformed != wantBad || s.Dropped != wantDropped ||
		s.L2 != wantBy[modes.SwapL2] || s.L3 != wantBy[modes.SwapL3] || s.L4 != wantBy[modes.SwapL4] {
		t.Errorf("stats %+v, want %d truncated (%d dropped), %d malformed, l2/l3/l4 %v", s, wantTrunc, wantDropped, wantBad, wantBy)
	}
	if _, ok := any(h).(fwd.PromiscHandler); ok {
		t.Errorf("5tswap opts out of promiscuous mode: it must get frames for other MACs, as reflect does")
	}
}

// TestSwapNoAlloc: swapping a batch allocates nothing.
func TestSwapNoAlloc(t *testing.T) {
	h := modes.NewFiveTupleSwap()
	pkts := benchBatch()
	if n := testing.AllocsPerRun(100, func() { h.Handle(pkts) }); n != 0 {
		t.Errorf("5tswap: %v allocations per batch, want 0", n)
	}
	m, err := modes.NewMAC(2, []net.HardwareAddr{macA})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { m.Handle(pkts) }); n != 0 {
		t.Errorf("mac: %v allocations per batch, want 0", n)
	}
}

// benchBatch is a batch of 64 frames: IPv4 and IPv6, TCP and UDP.
func benchBatch() []fwd.Packet {
	frames := []sample{
		v4(nil, 17, 0, 0, udpSeg(1, 2, 18), 0),
		v4(nil, 6, 0, 0, tcpSeg(1, 2, 6), 0),
		v6(nil, nil, 17, udpSeg(1, 2, 18)),
		v6(vlan, nil, 6, tcpSeg(1, 2, 6)),
	}
	pkts := make([]fwd.Packet, 64)
	for i := range pkts {
		b := frames[i%len(frames)].b
		pkts[i] = fwd.Packet{Data: append([]byte{}, b...), Len: len(b), Link: i % 2}
	}
	return pkts
}

// BenchmarkFiveTupleSwap: one 64-frame batch through the handler; ns/op
// over 64 is the cost per packet.
func BenchmarkFiveTupleSwap(b *testing.B) {
	h := modes.NewFiveTupleSwap()
	pkts := benchBatch()
	b.ReportAllocs()
	for b.Loop() {
		h.Handle(pkts)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/pkt")
}

func BenchmarkMAC(b *testing.B) {
	m, err := modes.NewMAC(2, []net.HardwareAddr{macA})
	if err != nil {
		b.Fatal(err)
	}
	pkts := benchBatch()
	b.ReportAllocs()
	for b.Loop() {
		m.Handle(pkts)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/pkt")
}

var writeCorpus = flag.Bool("write-corpus", false, "write the swap cases to testdata/fuzz/FuzzSwapFiveTuple")

// FuzzSwapFiveTuple: on any bytes and any packet length, SwapFiveTuple
// stays in the frame (no panic), changes no length, is its own inverse
// (swapping twice gives the frame back, with the same result both times),
// and leaves the ones'-complement sum of the frame as it was: it only
// exchanges aligned 16-bit words, so no checksum over both of a pair can
// change.
func FuzzSwapFiveTuple(f *testing.F) {
	for _, c := range swapCases() {
		b := c.s.b
		if c.cut != 0 {
			b = b[:c.cut]
		}
		f.Add(b, uint16(max(c.length-len(b), 0)))
	}
	f.Fuzz(func(t *testing.T, b []byte, extra uint16) {
		orig := append([]byte{}, b...)
		n := len(b) + int(extra)
		r1 := modes.SwapFiveTuple(b, n)
		if r1 > modes.SwapMalformed {
			t.Fatalf("result %d", r1)
		}
		if onesSum(b, 0) != onesSum(orig, 0) {
			t.Fatalf("%v: the frame's ones'-complement sum changed: % x → % x", r1, orig, b)
		}
		r2 := modes.SwapFiveTuple(b, n)
		if r2 != r1 || !bytes.Equal(b, orig) {
			t.Fatalf("swapped twice: %v then %v, % x → % x", r1, r2, orig, b)
		}
	})
}

// TestWriteCorpus writes the swap cases as FuzzSwapFiveTuple's seed corpus
// under testdata (go test -run TestWriteCorpus -write-corpus ./modes/),
// so that `go test` replays them without the table too.
func TestWriteCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("only with -write-corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzSwapFiveTuple")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range swapCases() {
		b := c.s.b
		if c.cut != 0 {
			b = b[:c.cut]
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint16(%d)\n", b, max(c.length-len(b), 0))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("case%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
