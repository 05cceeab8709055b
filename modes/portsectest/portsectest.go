// Package portsectest is the conformance table of a switch's port
// security: every kind of frame a pod can send to pass for another host,
// or for a router or a DHCP server, each in every encapsulation a pod can
// wrap it in, with the verdict the model (docs/portsecurity.md) gives it,
// and the pod's own traffic beside them, which must pass.
//
// modes' test runs the table on the switch's handler, without root;
// cmd/xdpfwd's sends it from a pod's namespace through a daemon on veths.
// The frames are well formed (lengths, checksums) so that a receiving
// kernel would take them: what passes here would reach a neighbour's
// stack.
package portsectest

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdpfwd/xdpfwd/csum"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// Host is a host on the switch: its MAC and addresses. Its IPv6
// link-local address is the one its MAC derives (EUI-64).
type Host struct {
	MAC  net.HardwareAddr
	IPv4 netip.Addr
	IPv6 netip.Addr // a global address
}

// LinkLocal is h's link-local IPv6 address, as the kernel derives it.
func (h Host) LinkLocal() netip.Addr {
	m := h.MAC
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
}

// Case is one frame of the table.
type Case struct {
	Row   string // what the frame is, as the pod sends it
	Encap string // how it is wrapped
	Frame []byte
	// Want is the cause the switch drops it for; 0: it passes.
	Want fwd.DropCause
}

// Name is the case's row and encapsulation.
func (c Case) Name() string { return c.Row + " / " + c.Encap }

// Cases is the table for a secured port of pod, with victim another host
// on the switch, every frame sent to dst (broadcast, so that every link
// receives what passes). pod's port has both its addresses as its IPs.
func Cases(pod, victim Host, dst net.HardwareAddr) []Case {
	var out []Case
	for _, r := range rows(pod, victim) {
		for _, e := range encaps {
			if e.ipv6Only && r.p.ip6 == nil {
				continue
			}
			out = append(out, Case{Row: r.name, Encap: e.name, Frame: e.frame(dst, r.p), Want: e.verdict(r, pod)})
		}
	}
	return out
}

// Rows are the table's rows, in order, for a reader of its verdicts.
func Rows(pod, victim Host) []string {
	var names []string
	for _, r := range rows(pod, victim) {
		names = append(names, r.name)
	}
	return names
}

// Encaps are the table's encapsulations, in order; those marked IPv6
// apply to IPv6 rows only.
func Encaps() (names []string, ipv6Only []bool) {
	for _, e := range encaps {
		names, ipv6Only = append(names, e.name), append(ipv6Only, e.ipv6Only)
	}
	return names, ipv6Only
}

// packet is what a row's pod sends, before it is wrapped: an Ethernet
// source and either an EtherType's payload or an IPv6 packet, which the
// IPv6 encapsulations put extension headers in.
type packet struct {
	src   net.HardwareAddr
	etype uint16
	body  []byte
	ip6   *ip6
}

type ip6 struct {
	src, dst    netip.Addr
	next        byte
	upper       []byte // ICMPv6 with its checksum 0 (set when built), or UDP
	routerAlert bool   // MLD: a hop-by-hop header with a router alert
}

// row is a row of the table: its frame and its verdict untagged.
type row struct {
	name string
	p    packet
	want fwd.DropCause
}

// encap wraps a row's packet: VLAN tags (tag protocol, VID) in front of
// its EtherType, and for IPv6, extension headers before its upper layer.
type encap struct {
	name     string
	tags     [][2]uint16
	ext      []byte // extension header types, in order
	ipv6Only bool
}

var encaps = []encap{
	{name: "untagged"},
	{name: "802.1Q VID 0", tags: [][2]uint16{{0x8100, 0}}},
	{name: "802.1ad VID 0", tags: [][2]uint16{{0x88a8, 0}}},
	{name: "802.1ad VID 0 + 802.1Q VID 0", tags: [][2]uint16{{0x88a8, 0}, {0x8100, 0}}},
	{name: "802.1Q VID 0 ×2", tags: [][2]uint16{{0x8100, 0}, {0x8100, 0}}},
	{name: "0x9100 VID 0", tags: [][2]uint16{{0x9100, 0}}},
	{name: "802.1Q VID 5", tags: [][2]uint16{{0x8100, 5}}},
	{name: "802.1ad VID 0 + 802.1Q VID 5", tags: [][2]uint16{{0x88a8, 0}, {0x8100, 5}}},
	{name: "802.1Q VID 0 ×5", tags: [][2]uint16{{0x8100, 0}, {0x8100, 0}, {0x8100, 0}, {0x8100, 0}, {0x8100, 0}}},
	{name: "hop-by-hop", ext: []byte{extHopByHop}, ipv6Only: true},
	{name: "destination options", ext: []byte{extDestination}, ipv6Only: true},
	{name: "hop-by-hop + routing + destination options", ext: []byte{extHopByHop, extRouting, extDestination}, ipv6Only: true},
	{name: "fragment (first, whole)", ext: []byte{extFragment}, ipv6Only: true},
	{name: "802.1ad VID 0 + 802.1Q VID 0 + hop-by-hop + fragment", tags: [][2]uint16{{0x88a8, 0}, {0x8100, 0}}, ext: []byte{extHopByHop, extFragment}, ipv6Only: true},
}

