package csum

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	mac1  = []byte{0x02, 0, 0, 0, 0, 1}
	mac2  = []byte{0x02, 0, 0, 0, 0, 2}
	src4  = []byte{10, 1, 2, 3}
	dst4  = []byte{192, 168, 254, 201}
	src6  = []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	dst6  = []byte{0xfd, 0x00, 0xbe, 0xef, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}
	home6 = []byte{0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xca, 0xfe, 0, 0x42}
)

// ext is an IPv6 extension header: typ is its own type; body is the whole
// header, byte 0 (next header) filled in by build.
type ext struct {
	typ  uint8
	body []byte
}

func optsHeader(typ uint8, units int) ext {
	b := make([]byte, 8*units)
	b[1] = byte(units - 1)
	b[2], b[3] = 1, byte(len(b)-4) // PadN over the rest
	return ext{typ, b}
}

// routing2 is a Mobile IPv6 type 2 routing header carrying the home
// address, the final destination.
func routing2(left byte) ext {
	return ext{43, cat([]byte{0, 2, 2, left, 0, 0, 0, 0}, home6)}
}

// srh is a Segment Routing Header whose Segment List[0] (the final
// segment) is home6.
func srh(left byte) ext {
	return ext{43, cat([]byte{0, 4, 4, left, 1, 0, 0, 0}, home6, dst6)}
}

type spec struct {
	tpids   []uint16 // VLAN tag protocol IDs, outermost first
	v6      bool
	proto   uint8
	ip4opts []byte // a multiple of four bytes
	exts    []ext
	tcpOpts []byte // a multiple of four bytes
	payload []byte
	pad     int // Ethernet padding after the IP packet
}

// packet is a built frame with a correct checksum, and what the tests need
// to know about it.
type packet struct {
	frame    []byte
	ip       int    // offset of the IP header
	l4       int    // offset of the segment
	l4Len    int    // length of the segment
	field    int    // offset of the checksum field (-1: not TCP/UDP)
	pseudo   []byte // pseudo-header
	partial  uint16 // folded pseudo-header sum: what an offloading sender leaves
	full     uint16 // the correct checksum
	udp, ip4 bool
}

func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 77))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func build(s spec) *packet {
	p := &packet{field: -1, udp: s.proto == 17, ip4: !s.v6}
	var hdr []byte
	switch s.proto {
	case 6:
		hdr = make([]byte, 20+len(s.tcpOpts))
		binary.BigEndian.PutUint16(hdr[0:], 40000)
		binary.BigEndian.PutUint16(hdr[2:], 443)
		binary.BigEndian.PutUint32(hdr[4:], 0x01020304)
		binary.BigEndian.PutUint32(hdr[8:], 0xa0b0c0d0)
		hdr[12] = byte(len(hdr)/4) << 4
		hdr[13] = 0x18
		binary.BigEndian.PutUint16(hdr[14:], 65535)
		copy(hdr[20:], s.tcpOpts)
	case 17:
		hdr = make([]byte, 8)
		binary.BigEndian.PutUint16(hdr[0:], 5353)
		binary.BigEndian.PutUint16(hdr[2:], 53)
		binary.BigEndian.PutUint16(hdr[4:], uint16(8+len(s.payload)))
	default:
		hdr = []byte{8, 0, 0x12, 0x34, 0, 1, 0, 1} // ICMP-ish
	}
	l4 := cat(hdr, s.payload)
	eth := cat(mac1, mac2)
	for _, tp := range s.tpids {
		eth = binary.BigEndian.AppendUint16(eth, tp)
		eth = binary.BigEndian.AppendUint16(eth, 100)
	}
	var ip []byte
	if !s.v6 {
		eth = binary.BigEndian.AppendUint16(eth, 0x0800)
		ihl := 20 + len(s.ip4opts)
		ip = make([]byte, ihl)
		ip[0] = 0x40 | byte(ihl/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(l4)))
		binary.BigEndian.PutUint16(ip[4:], 0x4242)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, s.proto
		copy(ip[12:], src4)
		copy(ip[16:], dst4)
		copy(ip[20:], s.ip4opts)
		binary.BigEndian.PutUint16(ip[10:], ^refFold(refSum(ip)))
		p.pseudo = cat(src4, dst4, []byte{0, s.proto, byte(len(l4) >> 8), byte(len(l4))})
	} else {
		eth = binary.BigEndian.AppendUint16(eth, 0x86dd)
		var exts []byte
		final := dst6
		next := s.proto
		for i := len(s.exts) - 1; i >= 0; i-- {
			e := bytes.Clone(s.exts[i].body)
			e[0] = next
			next = s.exts[i].typ
			exts = cat(e, exts)
			if s.exts[i].typ == 43 && e[3] != 0 {
				final = home6
			}
		}
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(exts)+len(l4)))
		ip[6], ip[7] = next, 64
		copy(ip[8:], src6)
		copy(ip[24:], dst6)
		ip = cat(ip, exts)
		n := len(l4)
		p.pseudo = cat(src6, final, []byte{0, 0, byte(n >> 8), byte(n), 0, 0, 0, s.proto})
	}
	pad := bytes.Repeat([]byte{0xa5}, s.pad)
	p.frame = cat(eth, ip, l4, pad)
	p.ip, p.l4, p.l4Len = len(eth), len(eth)+len(ip), len(l4)
	if s.proto == 6 {
		p.field = p.l4 + 16
	} else if s.proto == 17 {
		p.field = p.l4 + 6
	}
	p.refresh()
	return p
}

