// Drop reasons for a reader: what each counter means, and the totals the
// daemon logs as it stops (logTotals).

package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// dropMeaning says, for a reader of the demo or the exit log, where each
// drop reason of fwd.LinkStats.Drops happens.
var dropMeaning = map[string]string{
	fwd.DropRXDropped:     "the kernel had no frame to receive into, or the frame was too long",
	fwd.DropRXRingFull:    "the kernel found the socket's RX ring full: xdpfwd read slower than the link received (an unpaced sender, a busy CPU)",
	fwd.DropFillRingEmpty: "the kernel found no frame on the fill ring (also in rx_dropped)",
	fwd.DropRXInvalid:     "the kernel refused a fill address",
	fwd.DropTXInvalid:     "the kernel refused a TX descriptor",
	fwd.DropUMEMExhausted: "a fill-ring refill found no free frame (refills, not packets)",
	fwd.DropRXBadDesc:     "an RX descriptor outside the frame zone, never followed",
	fwd.DropTXNoRoom:      "a chain too long to send and no frag block to repack it",
	fwd.DropHandoffFull:   "the ring to the worker owning the flow's TX queue was full",
	fwd.DropRXTooLong:     "a packet of more descriptors than a TX ring takes (18)",
	fwd.DropAtStop:        "still waiting for a TX queue when the forwarder closed",
	fwd.DropHandler:       "the mode's handler dropped it (sink, a filter, a switch's frame for the link it came from)",
	fwd.DropTXFull:        "sent to a TX queue with no room: the link down or slower than its input",
	fwd.DropXDPPass:       "the XDP program passed it to the kernel's stack: no socket yet, or none any more (before start, after stop)",
	fwd.DropSpoofedSource: "switch port security: a pod's link sent a frame from a MAC address (or an ARP sender address) not its own",
	fwd.DropSpoofedIP:     "switch port security: a pod's link sent a packet from an IP address not its own",
	fwd.DropRXRateLimited: "switch bandwidth limit: a pod's link sent faster than its egress rate (policed, as tc's police does)",
	fwd.DropTXRateLimited: "switch bandwidth limit: frames for a pod's link came faster than its ingress rate (policed, as tc's police does)",
	fwd.DropSpoofedVLAN:   "switch port security: a pod's link sent a frame tagged for a VLAN (a pod's port is in the untagged one)",
	fwd.DropRogueServer:   "switch port security: a pod's link sent what only a router or DHCP server may (a router advertisement, a redirect, a DHCP server's reply)",
	fwd.DropUnverifiable:  "switch port security: a pod's link sent a frame port security could not read through (a header cut short, too many VLAN tags or IPv6 extension headers, an ARP not for Ethernet and IPv4, a fragmented neighbour discovery message)",
}

// countedDrop reports whether a reason's packets are in TotalDrops:
// rx_fill_ring_empty_descs are in rx_dropped too, umem_exhausted counts
// refills.
func countedDrop(reason string) bool {
	return reason != fwd.DropFillRingEmpty && reason != fwd.DropUMEMExhausted
}

// dropReasons is a link's nonzero drops by reason, largest first, as
// "tx_full=3 xdp_pass=1"; those TotalDrops leaves out follow in
// parentheses. "none" when there are none.
func dropReasons(l fwd.LinkStats) string {
	type kv struct {
		k string
		v uint64
	}
	var counted, other []kv
	for k, v := range l.Drops {
		switch {
		case v == 0:
		case countedDrop(k):
			counted = append(counted, kv{k, v})
		default:
			other = append(other, kv{k, v})
		}
	}
	order := func(a, b kv) int {
		if c := cmp.Compare(b.v, a.v); c != 0 {
			return c
		}
		return strings.Compare(a.k, b.k)
	}
	slices.SortFunc(counted, order)
	slices.SortFunc(other, order)
	var parts []string
	for _, e := range counted {
		parts = append(parts, fmt.Sprintf("%s=%d", e.k, e.v))
	}
	if len(other) > 0 {
		var o []string
		for _, e := range other {
			o = append(o, fmt.Sprintf("%s=%d", e.k, e.v))
		}
		parts = append(parts, "("+strings.Join(o, " ")+")")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// logTotals logs, after the "stopped" line, each link's totals of the run:
// packets and bytes each way and the drops by reason.
func logTotals(logger *slog.Logger, sum fwd.Summary, links []string) {
	// The --link links in their order, then those added while running
	// (the summary has every link the forwarder had), by name.
	var added []string
	for name := range sum.Links {
		if !slices.Contains(links, name) {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	for _, name := range append(slices.Clone(links), added...) {
		l, ok := sum.Links[name]
		if !ok {
			continue
		}
		logger.Info("link totals", "link", name,
			"rx_packets", l.RXPackets, "rx_bytes", l.RXBytes,
			"tx_packets", l.TXPackets, "tx_bytes", l.TXBytes,
			"drops", l.TotalDrops(), "drops_by_reason", dropReasons(l))
	}
	if r := sum.RemovedOlder; r != nil {
		l := r.Totals
		logger.Info("link totals of older removed links", "links", r.Links,
			"rx_packets", l.RXPackets, "rx_bytes", l.RXBytes,
			"tx_packets", l.TXPackets, "tx_bytes", l.TXBytes,
			"drops", l.TotalDrops(), "drops_by_reason", dropReasons(l))
	}
}