const (
	extHopByHop    = 0
	extRouting     = 43
	extFragment    = 44
	extDestination = 60
)

// verdict is what the model makes of row r wrapped in e: the Ethernet
// source first, then the tags, then (IPv6) the source address, then a
// neighbour discovery message in a fragment, then the row's own verdict.
func (e encap) verdict(r row, pod Host) fwd.DropCause {
	if r.want == fwd.CauseSpoofedSource && string(r.p.src) != string(pod.MAC) {
		return fwd.CauseSpoofedSource
	}
	for _, t := range e.tags {
		if t[1] != 0 {
			return fwd.CauseSpoofedVLAN
		}
	}
	if len(e.tags) > 4 {
		return fwd.CauseUnverifiable
	}
	if p := r.p.ip6; p != nil {
		own := p.src == pod.IPv6 || p.src == pod.LinkLocal() || p.src.IsUnspecified()
		if !own {
			return fwd.CauseSpoofedIP
		}
		if p.next == 58 && p.upper[0] >= 133 && p.upper[0] <= 137 && hasFragment(e.ext) {
			return fwd.CauseUnverifiable
		}
	}
	return r.want
}

func hasFragment(ext []byte) bool {
	for _, x := range ext {
		if x == extFragment {
			return true
		}
	}
	return false
}

func (e encap) frame(dst net.HardwareAddr, p packet) []byte {
	f := append(append([]byte(nil), dst...), p.src...)
	for _, t := range e.tags {
		f = binary.BigEndian.AppendUint16(f, t[0])
		f = binary.BigEndian.AppendUint16(f, t[1])
	}
	if p.ip6 != nil {
		f = binary.BigEndian.AppendUint16(f, 0x86dd)
		f = append(f, p.ip6.build(e.ext)...)
	} else {
		f = binary.BigEndian.AppendUint16(f, p.etype)
		f = append(f, p.body...)
	}
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f
}

// build is the IPv6 packet with extension headers ext (and the router
// alert MLD needs, in a hop-by-hop header first), checksummed.
func (p *ip6) build(ext []byte) []byte {
	if p.routerAlert && (len(ext) == 0 || ext[0] != extHopByHop) {
		ext = append([]byte{extHopByHop}, ext...)
	}
	var chain []byte
	for i, x := range ext {
		next := p.next
		if i+1 < len(ext) {
			next = ext[i+1]
		}
		switch x {
		case extHopByHop:
			if p.routerAlert {
				chain = append(chain, next, 0, 5, 2, 0, 0, 1, 0) // router alert (MLD), PadN
			} else {
				chain = append(chain, next, 0, 1, 4, 0, 0, 0, 0) // PadN
			}
		case extDestination:
			chain = append(chain, next, 0, 1, 4, 0, 0, 0, 0)
		case extRouting: // an experimental type (RFC 4727) with no segment left: ignored
			chain = append(chain, next, 0, 253, 0, 0, 0, 0, 0)
		case extFragment: // an atomic fragment (offset 0, no more): RFC 6946
			chain = append(chain, next, 0, 0, 0, 0, 0, 0x28, 0x39)
		}
	}
	upper := append([]byte(nil), p.upper...)
	sum := pseudoSum(p.src, p.dst, p.next, len(upper))
	switch p.next {
	case 58:
		binary.BigEndian.PutUint16(upper[2:], ^csum.Fold(csum.Sum(upper, sum)))
	case 17:
		binary.BigEndian.PutUint16(upper[4:], uint16(len(upper)))
		binary.BigEndian.PutUint16(upper[6:], ^csum.Fold(csum.Sum(upper, sum)))
	}
	first := p.next
	if len(ext) > 0 {
		first = ext[0]
	}
	h := make([]byte, 40, 40+len(chain)+len(upper))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(chain)+len(upper)))
	h[6], h[7] = first, 255
	src, dst := p.src.As16(), p.dst.As16()
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	return append(append(h, chain...), upper...)
}

