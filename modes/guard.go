package modes

import (
	"encoding/binary"
	"slices"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// The per-frame rules of a secured port (docs/portsecurity.md states the
// model, and portsectest holds the table of every case that holds it).
// A secured port is a host's access port on the untagged network, as a
// VM's port is under OVN's or Neutron's port security:
//
//   - its source MAC, and every MAC it puts in ARP or in a neighbour
//     discovery option, is its own: else spoofed_source;
//   - it sends untagged or priority-tagged (VID 0) frames; a tag with any
//     other VID is spoofed_vlan. Priority tags are read through, at most
//     maxTags of them, so the rules below judge what the receiving kernel
//     sees once it has stripped them;
//   - with IPs, its IPv4 and ARP senders are its own (0.0.0.0 only for a
//     DHCP client's request and an ARP probe for its own address); its
//     IPv6 sources are its own, or the link-local address its MAC derives
//     (EUI-64, what the kernel gives a new interface), or :: for duplicate
//     address detection, router solicitation and MLD reports only; a neighbour advertisement's
//     target, and a DAD solicitation's, is its own: else spoofed_ip;
//   - it sends no router advertisement, ICMP or ICMPv6 redirect, RARP
//     reply, or DHCPv4 or DHCPv6 server reply: rogue_server;
//   - a frame whose headers these rules must read and cannot (cut short,
//     past the first segment, more than maxTags tags or maxExtHeaders IPv6
//     extension headers, an ARP not for Ethernet and IPv4, a neighbour
//     discovery message in a fragment or with a zero-length option) is
//     unverifiable.
//
// Everything else passes: other EtherTypes and IP protocols carry only
// what the checked headers say of their sender, and what a receiver
// decapsulates (a tunnel it set up) is its own choice.

const (
	// maxTags is how many priority tags a frame may carry: one is
	// 802.1p, two a QinQ stack of priority tags; more is no host's.
	maxTags = 4
	// maxExtHeaders is how many IPv6 extension headers the guard walks
	// to reach the upper layer; RFC 7045's advice to forwarders is to
	// walk them all, but no host's packet to a neighbour has more.
	maxExtHeaders = 8
)

// EtherTypes, IP protocols and ICMP types the rules read.
const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
	etherRARP = 0x8035
	etherIPv6 = 0x86dd

	protoICMP   = 1
	protoICMPv6 = 58 // protoUDP is swap.go's

	icmpRedirect   = 5
	icmpRouterAdvt = 9 // IRDP

	icmp6MLDReport   = 131
	icmp6RouterSol   = 133
	icmp6RouterAdvt  = 134
	icmp6NeighSol    = 135
	icmp6NeighAdvt   = 136
	icmp6Redirect    = 137
	icmp6MLDv2Report = 143

	ndOptSourceLL = 1
	ndOptTargetLL = 2
)

// guard is a Port as the switch checks it per frame: immutable, replaced
// whole.
type guard struct {
	mac    uint64   // fdb.Key(MAC, 0): the VLAN bits masked off the frame's key
	hw     [6]byte  // the MAC as bytes, for ARP's and ND's addresses
	checkv bool     // IPs given: check them
	v4     []uint32 // the port's IPv4 addresses
	v6     []addr6
	ll     addr6 // the link-local address the MAC derives (EUI-64)
}

// addr6 is an IPv6 address as two words, compared in two (passed as
// its words: a 16-byte copy through the stack stalls on the stores it
// reads back).
type addr6 struct{ hi, lo uint64 }

func addr6Of(b []byte) addr6 {
	return addr6{binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])}
}

const keyVLAN = 0xfff << 48

func newGuard(p Port) *guard {
	ll := linkLocal(p.MAC)
	g := &guard{mac: fdb.Key(p.MAC, 0), hw: [6]byte(p.MAC), checkv: len(p.IPs) > 0, ll: addr6Of(ll[:])}
	for _, a := range p.IPs {
		a = a.Unmap()
		if a.Is4() {
			b := a.As4()
			g.v4 = append(g.v4, binary.BigEndian.Uint32(b[:]))
		} else {
			b := a.As16()
			g.v6 = append(g.v6, addr6Of(b[:]))
		}
	}
	return g
}