// refresh recomputes, with the reference implementation, the correct
// checksum after the segment was edited, and writes it.
func (p *packet) refresh() {
	if p.field < 0 {
		return
	}
	p.setField(0)
	c := ^refFold(refSum(cat(p.pseudo, p.seg())))
	if p.udp && c == 0 {
		c = 0xffff
	}
	p.full = c
	p.partial = refFold(refSum(p.pseudo))
	p.setField(c)
}

func (p *packet) seg() []byte       { return p.frame[p.l4 : p.l4+p.l4Len] }
func (p *packet) setField(v uint16) { binary.BigEndian.PutUint16(p.frame[p.field:], v) }
func (p *packet) valid() bool       { return refFold(refSum(cat(p.pseudo, p.seg()))) == 0xffff }
func (p *packet) clone() *packet    { q := *p; q.frame = bytes.Clone(p.frame); return &q }
func (p *packet) partialFrame() []byte {
	q := p.clone()
	if p.field >= 0 {
		q.setField(p.partial)
	}
	return q.frame
}

// payloadWordOffset is the frame offset of the first payload word (even
// offset in the segment).
func (p *packet) payloadWordOffset() int {
	if p.udp {
		return p.l4 + 8
	}
	return p.l4 + int(p.frame[p.l4+12]>>4)*4
}

// fullEqualsPartial edits the first payload word so that the correct
// checksum equals the folded pseudo-header sum: a complete packet that
// looks partial.
func (p *packet) fullEqualsPartial() {
	w := p.payloadWordOffset()
	binary.BigEndian.PutUint16(p.frame[w:], 0)
	p.setField(0)
	P := uint64(refFold(refSum(p.pseudo)))
	rest := refSum(p.seg())
	binary.BigEndian.PutUint16(p.frame[w:], ^refFold(P+P+rest))
	p.refresh()
}

// fullIsZero edits the first payload word so that the one's-complement
// sum of pseudo-header and segment is 0xffff, i.e. the computed checksum is
// 0 (UDP then sends 0xffff).
func (p *packet) fullIsZero() {
	w := p.payloadWordOffset()
	binary.BigEndian.PutUint16(p.frame[w:], 0)
	p.refresh()
	c := p.full
	if p.udp && c == 0xffff {
		c = 0
	}
	binary.BigEndian.PutUint16(p.frame[w:], c)
	p.refresh()
}

type goodCase struct {
	name string
	spec spec
	edit func(*packet)
}