func pseudoSum(src, dst netip.Addr, next byte, n int) uint64 {
	b := make([]byte, 0, 40)
	s, d := src.As16(), dst.As16()
	b = append(append(b, s[:]...), d[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, 0, 0, 0, next)
	return csum.Sum(b, 0)
}

// ipv4 is an IPv4 packet from src to dst carrying upper (protocol proto;
// UDP's length and checksum are filled in).
func ipv4(src, dst netip.Addr, proto byte, upper []byte) []byte {
	h := make([]byte, 20, 20+len(upper))
	h[0], h[8], h[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(upper)))
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], ^csum.Fold(csum.Sum(h, 0)))
	upper = append([]byte(nil), upper...)
	switch proto {
	case 1:
		binary.BigEndian.PutUint16(upper[2:], ^csum.Fold(csum.Sum(upper, 0)))
	case 17:
		binary.BigEndian.PutUint16(upper[4:], uint16(len(upper)))
		ps := append(append(s[:], d[:]...), 0, 17, byte(len(upper)>>8), byte(len(upper)))
		binary.BigEndian.PutUint16(upper[6:], ^csum.Fold(csum.Sum(upper, csum.Sum(ps, 0))))
	}
	return append(h, upper...)
}

// udp is a UDP header and payload, its length and checksum left for the
// IP layer to fill.
func udp(sport, dport uint16, payload ...byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	return append(append(b, 0, 0, 0, 0), payload...)
}

// arp is an ARP (or RARP) packet: Ethernet and IPv4, operation op.
func arp(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4, byte(op >> 8), byte(op)}
	b = append(append(b, sha...), spa.AsSlice()...)
	return append(append(b, tha...), tpa.AsSlice()...)
}

// nd is a neighbour discovery message: type typ, its fixed part after
// the checksum (reserved words, a target), then options.
func nd(typ byte, fixed []byte, opts ...[]byte) []byte {
	b := append([]byte{typ, 0, 0, 0}, fixed...)
	for _, o := range opts {
		b = append(b, o...)
	}
	return b
}

// llOpt is a link-layer address option: 1 the source's, 2 the target's.
func llOpt(typ byte, mac net.HardwareAddr) []byte { return append([]byte{typ, 1}, mac...) }

// withTarget is a neighbour message's fixed part: flags and a target.
func withTarget(flags byte, target netip.Addr) []byte {
	t := target.As16()
	return append([]byte{flags, 0, 0, 0}, t[:]...)
}

// solicitedNode is a's solicited-node multicast address.
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

var (
	zero4     = netip.IPv4Unspecified()
	bcast4    = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	unspec6   = netip.IPv6Unspecified()
	allNodes  = netip.MustParseAddr("ff02::1")
	allRtrs   = netip.MustParseAddr("ff02::2")
	mldv2     = netip.MustParseAddr("ff02::16")
	dhcpAgent = netip.MustParseAddr("ff02::1:2")
	noMAC     = net.HardwareAddr{0, 0, 0, 0, 0, 0}
)