// linkLocal is the IPv6 link-local address of an interface with MAC mac
// (RFC 4291's modified EUI-64), as the kernel makes it by default.
func linkLocal(mac []byte) [16]byte {
	return [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
}

// verdict is the cause to drop frame f (source key src) for, or 0 to let
// it through.
func (g *guard) verdict(f []byte, src uint64) fwd.DropCause {
	if src&^keyVLAN != g.mac {
		return fwd.CauseSpoofedSource
	}
	etype, l3, c := untag(f)
	if c != 0 {
		return c
	}
	switch etype {
	case etherARP, etherRARP:
		return g.arp(etype, l3)
	case etherIPv4:
		return g.ipv4(l3)
	case etherIPv6:
		return g.ipv6(l3)
	}
	return 0
}

// untag reads through f's VLAN tags to its EtherType and what follows:
// only priority tags (VID 0) pass. 0x9100, an old QinQ tag protocol that
// Linux does not strip but switches upstream may, counts as a tag too.
func untag(f []byte) (etype uint16, l3 []byte, c fwd.DropCause) {
	if etype = binary.BigEndian.Uint16(f[12:14]); !isTPID(etype) {
		return etype, f[14:], 0 // untagged: most frames
	}
	off := 12
	for tags := 0; ; tags++ {
		if len(f) < off+2 {
			return 0, nil, fwd.CauseUnverifiable
		}
		etype = binary.BigEndian.Uint16(f[off:])
		if !isTPID(etype) {
			return etype, f[off+2:], 0
		}
		switch {
		case len(f) < off+6:
			return 0, nil, fwd.CauseUnverifiable
		case binary.BigEndian.Uint16(f[off+2:])&0xfff != 0:
			return 0, nil, fwd.CauseSpoofedVLAN
		case tags == maxTags:
			return 0, nil, fwd.CauseUnverifiable
		}
		off += 4
	}
}

func isTPID(etype uint16) bool { return etype == 0x8100 || etype == 0x88a8 || etype == 0x9100 }

// arp judges an ARP or RARP packet p (RFC 826, RFC 903).
func (g *guard) arp(etype uint16, p []byte) fwd.DropCause {
	if len(p) < 28 || binary.BigEndian.Uint16(p) != 1 || binary.BigEndian.Uint16(p[2:]) != etherIPv4 || p[4] != 6 || p[5] != 4 {
		return fwd.CauseUnverifiable // the kernel takes only Ethernet/IPv4 ARP
	}
	if [6]byte(p[8:14]) != g.hw {
		return fwd.CauseSpoofedSource
	}
	op := binary.BigEndian.Uint16(p[6:])
	switch {
	case etype == etherRARP:
		if op == 4 { // a RARP server's reply
			return fwd.CauseRogueServer
		}
		return 0 // a request's protocol addresses are undefined
	case !g.checkv:
		return 0
	}
	spa, tpa := binary.BigEndian.Uint32(p[14:]), binary.BigEndian.Uint32(p[24:])
	if spa == 0 && g.has4(tpa) || g.has4(spa) {
		return 0 // a probe for its own address, or its own
	}
	return fwd.CauseSpoofedIP
}

// ipv4 judges an IPv4 packet p.
func (g *guard) ipv4(p []byte) fwd.DropCause {
	if len(p) < 20 || p[0]>>4 != 4 {
		return fwd.CauseUnverifiable
	}
	hl, tl := int(p[0]&0xf)*4, int(binary.BigEndian.Uint16(p[2:]))
	if hl < 20 || tl < hl || len(p) < hl {
		return fwd.CauseUnverifiable
	}
	p = p[:min(tl, len(p))] // the Ethernet padding is no header
	src, proto := binary.BigEndian.Uint32(p[12:]), p[9]
	if binary.BigEndian.Uint16(p[6:])&0x1fff != 0 {
		// A later fragment: its transport header was in the first.
		if g.checkv && !g.has4(src) {
			return fwd.CauseSpoofedIP
		}
		return 0
	}
	l4 := p[hl:]
	client := false // a DHCP client's request
	switch proto {
	case protoICMP:
		if len(l4) < 1 {
			return fwd.CauseUnverifiable
		}
		if l4[0] == icmpRedirect || l4[0] == icmpRouterAdvt {
			return fwd.CauseRogueServer
		}
	case protoUDP:
		if len(l4) < 4 {
			return fwd.CauseUnverifiable
		}
		switch sp, dp := binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:]); {
		case sp == 67 && dp == 68:
			return fwd.CauseRogueServer
		case sp == 68 && dp == 67:
			client = true
		}
	}
	if g.checkv && !g.has4(src) && !(src == 0 && client) {
		return fwd.CauseSpoofedIP
	}
	return 0
}

// ipv6 judges an IPv6 packet p: its source, then the upper layer past its
// extension headers.
func (g *guard) ipv6(p []byte) fwd.DropCause {
	if len(p) < 40 || p[0]>>4 != 6 {
		return fwd.CauseUnverifiable
	}
	if n := 40 + int(binary.BigEndian.Uint16(p[4:])); n > 40 && n < len(p) {
		p = p[:n] // the Ethernet padding is no header (0: a jumbogram's)
	}
	src := addr6Of(p[8:24])
	unspec := src.hi|src.lo == 0
	if g.checkv && !unspec && !g.has6(src.hi, src.lo) {
		return fwd.CauseSpoofedIP
	}
	next, off, fragment, ok := upperLayer(p)
	switch {
	case !ok:
		return fwd.CauseUnverifiable
	case off < 0: // a later fragment: its upper layer was in the first
		return g.unspecified(unspec, false)
	}
	up := p[off:]
	switch next {
	case protoICMPv6:
		return g.icmpv6(up, unspec, fragment)
	case protoUDP:
		if len(up) < 4 {
			return fwd.CauseUnverifiable
		}
		if binary.BigEndian.Uint16(up) == 547 && binary.BigEndian.Uint16(up[2:]) == 546 {
			return fwd.CauseRogueServer // a DHCPv6 server's (or relay's) reply
		}
	}
	return g.unspecified(unspec, false)
}