func goodCases() []goodCase {
	pl := payload
	return []goodCase{
		{name: "ipv4-tcp", spec: spec{proto: 6, payload: pl(100, 1)}},
		{name: "ipv4-tcp-odd", spec: spec{proto: 6, payload: pl(101, 2)}},
		{name: "ipv4-tcp-empty", spec: spec{proto: 6}},
		{name: "ipv4-tcp-options", spec: spec{proto: 6, tcpOpts: []byte{2, 4, 5, 0xb4, 1, 1, 4, 2}, payload: pl(33, 3)}},
		{name: "ipv4-tcp-1500", spec: spec{proto: 6, payload: pl(1460, 4)}},
		{name: "ipv4-udp", spec: spec{proto: 17, payload: pl(64, 5)}},
		{name: "ipv4-udp-odd", spec: spec{proto: 17, payload: pl(3, 6)}},
		{name: "ipv4-udp-empty", spec: spec{proto: 17}},
		{name: "ipv4-udp-jumbo", spec: spec{proto: 17, payload: pl(8972, 7)}},
		{name: "ipv4-options-tcp", spec: spec{proto: 6, ip4opts: []byte{0x94, 4, 0, 0, 1, 1, 1, 0}, payload: pl(51, 8)}},
		{name: "ipv6-tcp", spec: spec{v6: true, proto: 6, payload: pl(200, 9)}},
		{name: "ipv6-tcp-odd", spec: spec{v6: true, proto: 6, payload: pl(1, 10)}},
		{name: "ipv6-udp", spec: spec{v6: true, proto: 17, payload: pl(77, 11)}},
		{name: "ipv6-udp-jumbo", spec: spec{v6: true, proto: 17, payload: pl(8952, 12)}},
		{name: "vlan-ipv4-tcp", spec: spec{tpids: []uint16{0x8100}, proto: 6, payload: pl(99, 13)}},
		{name: "qinq-ipv6-udp", spec: spec{tpids: []uint16{0x88a8, 0x8100}, v6: true, proto: 17, payload: pl(40, 14)}},
		{name: "4tags-ipv4-udp", spec: spec{tpids: []uint16{0x88a8, 0x9100, 0x8100, 0x8100}, proto: 17, payload: pl(10, 15)}},
		{name: "padded-ipv4-tcp", spec: spec{proto: 6, payload: pl(5, 16), pad: 1}},
		{name: "padded-ipv4-udp", spec: spec{proto: 17, payload: pl(1, 17), pad: 17}},
		{name: "padded-vlan-ipv4-udp", spec: spec{tpids: []uint16{0x8100}, proto: 17, payload: pl(2, 18), pad: 14}},
		{name: "padded-ipv6-udp", spec: spec{v6: true, proto: 17, payload: pl(0, 19), pad: 11}},
		{name: "ipv6-hbh-dst-tcp", spec: spec{v6: true, proto: 6, exts: []ext{optsHeader(0, 1), optsHeader(60, 2)}, payload: pl(300, 20)}},
		{name: "ipv6-dst-udp", spec: spec{v6: true, proto: 17, exts: []ext{optsHeader(60, 3)}, payload: pl(31, 21)}},
		{name: "ipv6-routing2-udp", spec: spec{v6: true, proto: 17, exts: []ext{routing2(1)}, payload: pl(48, 22)}},
		{name: "ipv6-srh-tcp", spec: spec{v6: true, proto: 6, exts: []ext{optsHeader(0, 1), srh(1), optsHeader(60, 1)}, payload: pl(64, 23)}},
		{name: "ipv6-srh-done-tcp", spec: spec{v6: true, proto: 6, exts: []ext{srh(0)}, payload: pl(64, 24)}},
		{name: "ipv6-8ext-udp", spec: spec{v6: true, proto: 17, exts: []ext{optsHeader(0, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1)}, payload: pl(8, 25)}},
		{name: "ipv4-tcp-full-is-zero", spec: spec{proto: 6, payload: pl(20, 26)}, edit: (*packet).fullIsZero},
		{name: "ipv4-udp-full-is-zero", spec: spec{proto: 17, payload: pl(20, 27)}, edit: (*packet).fullIsZero},
		{name: "ipv6-udp-full-is-zero", spec: spec{v6: true, proto: 17, payload: pl(21, 28)}, edit: (*packet).fullIsZero},
		{name: "ipv4-tcp-full-equals-partial", spec: spec{proto: 6, payload: pl(30, 29)}, edit: (*packet).fullEqualsPartial},
		{name: "ipv6-udp-full-equals-partial", spec: spec{v6: true, proto: 17, payload: pl(31, 30)}, edit: (*packet).fullEqualsPartial},
	}
}

func buildCase(t testing.TB, c goodCase) *packet {
	t.Helper()
	p := build(c.spec)
	if c.edit != nil {
		c.edit(p)
	}
	if !p.valid() {
		t.Fatalf("%s: reference built an invalid packet", c.name)
	}
	return p
}

// run calls Complete on a copy of frame placed at every offset 0..7 of a
// buffer (capacity capped at its length), checks the result against want
// for every placement, and returns the output.
func run(t *testing.T, frame []byte, want Result) []byte {
	t.Helper()
	var out []byte
	for align := range 8 {
		buf := make([]byte, align+len(frame))
		f := buf[align : align+len(frame) : align+len(frame)]
		copy(f, frame)
		if got := Complete(f); got != want {
			t.Fatalf("align %d: Complete = %v, want %v", align, got, want)
		}
		if out != nil && !bytes.Equal(out, f) {
			t.Fatalf("align %d: output differs from align 0", align)
		}
		out = f
	}
	return out
}