func rows(pod, victim Host) []row {
	P, V := pod.MAC, victim.MAC
	P4, V4 := pod.IPv4, victim.IPv4
	P6, V6 := pod.IPv6, victim.IPv6
	PL, VL := pod.LinkLocal(), victim.LinkLocal()
	v4 := func(src, dst netip.Addr, proto byte, upper []byte) packet {
		return packet{src: P, etype: 0x0800, body: ipv4(src, dst, proto, upper)}
	}
	v6 := func(src, dst netip.Addr, next byte, upper []byte) packet {
		return packet{src: P, ip6: &ip6{src: src, dst: dst, next: next, upper: upper}}
	}
	arpOf := func(etype, op uint16, sha net.HardwareAddr, spa, tpa netip.Addr) packet {
		return packet{src: P, etype: etype, body: arp(op, sha, spa, noMAC, tpa)}
	}
	mld := func(src netip.Addr) packet {
		p := v6(src, mldv2, 58, nd(143, []byte{0, 0, 0, 1}, []byte{4, 0, 0, 0}, solicitedNode(P6).AsSlice()))
		p.ip6.routerAlert = true
		return p
	}
	echo := []byte{8, 0, 0, 0, 0, 1, 0, 1}
	fromVictim := v4(P4, V4, 17, udp(9, 9))
	fromVictim.src = V
	tunnel := ipv4(V4, P4, 17, udp(9, 9)) // the inner packet claims the victim's address
	const S, O = 0x40, 0x20               // NA's solicited and override flags
	ra := nd(134, []byte{64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0},
		llOpt(1, P), append([]byte{3, 4, 64, 0xc0, 0, 0, 0x0e, 0x10, 0, 0, 0x0e, 0x10, 0, 0, 0, 0}, netip.MustParseAddr("2001:db8:bad::").AsSlice()...))
	redirect := nd(137, append(append([]byte{0, 0, 0, 0}, PL.AsSlice()...), V6.AsSlice()...))
	return []row{
		// Claiming another host's identity.
		{"source MAC another host's", fromVictim, fwd.CauseSpoofedSource},
		{"ARP request, sender MAC another host's", arpOf(0x0806, 1, V, P4, V4), fwd.CauseSpoofedSource},
		{"ARP request, sender IP another host's", arpOf(0x0806, 1, P, V4, P4), fwd.CauseSpoofedIP},
		{"ARP reply, sender IP another host's", arpOf(0x0806, 2, P, V4, P4), fwd.CauseSpoofedIP},
		{"gratuitous ARP for another host's IP", arpOf(0x0806, 1, P, V4, V4), fwd.CauseSpoofedIP},
		{"ARP probe for another host's IP", arpOf(0x0806, 1, P, zero4, V4), fwd.CauseSpoofedIP},
		{"ARP for another hardware (8-byte addresses)", packet{src: P, etype: 0x0806, body: append([]byte{0, 1, 8, 0, 8, 4, 0, 1}, make([]byte, 24)...)}, fwd.CauseUnverifiable},
		{"RARP request, sender MAC another host's", arpOf(0x8035, 3, V, zero4, zero4), fwd.CauseSpoofedSource},
		{"IPv4 from another host's address", v4(V4, P4, 17, udp(9, 9)), fwd.CauseSpoofedIP},
		{"IPv4 from 0.0.0.0, not a DHCP client's", v4(zero4, bcast4, 17, udp(5000, 5000)), fwd.CauseSpoofedIP},
		{"IPv6 from another host's global address", v6(V6, P6, 17, udp(9, 9)), fwd.CauseSpoofedIP},
		{"IPv6 from another host's link-local address", v6(VL, PL, 17, udp(9, 9)), fwd.CauseSpoofedIP},
		{"IPv6 from a link-local address not the pod's (fe80::1)", v6(netip.MustParseAddr("fe80::1"), allNodes, 17, udp(9, 9)), fwd.CauseSpoofedIP},
		{"IPv6 from ::, not DAD, RS or MLD", v6(unspec6, allNodes, 17, udp(9, 9)), fwd.CauseSpoofedIP},
		{"NS, source link-layer option another host's", v6(P6, solicitedNode(V6), 58, nd(135, withTarget(0, V6), llOpt(1, V))), fwd.CauseSpoofedSource},
		{"NS from :: (DAD) for another host's address", v6(unspec6, solicitedNode(V6), 58, nd(135, withTarget(0, V6))), fwd.CauseSpoofedIP},
		{"NA for another host's global address", v6(PL, allNodes, 58, nd(136, withTarget(O, V6), llOpt(2, P))), fwd.CauseSpoofedIP},
		{"NA for another host's link-local address", v6(PL, allNodes, 58, nd(136, withTarget(O, VL), llOpt(2, P))), fwd.CauseSpoofedIP},
		{"NA for its own address, target link-layer option another host's", v6(P6, allNodes, 58, nd(136, withTarget(O, P6), llOpt(2, V))), fwd.CauseSpoofedSource},
		{"RS, source link-layer option another host's", v6(PL, allRtrs, 58, nd(133, []byte{0, 0, 0, 0}, llOpt(1, V))), fwd.CauseSpoofedSource},
		{"NA with a zero-length option", v6(PL, allNodes, 58, nd(136, withTarget(O, P6), []byte{2, 0, 0, 0, 0, 0, 0, 0})), fwd.CauseUnverifiable},
		// Claiming a router's or a server's role.
		{"router advertisement", v6(PL, allNodes, 58, ra), fwd.CauseRogueServer},
		{"ICMPv6 redirect", v6(PL, VL, 58, redirect), fwd.CauseRogueServer},
		{"ICMP redirect", v4(P4, V4, 1, append([]byte{5, 1, 0, 0}, P4.AsSlice()...)), fwd.CauseRogueServer},
		{"ICMP router advertisement", v4(P4, bcast4, 1, []byte{9, 0, 0, 0, 1, 2, 0, 30, 0, 0, 0, 0, 0, 0, 0, 0}), fwd.CauseRogueServer},
		{"DHCPv4 server reply", v4(P4, bcast4, 17, udp(67, 68, make([]byte, 240)...)), fwd.CauseRogueServer},
		{"DHCPv6 server reply", v6(PL, VL, 17, udp(547, 546, 2, 0, 0, 1)), fwd.CauseRogueServer},
		{"RARP reply", arpOf(0x8035, 4, P, P4, V4), fwd.CauseRogueServer},
		// The pod's own traffic: passes.
		{"IPv4 from its own address", v4(P4, V4, 17, udp(9, 9)), 0},
		{"ICMP echo request", v4(P4, V4, 1, echo), 0},
		{"ARP request", arpOf(0x0806, 1, P, P4, V4), 0},
		{"ARP reply", arpOf(0x0806, 2, P, P4, V4), 0},
		{"gratuitous ARP for its own IP", arpOf(0x0806, 1, P, P4, P4), 0},
		{"ARP probe for its own IP", arpOf(0x0806, 1, P, zero4, P4), 0},
		{"RARP request", arpOf(0x8035, 3, P, zero4, zero4), 0},
		{"DHCPv4 request from 0.0.0.0", v4(zero4, bcast4, 17, udp(68, 67, make([]byte, 240)...)), 0},
		{"IPv6 from its global address", v6(P6, V6, 17, udp(9, 9)), 0},
		{"IPv6 from its link-local address", v6(PL, VL, 17, udp(9, 9)), 0},
		{"ICMPv6 echo request", v6(P6, V6, 58, []byte{128, 0, 0, 0, 0, 1, 0, 1}), 0},
		{"NS from :: (DAD) for its own address", v6(unspec6, solicitedNode(P6), 58, nd(135, withTarget(0, P6))), 0},
		{"NS resolving another host", v6(P6, solicitedNode(V6), 58, nd(135, withTarget(0, V6), llOpt(1, P))), 0},
		{"NA for its own address", v6(P6, V6, 58, nd(136, withTarget(S|O, P6), llOpt(2, P))), 0},
		{"NA for its link-local address", v6(PL, allNodes, 58, nd(136, withTarget(O, PL), llOpt(2, P))), 0},
		{"RS", v6(PL, allRtrs, 58, nd(133, []byte{0, 0, 0, 0}, llOpt(1, P))), 0},
		{"RS from ::", v6(unspec6, allRtrs, 58, nd(133, []byte{0, 0, 0, 0})), 0},
		{"MLDv2 report from ::", mld(unspec6), 0},
		{"MLDv2 report from its link-local address", mld(PL), 0},
		{"DHCPv6 solicit", v6(PL, dhcpAgent, 17, udp(546, 547, 1, 0, 0, 1)), 0},
		{"LLDP (another EtherType)", packet{src: P, etype: 0x88cc, body: []byte{2, 7, 4, P[0], P[1], P[2], P[3], P[4], P[5], 0, 0}}, 0},
		{"IPv4 in IPv4 from its own address (inner: another's)", v4(P4, V4, 4, tunnel), 0},
	}
}