// upperLayer walks the extension headers of IPv6 packet p to its upper
// layer: its protocol and offset, and whether p is a fragment (off < 0:
// a later one, whose upper layer is in the first). ok is false when the
// chain leaves p or is longer than maxExtHeaders.
func upperLayer(p []byte) (next byte, off int, fragment, ok bool) {
	next, off = p[6], 40
	for range maxExtHeaders + 1 {
		switch next {
		case 0, 43, 60, 135, 139, 140: // hop-by-hop, routing, destination, mobility, HIP, shim6: RFC 6564's format
			if len(p) < off+8 {
				return 0, 0, false, false
			}
			next, off = p[off], off+8+int(p[off+1])*8
		case 51: // AH: its length in 4-octet units, less 2
			if len(p) < off+8 {
				return 0, 0, false, false
			}
			next, off = p[off], off+(int(p[off+1])+2)*4
		case 44: // fragment
			if len(p) < off+8 {
				return 0, 0, false, false
			}
			if binary.BigEndian.Uint16(p[off+2:])&^7 != 0 {
				return p[off], -1, true, true
			}
			next, off, fragment = p[off], off+8, true
		default:
			return next, off, fragment, off <= len(p)
		}
	}
	return 0, 0, false, false
}

// icmpv6 judges an ICMPv6 message m: the router's messages, and neighbour
// discovery's addresses.
func (g *guard) icmpv6(m []byte, unspec, fragment bool) fwd.DropCause {
	if len(m) < 4 {
		return fwd.CauseUnverifiable
	}
	typ := m[0]
	if typ >= icmp6RouterSol && typ <= icmp6Redirect && fragment {
		return fwd.CauseUnverifiable // RFC 6980: neighbour discovery is never fragmented
	}
	var opts []byte // neighbour discovery's options
	switch typ {
	case icmp6RouterAdvt, icmp6Redirect:
		return fwd.CauseRogueServer
	case icmp6RouterSol:
		if len(m) < 8 {
			return fwd.CauseUnverifiable
		}
		opts = m[8:]
	case icmp6NeighSol, icmp6NeighAdvt:
		if len(m) < 24 {
			return fwd.CauseUnverifiable
		}
		// An advertisement's target is what it claims; a solicitation's
		// from :: (duplicate address detection) is what it would make
		// its owner give up.
		target := addr6Of(m[8:24])
		if g.checkv && (typ == icmp6NeighAdvt || unspec) && !g.has6(target.hi, target.lo) {
			return fwd.CauseSpoofedIP
		}
		opts = m[24:]
	default:
		return g.unspecified(unspec, typ == icmp6MLDReport || typ == icmp6MLDv2Report)
	}
	if c := g.linkLayerOptions(opts); c != 0 {
		return c
	}
	return g.unspecified(unspec, typ == icmp6NeighSol || typ == icmp6RouterSol)
}

// linkLayerOptions checks the source and target link-layer address
// options of a neighbour discovery message: each must be the port's MAC.
func (g *guard) linkLayerOptions(opts []byte) fwd.DropCause {
	for len(opts) > 0 {
		if len(opts) < 2 || opts[1] == 0 || len(opts) < int(opts[1])*8 {
			return fwd.CauseUnverifiable // RFC 4861: a node drops the message
		}
		if t := opts[0]; (t == ndOptSourceLL || t == ndOptTargetLL) && [6]byte(opts[2:8]) != g.hw {
			return fwd.CauseSpoofedSource
		}
		opts = opts[int(opts[1])*8:]
	}
	return 0
}

// unspecified judges a packet by its source when that is :: (unspec),
// which only duplicate address detection, router solicitations and MLD
// reports use (ok).
func (g *guard) unspecified(unspec, ok bool) fwd.DropCause {
	if g.checkv && unspec && !ok {
		return fwd.CauseSpoofedIP
	}
	return 0
}

func (g *guard) has4(a uint32) bool { return slices.Contains(g.v4, a) }

func (g *guard) has6(hi, lo uint64) bool {
	if hi == g.ll.hi && lo == g.ll.lo {
		return true
	}
	for i := range g.v6 {
		if hi == g.v6[i].hi && lo == g.v6[i].lo {
			return true
		}
	}
	return false
}
