package gen

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdpfwd/xdpfwd/csum"
)

// The generator's payload, right after the UDP header, in network order
// (version 2, magic "XH"):
//
//	0   magic, 2 bytes (Magic)
//	2   flow id, 2 bytes
//	4   sequence number in the flow, low 32 bits
//	8   TX time, CLOCK_MONOTONIC ns (Now), its low 48 bits
//	14  run id, 4 bytes: random, nonzero, one per generator run
//
// 18 bytes: what a 64-byte frame (60 without the FCS) holds after IPv4 and
// UDP headers. The run id lets a sink tell a new run on the same flow id
// from late or lost frames; to make room for it the stamp keeps 48 bits
// (3.2 days), which a receiver on the same clock restores from its own
// reading (Payload.TXTime). Every field starts on an even offset from the
// UDP header, so rewriting the sequence and the stamp (bytes 4..14)
// updates the UDP checksum incrementally, word by word (RFC 1624).
//
// Version 1 (magic "XG", 16 bytes: the stamp whole at 8, no run id) is
// still parsed, with run id 0.
const (
	Magic      = 0x5848 // "XH"
	MagicV1    = 0x5847 // "XG"
	PayloadLen = 18

	payloadLenV1 = 16
	offMagic     = 0
	offFlow      = 2
	offSeq       = 4
	offStamp     = 8
	offRun       = 14
	stampBits    = 48
)

// Payload is what a received frame's payload says.
type Payload struct {
	Flow uint16
	Seq  uint32
	// Stamp is the TX time as sent: its low 48 bits in a version 2
	// payload (TXTime restores it), whole in a version 1 one.
	Stamp int64
	// Run is the generator run's id; 0 in a version 1 payload.
	Run uint32
	v1  bool
}

// TXTime is the frame's TX time on the clock of ref, a CLOCK_MONOTONIC
// reading within 2^47 ns (1.6 days) of it, such as the arrival time.
func (p Payload) TXTime(ref int64) int64 {
	if p.v1 {
		return p.Stamp
	}
	const span, mask = int64(1) << stampBits, int64(1)<<stampBits - 1
	t := ref&^mask | p.Stamp
	switch {
	case t-ref > span/2:
		t -= span
	case ref-t > span/2:
		t += span
	}
	return t
}

// FCS is the Ethernet frame check sequence the link adds: frame sizes are
// counted with it, as RFC 2544 counts them (64 B: 60 bytes handed to the
// link).
const FCS = 4

// Header lengths.
const (
	ethLen  = 14
	vlanLen = 4
	ipLen   = 20
	udpLen  = 8
)

// MinSize is the smallest frame size (with FCS) that carries the payload,
// with or without a VLAN tag.
func MinSize(vlan bool) int {
	n := ethLen + ipLen + udpLen + PayloadLen + FCS
	if vlan {
		n += vlanLen
	}
	return max(n, 64)
}

// Template describes the frames of a run; Frame writes one.
type Template struct {
	SrcMAC, DstMAC net.HardwareAddr
	SrcIP, DstIP   netip.Addr // IPv4
	SrcPort        uint16     // flow f has source port SrcPort+f (ByPort)
	DstPort        uint16
	VLAN           int // 802.1Q VID 1..4094, 0: untagged
	// ByIP varies the source address by flow (SrcIP+f) instead of the
	// source port.
	ByIP bool
	// SrcMACs, if above 1, varies the source MAC by packet: a socket's
	// k-th packet comes from SrcMAC plus k mod SrcMACs in its low 24
	// bits, as from that many hosts behind the link, for a switch to
	// learn. 0 or 1: SrcMAC alone.
	SrcMACs int
	// DstHosts, if set, spread the flows over hosts: flow f goes to
	// DstHosts[f mod len(DstHosts)], in place of DstMAC and DstIP.
	DstHosts []Host
	// SrcPorts, if above 1, varies the UDP source port by packet: a
	// socket's k-th packet comes from its flow's port plus k mod SrcPorts,
	// SrcPorts 5-tuples per flow, for tables keyed by flows to hold
	// (sinks still see each flow's one sequence). 0 or 1: the flow's port
	// alone.
	SrcPorts int
	// Run is the run id every frame carries (Payload.Run).
	Run uint32
}

// Host is a destination: its MAC and IPv4 addresses.
type Host struct {
	MAC net.HardwareAddr
	IP  netip.Addr
}

// Layout is where the payload's rewritten fields sit in a frame.
type Layout struct {
	Payload int // offset of the payload
	UDPSum  int // offset of the UDP checksum
}