// Codes are the table's cells: a letter for each counter a frame is
// dropped under, "·" for a frame that passes.
var Codes = map[fwd.DropCause]string{
	0:                      "·",
	fwd.CauseSpoofedSource: "S",
	fwd.CauseSpoofedIP:     "I",
	fwd.CauseSpoofedVLAN:   "V",
	fwd.CauseRogueServer:   "R",
	fwd.CauseUnverifiable:  "U",
}

// Legend says what Codes' letters mean.
const Legend = "· passes; dropped and counted as S spoofed_source, I spoofed_ip, V spoofed_vlan, R rogue_server, U unverifiable; – not applicable"

// Matrix renders verdicts as a Markdown table: a line per row, a column
// per encapsulation (numbered; Encaps names them), each cell the code of
// cell(c) for the case of that row and encapsulation.
func Matrix(cases []Case, cell func(Case) string) string {
	names, _ := Encaps()
	col := make(map[string]int, len(names))
	var b []byte
	b = append(b, "| frame |"...)
	for i, n := range names {
		col[n] = i
		b = append(b, fmt.Sprintf(" %d |", i+1)...)
	}
	b = append(b, "\n|---|"...)
	for range names {
		b = append(b, ":-:|"...)
	}
	line := make([]string, len(names))
	flush := func(row string) {
		b = append(b, "\n| "+row+" |"...)
		for i := range line {
			b = append(b, " "+cmp.Or(line[i], "–")+" |"...)
			line[i] = ""
		}
	}
	for i, c := range cases {
		line[col[c.Encap]] = cell(c)
		if i+1 == len(cases) || cases[i+1].Row != c.Row {
			flush(c.Row)
		}
	}
	return string(append(b, '\n'))
}
