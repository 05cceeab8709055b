package fwd

import (
	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Abandoning a packet. Whatever stage a packet that will not be sent has
// reached, abandon is where it ends: it is counted by its reason, offered
// to a capture as dropped, taken off the flow ledger if its flow was
// charged for it, and its UMEM given back. A new drop site describes the
// packet (a lost); it does none of the four itself.

// dropReason is why a packet is abandoned: the counter it adds to and the
// reason a capture records.
type dropReason uint8

const (
	dropRejected      dropReason = iota // rxring refused it (rx_bad_descs, rx_too_many_frags): counted there
	dropTruncated                       // rx_truncated
	dropHandler                         // handler_drops
	dropNoRoom                          // tx_no_layout
	dropHandoffFull                     // handoff_full
	dropTXFull                          // tx_full
	dropAtStop                          // dropped_at_stop
	dropSpoofedSource                   // spoofed_source: the Handler's DropFor(CauseSpoofedSource)
	dropSpoofedIP                       // spoofed_ip: DropFor(CauseSpoofedIP)
	dropRateLimitedRX                   // rx_rate_limited: DropFor(CauseRateLimited)
	dropRateLimitedTX                   // tx_rate_limited: DropOut(CauseRateLimited, link)
	dropSpoofedVLAN                     // spoofed_vlan: DropFor(CauseSpoofedVLAN)
	dropRogueServer                     // rogue_server: DropFor(CauseRogueServer)
	dropUnverifiable                    // unverifiable: DropFor(CauseUnverifiable)
	numDropReasons
)

// drops name each reason: its key in LinkStats.Drops (and in the metrics,
// the stats line's totals and the summary, which read those), and
// whether it is counted on the link the packet was to leave by (tx)
// rather than the one it came in on. Counted under cDrops (counters.go).
var drops = [numDropReasons]struct {
	name string
	tx   bool
}{
	dropRejected:      {}, // rxring's counters: rx_bad_descs, rx_too_many_frags
	dropTruncated:     {DropRXTruncated, false},
	dropHandler:       {DropHandler, false},
	dropNoRoom:        {DropTXNoRoom, true},
	dropHandoffFull:   {DropHandoffFull, true},
	dropTXFull:        {DropTXFull, true},
	dropAtStop:        {DropAtStop, true},
	dropSpoofedSource: {DropSpoofedSource, false},
	dropSpoofedIP:     {DropSpoofedIP, false},
	dropRateLimitedRX: {DropRXRateLimited, false},
	dropRateLimitedTX: {DropTXRateLimited, true},
	dropSpoofedVLAN:   {DropSpoofedVLAN, false},
	dropRogueServer:   {DropRogueServer, false},
	dropUnverifiable:  {DropUnverifiable, false},
}

// causeDrops are the reasons of a Handler's DropFor causes; 0 (a plain
// Drop, or no verdict) is handler_drops.
var causeDrops = [numCauses]dropReason{0: dropHandler, CauseSpoofedSource: dropSpoofedSource, CauseSpoofedIP: dropSpoofedIP,
	CauseRateLimited: dropRateLimitedRX, CauseSpoofedVLAN: dropSpoofedVLAN, CauseRogueServer: dropRogueServer,
	CauseUnverifiable: dropUnverifiable}

// causeDropsOut are the reasons of DropOut's causes, counted on the link
// the packet was for; a cause without one is counted there under its
// DropFor reason.
var causeDropsOut = [numCauses]dropReason{CauseRateLimited: dropRateLimitedTX}

// outReason is the reason a packet dropped for cause c on the link it was
// for (DropOut, FloodDropOut) is counted under there: c's out reason,
// else its DropFor reason, else (no such cause) handler_drops.
func outReason(c DropCause) dropReason {
	switch {
	case c >= numCauses:
		return dropHandler
	case causeDropsOut[c] != 0:
		return causeDropsOut[c]
	}
	return causeDrops[c]
}

// dropCodes are the reasons' capture codes: their names. dropRejected's
// is told apart by tapRejected.
var dropCodes = func() (c [numDropReasons]capture.Reason) {
	for r, d := range drops {
		if d.name != "" {
			c[r] = capture.ReasonCode(d.name)
		}
	}
	return c
}()

// stage is how far an abandoned packet got, which says where its memory
// is and whether its flow was charged for it.
type stage uint8

const (
	// atRing: rxring refused its descriptors and recycled what it could
	// follow; nothing is left to give back.
	atRing stage = iota
	// atRX: its received frames, Held, in rx: back to their fill ring.
	atRX
	// atCopy: a copy of the packet in rx (flood) found no room;
	// nothing was laid out, and the packet itself goes on.
	atCopy
	// atTX: laid out in descs and charged to TX queue tq (flowState.sent
	// or bypass): taken off the ledger, released.
	atTX
	// atHandoff: the k entries of h from idx, handed to this worker for
	// its TX queue: taken off the ledger, released, and the entries given
	// back to the producer.
	atHandoff
)

// lost is a packet being abandoned: its state at the stage it reached,
// passed by value.
type lost struct {
	why         dropReason
	at          stage
	link, queue int // where a capture records it
	total       int
	rx          rxPkt      // atRing, atRX, atCopy: the packet as received
	descs       []xsk.Desc // atTX
	tq          int        // atTX
	h           *handoff   // atHandoff
	idx, k      uint32     // atHandoff
}

// abandon ends the packet l describes: counted in c by its reason,
// offered to a capture, settled with the flow ledger, its UMEM released.
// The capture comes first: it reads the bytes before they are reused.
func (w *worker) abandon(l lost, c *batchCounts) {
	if l.why != dropRejected {
		c.n[cDrops+count(l.why)]++
	}
	if w.tap.set != nil {
		w.tapLost(&l)
	}
	switch l.at {
	case atRX:
		w.drop(&l.rx)
	case atTX:
		if w.flows.table != nil {
			w.flows.table.completed(l.descs, l.tq)
		}
		w.release(l.descs)
	case atHandoff:
		for j := range l.k {
			a := l.h.at(l.idx + j).desc.Addr
			if w.flows.table != nil {
				w.flows.table.done(a, w.q)
			}
			w.freeTX(a)
		}
		l.h.release(l.k)
	}
}

// tapLost offers an abandoned packet to the capture, as dropped.
func (w *worker) tapLost(l *lost) {
	switch l.at {
	case atRing:
		w.tapRejected(&l.rx)
	case atRX, atCopy:
		w.tapFrames(l.link, l.queue, capture.Drop, dropCodes[l.why], l.rx.descs, l.total)
	case atTX:
		w.tapOut(l.link, l.queue, capture.Drop, dropCodes[l.why], l.descs, l.total)
	case atHandoff:
		w.tapHanded(l.link, capture.Drop, dropCodes[l.why], l.h, l.idx, l.k)
	}
}