// Check validates t.
func (t Template) Check() error {
	switch {
	case len(t.SrcMAC) != 6 || len(t.DstMAC) != 6:
		return fmt.Errorf("source and destination MAC addresses must be Ethernet (6 bytes)")
	case !t.SrcIP.Is4() || !t.DstIP.Is4():
		return fmt.Errorf("source and destination addresses must be IPv4")
	case t.VLAN < 0 || t.VLAN > 4094:
		return fmt.Errorf("VLAN %d: want 1..4094 (0: untagged)", t.VLAN)
	case t.SrcMACs < 0 || t.SrcMACs > 1<<24:
		return fmt.Errorf("source MACs %d: want 0..%d", t.SrcMACs, 1<<24)
	case t.SrcPorts < 0 || t.SrcPorts > 1<<16:
		return fmt.Errorf("source ports %d: want 0..%d", t.SrcPorts, 1<<16)
	}
	for i, h := range t.DstHosts {
		if len(h.MAC) != 6 || !h.IP.Is4() {
			return fmt.Errorf("destination host %d (%s, %s): want an Ethernet MAC and an IPv4 address", i, h.MAC, h.IP)
		}
	}
	return nil
}

// Frame writes flow's frame of size bytes (with FCS: size-FCS are written)
// into b, with sequence 0 and stamp 0, complete IPv4 and UDP checksums, and
// returns its length and layout. b must hold size-FCS bytes.
func (t Template) Frame(b []byte, size int, flow uint16) (int, Layout) {
	n := size - FCS
	clear(b[:n])
	dstMAC, dstIP := t.DstMAC, t.DstIP
	if len(t.DstHosts) > 0 {
		h := t.DstHosts[int(flow)%len(t.DstHosts)]
		dstMAC, dstIP = h.MAC, h.IP
	}
	copy(b[0:6], dstMAC)
	copy(b[6:12], t.SrcMAC)
	off := 12
	if t.VLAN > 0 {
		binary.BigEndian.PutUint16(b[12:], 0x8100)
		binary.BigEndian.PutUint16(b[14:], uint16(t.VLAN))
		off += vlanLen
	}
	binary.BigEndian.PutUint16(b[off:], 0x0800)
	ip := b[off+2:]
	l3 := n - (off + 2)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(l3))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	src := t.SrcIP.As4()
	sport := t.SrcPort
	if t.ByIP {
		binary.BigEndian.PutUint32(src[:], binary.BigEndian.Uint32(src[:])+uint32(flow))
	} else {
		sport += flow
	}
	copy(ip[12:16], src[:])
	dst := dstIP.As4()
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip[:ipLen], 0)))
	udp := ip[ipLen:l3]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], t.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	p := udp[udpLen:]
	binary.BigEndian.PutUint16(p[offMagic:], Magic)
	binary.BigEndian.PutUint16(p[offFlow:], flow)
	binary.BigEndian.PutUint32(p[offRun:], t.Run)
	// Pseudo-header: addresses, protocol, UDP length.
	ph := sum(ip[12:20], uint64(17)+uint64(len(udp)))
	c := ^fold(sum(udp, ph))
	if c == 0 {
		c = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	pay := off + 2 + ipLen + udpLen
	return n, Layout{Payload: pay, UDPSum: off + 2 + ipLen + 6}
}

// Stamp rewrites the sequence number and the TX stamp of a frame written by
// Frame and updates its UDP checksum for the change: 10 bytes written and
// two read, whatever the frame's size. The stamp keeps its low 48 bits.
func Stamp(f []byte, l Layout, seq uint32, stamp int64) {
	p := f[l.Payload : l.Payload+PayloadLen]
	// RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m') over every changed word.
	s := uint64(^binary.BigEndian.Uint16(f[l.UDPSum:]))
	for i := offSeq; i < offRun; i += 2 {
		s += uint64(^binary.BigEndian.Uint16(p[i:]))
	}
	binary.BigEndian.PutUint32(p[offSeq:], seq)
	binary.BigEndian.PutUint16(p[offStamp:], uint16(stamp>>32))
	binary.BigEndian.PutUint32(p[offStamp+2:], uint32(stamp))
	for i := offSeq; i < offRun; i += 2 {
		s += uint64(binary.BigEndian.Uint16(p[i:]))
	}
	c := ^fold(s)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[l.UDPSum:], c)
}

// SetSrcPort rewrites the UDP source port of a frame written by Frame and
// updates its UDP checksum for the change (RFC 1624, as Stamp).
func SetSrcPort(f []byte, l Layout, port uint16) {
	at := l.UDPSum - 6
	s := uint64(^binary.BigEndian.Uint16(f[l.UDPSum:])) + uint64(^binary.BigEndian.Uint16(f[at:])) + uint64(port)
	binary.BigEndian.PutUint16(f[at:], port)
	c := ^fold(s)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[l.UDPSum:], c)
}