func TestGoodPackets(t *testing.T) {
	for _, c := range goodCases() {
		t.Run(c.name, func(t *testing.T) {
			p := buildCase(t, c)
			correct := p.frame

			if strings.HasSuffix(c.name, "full-equals-partial") && p.full != p.partial {
				t.Fatalf("edit failed: full checksum %#04x, partial %#04x", p.full, p.partial)
			}
			if strings.HasSuffix(c.name, "full-is-zero") {
				want := uint16(0)
				if p.udp {
					want = 0xffff
				}
				if p.full != want {
					t.Fatalf("edit failed: full checksum %#04x, want %#04x", p.full, want)
				}
			}

			// Partial → Completed, exactly the correct packet.
			partial := p.partialFrame()
			if bytes.Equal(partial, correct) {
				if c.edit == nil {
					t.Fatalf("partial packet equals the correct one")
				}
				// full-equals-partial: already complete.
				if got := run(t, partial, AlreadyComplete); !bytes.Equal(got, correct) {
					t.Fatal("complete packet that looks partial was modified")
				}
			} else if got := run(t, partial, Completed); !bytes.Equal(got, correct) {
				t.Fatalf("Completed packet differs from the correct one: field %#04x, want %#04x",
					binary.BigEndian.Uint16(got[p.field:]), p.full)
			}

			// Correct → AlreadyComplete, untouched.
			if got := run(t, correct, AlreadyComplete); !bytes.Equal(got, correct) {
				t.Fatal("correct packet was modified")
			}

			// Corrupted (not partial) → AlreadyComplete, untouched.
			for _, x := range []uint16{0x0001, 0x1234, 0x8000, 0xffff} {
				q := p.clone()
				v := p.full ^ x
				if v == p.partial || (p.udp && p.ip4 && v == 0) {
					continue
				}
				q.setField(v)
				if got := run(t, q.frame, AlreadyComplete); !bytes.Equal(got, q.frame) {
					t.Fatalf("corrupted checksum %#04x was modified", v)
				}
			}

			// Checksum 0: IPv4 UDP → UDPZero; others are just not partial.
			q := p.clone()
			q.setField(0)
			want := AlreadyComplete
			if p.udp && p.ip4 {
				want = UDPZero
			}
			if got := run(t, q.frame, want); !bytes.Equal(got, q.frame) {
				t.Fatal("zero checksum was modified")
			}

			// Every truncation inside the IP packet → NotL4, untouched.
			ipEnd := len(p.frame) - c.spec.pad
			for cut := range ipEnd {
				f := bytes.Clone(partial[:cut])
				if got := Complete(f); got != NotL4 || !bytes.Equal(f, partial[:cut]) {
					t.Fatalf("truncated to %d of %d: %v", cut, ipEnd, got)
				}
			}
		})
	}
}

// bad describes a frame Complete must leave alone as NotL4. Each starts
// from a partial packet so that a missed check would show as Completed.
type badCase struct {
	name string
	spec spec
	edit func(p *packet) []byte // returns the frame
}

func set16(off int, v uint16) func(p *packet) []byte {
	return func(p *packet) []byte {
		f := p.partialFrame()
		binary.BigEndian.PutUint16(f[off:], v)
		return f
	}
}

