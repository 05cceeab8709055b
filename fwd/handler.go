package fwd

// A Handler decides, for every packet the forwarder receives, where it goes.
// The forwarder calls it once per RX batch, on the thread of the worker
// that read the batch, with one Packet per packet of the batch, and then
// carries out each packet's verdict: the TX layout (inline copy, frame,
// frag block, chain), the TX queue (sticky per flow), checksum completion,
// ordering across RX queues and every counter are the forwarder's.
//
// Handle must not block, must not keep a Packet or its Data after it
// returns (the memory goes back to the kernel), must not change a Packet's
// Len, and must not call into the Forwarder. Several workers call it at once, each with its own batch: state
// it shares between calls must be safe for concurrent use. A packet whose
// verdict is left unset is dropped and counted (handler_drops).
type Handler interface {
	Handle(pkts []Packet)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(pkts []Packet)

// Handle calls f(pkts).
func (f HandlerFunc) Handle(pkts []Packet) { f(pkts) }

// Packet is one received packet as a Handler sees it.
type Packet struct {
	// Data is the packet's first (for most packets its only) segment,
	// from the Ethernet header on: writable in place, valid only during
	// Handle. A multi-buffer packet continues past it; Len is the whole.
	Data []byte
	// Len is the packet's length in bytes, for the handler to read: the
	// engine lays the packet out by the length it received, and drops a
	// packet whose Len the handler changed (handler_drops).
	Len int
	// Link is the index, in Config.Links, of the link it arrived on, and
	// Queue the RX queue.
	Link, Queue int
	// Arrival is when the packet reached the XDP program
	// (bpf_ktime_get_ns: CLOCK_MONOTONIC ns), the stamp the program writes
	// in front of every packet for the ordering; 0 when the frame has
	// none. Read from the frame's headroom, next to Data: not checked
	// against a clock (a single-queue batch reads none), so a consumer
	// that needs it plausible checks it (0 < Arrival ≤ its own clock).
	Arrival int64

	// total is Len as received (a packet is far under 2 GiB: int32
	// keeps Packet at 80 bytes with dropped).
	total   int32
	verdict Verdict
	cause   DropCause // FloodDropOut's
	// vid is the VLAN SetVLAN put the packet in, 0 for none.
	vid uint16
	// out is the output link for a forward, the set of links for a flood.
	out LinkSet
	// dropped is the links a flood counts a drop on (FloodDropOut);
	// read only with VerdictFlood.
	dropped LinkSet
}

// Verdict is what a Handler decided for a packet.
type Verdict uint8

const (
	VerdictDrop    Verdict = iota // also the zero value: no verdict given
	VerdictForward                // out of one link
	VerdictFlood                  // out of a set of links
	VerdictReflect                // back out of its link and queue
)

// Verdict returns the packet's verdict, with the link (forward) or the set
// of links (flood) it names: for tests of a Handler.
func (p *Packet) Verdict() (Verdict, LinkSet) { return p.verdict, p.out }

// LinkSet is a set of link indexes (0..63), for Flood.
type LinkSet uint64

// Add returns s with link i in it.
func (s LinkSet) Add(i int) LinkSet { return s | 1<<uint(i) }

// Has reports whether link i is in s.
func (s LinkSet) Has(i int) bool { return s&(1<<uint(i)) != 0 }

// AllLinks is the set of the first n links.
func AllLinks(n int) LinkSet {
	if n >= 64 {
		return ^LinkSet(0)
	}
	return 1<<uint(n) - 1
}

// Drop drops the packet (counted as handler_drops on its input link).
func (p *Packet) Drop() { p.verdict, p.out = VerdictDrop, 0 }

// DropCause is why a Handler drops a packet when the reason deserves a
// counter of its own (DropFor): a policy's refusals are told apart from
// a sink's or a filter's drops.
type DropCause uint8

const (
	// CauseSpoofedSource: a frame whose source MAC address its link may
	// not use (modes.Switch's port security): spoofed_source.
	CauseSpoofedSource DropCause = iota + 1
	// CauseSpoofedIP: a frame whose sender IP address (ARP, IPv4, IPv6)
	// its link may not use: spoofed_ip.
	CauseSpoofedIP
	// CauseRateLimited: a frame over a rate its link is policed to
	// (modes.Switch's bandwidth limits): with DropFor, one its link sent
	// over its rate, rx_rate_limited; with DropOut, one for a link over
	// that link's rate, tx_rate_limited.
	CauseRateLimited
	// CauseSpoofedVLAN: a frame tagged for a VLAN its link is not in
	// (a secured port is in the untagged one): spoofed_vlan.
	CauseSpoofedVLAN
	// CauseRogueServer: a message only a router or a DHCP server may
	// send (a router advertisement, a redirect, a DHCP server's reply),
	// from a link that is a host's: rogue_server.
	CauseRogueServer
	// CauseUnverifiable: a frame a policy must read to judge and cannot
	// (a header it checks truncated, or deeper than it reads):
	// unverifiable.
	CauseUnverifiable
	numCauses
)

// DropFor drops the packet, counted on its input link under cause's
// reason (DropSpoofedSource, DropSpoofedIP, ...) instead of handler_drops.
func (p *Packet) DropFor(c DropCause) { p.verdict, p.out = VerdictDrop, LinkSet(c) }

// DropOut drops a packet that was for link i, counted on link i (as a
// TX-side drop, like tx_full) under cause's reason: a policy of the link
// it was to leave by, such as a rate it is policed to.
func (p *Packet) DropOut(c DropCause, i int) {
	p.verdict, p.out = VerdictDrop, LinkSet(c)|LinkSet(uint(i)%MaxLinks+1)<<causeBits
}

// A drop's out holds its cause in the low causeBits bits and, for
// DropOut, the link it was for plus one above them.
const causeBits = 8

// Cause is the cause DropFor, DropOut or FloodDropOut (with links
// dropped) gave the packet, 0 for any other verdict: for tests of a
// Handler.
func (p *Packet) Cause() DropCause {
	if p.verdict == VerdictFlood && p.dropped != 0 {
		return p.cause
	}
	if p.verdict != VerdictDrop || p.out&(1<<causeBits-1) >= LinkSet(numCauses) {
		return 0
	}
	return DropCause(p.out & (1<<causeBits - 1))
}

// FloodDropped is the links FloodDropOut counted the packet dropped on, 0
// for any other verdict: for tests of a Handler.
func (p *Packet) FloodDropped() LinkSet {
	if p.verdict != VerdictFlood {
		return 0
	}
	return p.dropped
}

// DroppedOut is the link DropOut named, or -1: for tests of a Handler.
func (p *Packet) DroppedOut() int {
	if p.verdict != VerdictDrop {
		return -1
	}
	return int(p.out>>causeBits) - 1
}

// Forward sends the packet out of link i.
func (p *Packet) Forward(i int) { p.verdict, p.out = VerdictForward, LinkSet(i) }

// Flood sends the packet out of every link in s but the one it arrived on:
// one copy per link, never one UMEM address on two TX rings.
func (p *Packet) Flood(s LinkSet) { p.verdict, p.out, p.dropped = VerdictFlood, s, 0 }

// FloodDropOut floods the packet to the links of s but those of dropped,
// and counts it on each link of dropped (but the one it arrived on) as
// DropOut(c, link) would: a policy of those links refused it, such as a
// rate they are policed to, while the others take it. When dropped
// leaves no link to send to, the packet is dropped, counted on each link
// of dropped alone. The verdict's LinkSet (Verdict) is s without dropped.
func (p *Packet) FloodDropOut(s LinkSet, c DropCause, dropped LinkSet) {
	p.verdict, p.out, p.cause, p.dropped = VerdictFlood, s&^dropped, c, dropped
}

// SetVLAN puts the packet in VLAN vid (1..4094): it leaves the links of
// its verdict that take the VLAN untagged (VLANHandler.Untagged) without
// an 802.1Q tag, and every other one with an outer 802.1Q tag of vid.
// The forwarder makes it so per link, as it sends it (a handler may not
// change Len): it pops the frame's outer 802.1Q tag, rewrites its VID
// (keeping its priority) or pushes one into the headroom. A frame whose
// outer tag is another TPID's (802.1ad) is untagged here: a tag is
// pushed in front of it. vid 0 (the zero value), or a verdict other than
// forward or flood: the frame leaves as it is.
func (p *Packet) SetVLAN(vid uint16) { p.vid = vid & 0xfff }

// VLAN is the VLAN SetVLAN put the packet in: for tests of a Handler.
func (p *Packet) VLAN() uint16 { return p.vid }

// A VLANHandler is a Handler whose links have VLANs (modes.Switch's
// access ports and trunks): it says which links take a VLAN's frames
// untagged, for the packets it puts in one (SetVLAN). Without it, every
// link takes them tagged. Called by several workers at once, once per
// packet in a VLAN: it must be cheap and safe for concurrent use.
type VLANHandler interface {
	Handler
	Untagged(vid uint16) LinkSet
}

// Reflect sends the packet back out of the link and the queue it arrived
// on (the handler swaps the addresses it wants swapped).
func (p *Packet) Reflect() { p.verdict = VerdictReflect }

// SwapMACs exchanges the destination and source Ethernet addresses in
// place, as a reflector does.
func SwapMACs(frame []byte) {
	if len(frame) < 12 {
		return
	}
	var t [6]byte
	copy(t[:], frame[0:6])
	copy(frame[0:6], frame[6:12])
	copy(frame[6:12], t[:])
}