// SrcPort is the UDP source port of a frame written by Frame.
func SrcPort(f []byte, l Layout) uint16 { return binary.BigEndian.Uint16(f[l.UDPSum-6:]) }

// Parse finds the generator's payload in an Ethernet frame: IPv4 (no
// options needed, any allowed) over UDP, untagged or with one 802.1Q or
// 802.1ad tag, the payload starting with Magic (or MagicV1). It reads no
// more than the headers and the payload, and allocates nothing. It does
// not check the UDP checksum: ParseChecked does.
func Parse(f []byte) (Payload, bool) {
	p, _, _, ok := parse(f)
	return p, ok
}

// Check is what ParseChecked found in a frame.
type Check int

const (
	// NotOurs: no generator payload (Parse's false).
	NotOurs Check = iota
	// Valid: the payload, and a UDP checksum that holds (or none: 0).
	Valid
	// BadChecksum: the payload, but the UDP checksum fails over the
	// datagram, or the frame is cut short of the UDP length: a corrupt
	// or forged frame, whose fields are not to be believed.
	BadChecksum
)

// ParseChecked is Parse, and then, unless the UDP checksum is 0 (none
// sent), verifies it over the pseudo-header and the datagram as long as
// its UDP length says: a few ns for a 64-byte frame, a sum of the whole
// datagram for a larger one. It allocates nothing.
func ParseChecked(f []byte) (Payload, Check) {
	p, ip, udp, ok := parse(f)
	if !ok {
		return Payload{}, NotOurs
	}
	ulen := int(binary.BigEndian.Uint16(f[udp+4:]))
	if udp+ulen > len(f) {
		return p, BadChecksum
	}
	if binary.BigEndian.Uint16(f[udp+6:]) == 0 {
		return p, Valid
	}
	// Pseudo-header: addresses, protocol, UDP length; then the datagram
	// with its checksum: all ones when it holds.
	s := csum.Sum(f[ip+12:ip+20], uint64(17)+uint64(ulen))
	if csum.Fold(csum.Sum(f[udp:udp+ulen], s)) != 0xffff {
		return p, BadChecksum
	}
	return p, Valid
}

// parse is Parse, also returning the offsets of the IPv4 and UDP headers.
func parse(f []byte) (_ Payload, ip, udp int, _ bool) {
	if len(f) < ethLen+ipLen+udpLen+payloadLenV1 {
		return Payload{}, 0, 0, false
	}
	off := 12
	switch binary.BigEndian.Uint16(f[off:]) {
	case 0x8100, 0x88a8:
		off += vlanLen
	}
	if binary.BigEndian.Uint16(f[off:]) != 0x0800 {
		return Payload{}, 0, 0, false
	}
	off += 2
	ip = off
	if len(f) < off+ipLen || f[off]>>4 != 4 || f[off+9] != 17 || f[off]&0xf < 5 {
		return Payload{}, 0, 0, false
	}
	off += int(f[off]&0xf) * 4
	if len(f) < off+udpLen+payloadLenV1 {
		return Payload{}, 0, 0, false
	}
	udp = off
	ulen := int(binary.BigEndian.Uint16(f[off+4:]))
	p := f[off+udpLen:]
	switch binary.BigEndian.Uint16(p[offMagic:]) {
	case Magic:
		if ulen < udpLen+PayloadLen || len(p) < PayloadLen {
			return Payload{}, 0, 0, false
		}
		return Payload{
			Flow:  binary.BigEndian.Uint16(p[offFlow:]),
			Seq:   binary.BigEndian.Uint32(p[offSeq:]),
			Stamp: int64(binary.BigEndian.Uint16(p[offStamp:]))<<32 | int64(binary.BigEndian.Uint32(p[offStamp+2:])),
			Run:   binary.BigEndian.Uint32(p[offRun:]),
		}, ip, udp, true
	case MagicV1:
		if ulen < udpLen+payloadLenV1 {
			return Payload{}, 0, 0, false
		}
		return Payload{
			Flow:  binary.BigEndian.Uint16(p[offFlow:]),
			Seq:   binary.BigEndian.Uint32(p[offSeq:]),
			Stamp: int64(binary.BigEndian.Uint64(p[offStamp:])),
			v1:    true,
		}, ip, udp, true
	}
	return Payload{}, 0, 0, false
}

// sum adds b as big-endian 16-bit words to initial, unfolded.
func sum(b []byte, initial uint64) uint64 {
	s := initial
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// IMIX is the simple IMIX, 7:4:1 of 64, 594 and 1518-byte frames (with
// FCS): an average of about 364 bytes.
var IMIX = []int{64, 594, 64, 1518, 64, 594, 64, 64, 594, 64, 594, 64}