func badCases() []badCase {
	v4tcp := spec{proto: 6, payload: payload(40, 100)}
	v4udp := spec{proto: 17, payload: payload(40, 101)}
	v6udp := spec{v6: true, proto: 17, payload: payload(40, 102)}
	v6tcp := spec{v6: true, proto: 6, payload: payload(40, 103)}
	partial := func(p *packet) []byte { return p.partialFrame() }
	ipOff := func(off int, v uint16) func(p *packet) []byte {
		return func(p *packet) []byte { return set16(p.ip+off, v)(p) }
	}
	l4Off := func(off int, v uint16) func(p *packet) []byte {
		return func(p *packet) []byte { return set16(p.l4+off, v)(p) }
	}
	return []badCase{
		{"empty", v4tcp, func(p *packet) []byte { return nil }},
		{"runt-13", v4tcp, func(p *packet) []byte { return p.partialFrame()[:13] }},
		{"eth-only", v4tcp, func(p *packet) []byte { return p.partialFrame()[:14] }},
		{"vlan-tag-cut", spec{tpids: []uint16{0x8100}, proto: 6}, func(p *packet) []byte { return p.partialFrame()[:16] }},
		{"5-vlan-tags", spec{tpids: []uint16{0x8100, 0x8100, 0x8100, 0x8100, 0x8100}, proto: 17, payload: payload(9, 104)}, partial},
		{"arp", v4tcp, set16(12, 0x0806)},
		{"802.3-length", v4tcp, set16(12, 0x05dc)},
		{"ipv4-in-ipv6-ethertype", v4tcp, set16(12, 0x86dd)},
		{"ipv6-in-ipv4-ethertype", v6tcp, set16(12, 0x0800)},
		{"icmp", spec{proto: 1, payload: payload(56, 105)}, partial},
		{"icmpv6", spec{v6: true, proto: 58, payload: payload(56, 106)}, partial},
		{"ipv4-esp", spec{proto: 50, payload: payload(56, 107)}, partial},
		{"ipv4-mf", v4tcp, ipOff(6, 0x2000)},
		{"ipv4-frag-offset", v4udp, ipOff(6, 0x0010)},
		{"ipv4-last-frag", v4udp, ipOff(6, 0x4001)},
		{"ipv4-ihl-4", v4tcp, func(p *packet) []byte { f := p.partialFrame(); f[p.ip] = 0x44; return f }},
		{"ipv4-ihl-15-beyond-total", spec{proto: 17, payload: payload(31, 118)}, func(p *packet) []byte { f := p.partialFrame(); f[p.ip] = 0x4f; return f }},
		{"ipv4-total-below-ihl", v4tcp, ipOff(2, 19)},
		{"ipv4-total-beyond-frame", v4tcp, func(p *packet) []byte {
			return set16(p.ip+2, uint16(len(p.frame)-p.ip+1))(p)
		}},
		{"ipv4-total-zero", v4tcp, ipOff(2, 0)},
		{"ipv4-tcp-header-cut-by-total", v4tcp, ipOff(2, 20+19)},
		{"ipv4-udp-header-cut-by-total", v4udp, ipOff(2, 20+7)},
		{"tcp-doff-4", v4tcp, func(p *packet) []byte { f := p.partialFrame(); f[p.l4+12] = 0x40; return f }},
		{"tcp-doff-beyond", spec{v6: true, proto: 6, payload: payload(39, 119)}, func(p *packet) []byte { f := p.partialFrame(); f[p.l4+12] = 0xf0; return f }},
		{"udp-len-7", v4udp, l4Off(4, 7)},
		{"udp-len-beyond", v6udp, l4Off(4, 8+40+1)},
		{"ipv6-version-4", v6udp, func(p *packet) []byte { f := p.partialFrame(); f[p.ip] = 0x40; return f }},
		{"ipv6-plen-beyond-frame", v6udp, func(p *packet) []byte {
			return set16(p.ip+4, uint16(len(p.frame)-p.ip-40+1))(p)
		}},
		{"ipv6-jumbo-plen-0", spec{v6: true, proto: 17, exts: []ext{optsHeader(0, 1)}, payload: payload(8, 108)}, ipOff(4, 0)},
		{"ipv6-fragment", spec{v6: true, proto: 17, exts: []ext{{44, []byte{0, 0, 0, 1, 0, 0, 0, 9}}}, payload: payload(8, 109)}, partial},
		{"ipv6-atomic-fragment", spec{v6: true, proto: 6, exts: []ext{optsHeader(0, 1), {44, []byte{0, 0, 0, 0, 0, 0, 0, 9}}}, payload: payload(8, 110)}, partial},
		{"ipv6-no-next", spec{v6: true, proto: 59, payload: payload(8, 111)}, partial},
		{"ipv6-ah", spec{v6: true, proto: 6, exts: []ext{{51, make([]byte, 16)}}, payload: payload(8, 112)}, partial},
		{"ipv6-9-ext", spec{v6: true, proto: 17, exts: []ext{optsHeader(0, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1), optsHeader(60, 1)}, payload: payload(8, 113)}, partial},
		{"ipv6-ext-beyond-plen", spec{v6: true, proto: 17, exts: []ext{optsHeader(60, 1)}, payload: payload(8, 114)}, func(p *packet) []byte {
			f := p.partialFrame()
			f[p.ip+40+1] = 3 // 32 bytes > 8+16 of payload
			return f
		}},
		{"ipv6-routing-unknown-type", spec{v6: true, proto: 17, exts: []ext{{43, cat([]byte{0, 2, 253, 1, 0, 0, 0, 0}, home6)}}, payload: payload(8, 115)}, partial},
		{"ipv6-routing0-no-address", spec{v6: true, proto: 17, exts: []ext{{43, []byte{0, 0, 0, 1, 0, 0, 0, 0}}}, payload: payload(8, 116)}, partial},
		{"ipv6-srh-too-short", spec{v6: true, proto: 17, exts: []ext{{43, cat([]byte{0, 1, 4, 1, 0, 0, 0, 0}, make([]byte, 8))}}, payload: payload(8, 117)}, partial},
	}
}

func TestNotL4(t *testing.T) {
	for _, c := range badCases() {
		t.Run(c.name, func(t *testing.T) {
			p := build(c.spec)
			f := c.edit(p)
			orig := bytes.Clone(f)
			if got := Complete(f); got != NotL4 {
				t.Fatalf("Complete = %v, want %v", got, NotL4)
			}
			if !bytes.Equal(f, orig) {
				t.Fatal("frame was modified")
			}
			if r, _ := refComplete(orig); r != NotL4 {
				t.Fatalf("reference says %v", r)
			}
		})
	}
}

// TestReferenceAgrees runs the differential check used by the fuzz target
// over the table, so the reference itself is exercised.
func TestReferenceAgrees(t *testing.T) {
	for _, c := range goodCases() {
		p := buildCase(t, c)
		for _, f := range [][]byte{p.frame, p.partialFrame()} {
			checkAgainstReference(t, f)
		}
	}
}

func TestAllocs(t *testing.T) {
	p := build(spec{proto: 6, payload: payload(1460, 1)})
	partial := p.partialFrame()
	f := bytes.Clone(partial)
	if n := testing.AllocsPerRun(100, func() {
		copy(f, partial)
		if Complete(f) != Completed {
			panic("not completed")
		}
	}); n != 0 {
		t.Fatalf("%v allocs per Complete", n)
	}
}

func TestResultString(t *testing.T) {
	for r, want := range map[Result]string{NotL4: "not-l4", AlreadyComplete: "already-complete", Completed: "completed", UDPZero: "udp-zero", 200: "invalid"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}

// TestSumProperty: random lengths 0..9000 at random alignments, random and
// carry-heavy contents, random initial values: the fast sum folds to the
// reference sum.
func TestSumProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000+16)
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for i := range iters {
		n := r.IntN(9001)
		if i < 64 {
			n = i // every small length
		}
		off := r.IntN(16)
		b := buf[off : off+n]
		switch i % 4 {
		case 0:
			for j := range b {
				b[j] = 0xff
			}
		case 1:
			clear(b)
		default:
			for j := range b {
				b[j] = byte(r.Uint32())
			}
		}
		var init uint64
		if i%3 == 0 {
			init = r.Uint64()
		}
		want := refFold(refSum(b) + uint64(refFold(init)))
		if got := fold(sum(b, init)); got != want {
			t.Fatalf("len %d off %d init %#x: sum %#04x, want %#04x", n, off, init, got, want)
		}
	}
}

// TestKnownAnswer checks both sums against a published example: the IPv4
// header from Wikipedia's "Internet checksum" article, checksum 0xb861.
func TestKnownAnswer(t *testing.T) {
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := ^refFold(refSum(h)); got != 0xb861 {
		t.Fatalf("reference: %#04x, want 0xb861", got)
	}
	if got := ^fold(sum(h, 0)); got != 0xb861 {
		t.Fatalf("sum: %#04x, want 0xb861", got)
	}
}

func TestFold(t *testing.T) {
	for _, s := range []uint64{0, 1, 0xffff, 0x10000, 0xffff_ffff, 0x1_0000_0000, 0xffff_ffff_ffff_ffff, 0xffff_0000_ffff_0000, 0x8000_0000_0000_0001} {
		if got, want := fold(s), refFold(s); got != want {
			t.Errorf("fold(%#x) = %#x, want %#x", s, got, want)
		}
	}
}

func ExampleComplete() {
	// An IPv4 UDP frame whose sender left the checksum to offload.
	p := build(spec{proto: 17, payload: []byte("hello")})
	f := p.partialFrame()
	fmt.Println(Complete(f), Complete(f))
	// Output: completed already-complete
}
