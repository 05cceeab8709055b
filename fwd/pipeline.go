package fwd

import (
	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// The batch pipeline, the one every mode runs. A batch from one RX ring
// goes through room (how much it may take), begin, collect (each packet's
// descriptors, checked by rxring), verdict (where it goes: cross-connect's
// for the whole batch, a Handler's per packet), then per packet the flow
// choice (its TX queue), the layout (layout.go) and the send (a TX lane,
// lane.go, or a handoff ring to the queue's owner), and finish. Each stage
// takes the packet as one value (an rxPkt on forward's stack, passed by
// pointer: no copy per stage) and hands its result on as one; a
// packet that is not sent ends in abandon (abandon.go).

// rxPkt is one received packet on its way through the stages: made by
// collect, read by the verdict, the flow choice and the layout. Its
// descriptors are Held frames, in the batch's scratch (w.rx.chain, or
// with a Handler w.verdicts.descs).
type rxPkt struct {
	in    *port
	descs []xsk.Desc
	total int
	// prio is the priority (PCP, DEI) of the 802.1Q tag retag popped,
	// for the tag it may push for the next link of a flood.
	prio uint16
}

// verdict is what becomes of a packet: a Handler's, or cross-connect's
// built-in one, given once for a whole batch.
type verdict struct {
	v       Verdict
	cause   DropCause // of the links dropped
	out     LinkSet   // the link of a forward, the links of a flood
	dropped LinkSet   // the links a flood counts a drop on (FloodDropOut)
	// vid is SetVLAN's, and untagged the links that take its VLAN
	// untagged (VLANHandler): the tag each link gets.
	vid      uint16
	untagged LinkSet
}

// txChoice is the flow choice for a packet: its TX queue, its flow's slot
// in the table and its arrival stamp (for the ordering).
type txChoice struct {
	tq    int
	slot  xps.Slot
	stamp int64
}

// rxBatch is the state of one batch, on forward's stack.
type rxBatch struct {
	c       batchCounts // receive side, published on the RX port
	rxBytes uint64
	packets int
	merging bool
}

// forward moves up to one batch of packets from in's RX ring. It peeks no
// more than the lanes (or the handoff rings) the batch may write can take,
// so a full ring pushes back into the RX ring (and the kernel's
// rx_ring_full counter) instead of dropping in user space.
//
// Cross-connect's verdict is known before a packet is read (every packet
// out of the other link): each packet is carried out as it is collected,
// in TX slots reserved for the whole batch. A Handler's batch is collected
// whole, decided at once, then carried out packet by packet: the same
// stages from the verdict on.
func (w *worker) forward(in *port) int {
	if !in.rx.Ready() {
		// Nothing to read, so nothing is held back by a full handoff
		// ring either; and no lane's room is worth asking: a switch of
		// 64 links would ask each of them, for each of its ports,
		// every round.
		if in.blockedAt.Load() != 0 {
			in.blockedAt.Store(0)
		}
		return 0
	}
	merging := w.flows.order.merging() // one mode read per batch
	v, whole := w.batchVerdict(in)
	room, ok := w.room(in, merging, v, whole)
	if !ok {
		return 0
	}
	n := in.rx.Peek(min(room, w.rx.batch), room)
	if n == 0 {
		return 0
	}
	b := rxBatch{merging: merging}
	w.begin(n, v, whole, &b)
	if whole {
		// One verdict, resolved once for the batch: every packet is sent
		// to its link (VerdictForward is the only batch verdict).
		o := int(v.out)
		var p rxPkt
		for in.rx.More() {
			if w.collect(in, w.rx.chain, &b, &p) {
				w.send(&p, o, &b)
			}
		}
	} else {
		w.decide(in, &b)
		for j := range w.verdicts.pkts {
			p := w.collected(in, j)
			w.carryOut(&p, w.verdicts.verdictOf(j), &b)
		}
	}
	w.finish(in, &b)
	return b.packets
}

// batchVerdict is the verdict for every packet of a batch from in, when
// the mode knows it before reading one: cross-connect's, out of the other
// link. whole is false when each packet has its own (a Handler's).
func (w *worker) batchVerdict(in *port) (v verdict, whole bool) {
	if w.verdicts.handler != nil {
		return verdict{}, false
	}
	return verdict{v: VerdictForward, out: LinkSet(1 - in.link)}, true
}

// room is how many descriptors a batch from in may take. When merging:
// what every handoff ring out of in can hold (a slow owner then pushes
// back into the RX ring instead of dropping here), and a ring found too
// full marks in blocked (merge.go). Else what every lane the batch may
// write can hold: the one a batch verdict names, or for a Handler every
// TX lane of the worker's and in's own (reflections). A Handler's lane
// whose link is down (its kicks failing) does not count: one down link
// must not stop the others, so packets for it are dropped (tx_full)
// instead; a batch verdict's single lane pushes back. ok is false when
// nothing may be taken.
func (w *worker) room(in *port, merging bool, v verdict, whole bool) (room uint32, ok bool) {
	room = w.rx.batch
	if merging {
		for _, hs := range in.out {
			for _, h := range hs {
				room = min(room, h.room())
			}
		}
		if room < linearize.MaxDescs {
			if in.blockedAt.Load() == 0 {
				in.blockedAt.Store(w.flows.clock())
			}
			return 0, false
		}
		if in.blockedAt.Load() != 0 {
			in.blockedAt.Store(0)
		}
	}
	lanes, self := w.lanes.txAll, in.tx
	if whole {
		o := int(v.out)
		lanes, self = w.lanes.tx[o:o+1], nil
	}
	if !merging {
		for _, l := range lanes {
			if whole || !l.down() {
				room = min(room, l.free(w.rx.batch))
			}
		}
	}
	if self != nil && !self.down() {
		room = min(room, self.free(w.rx.batch))
	}
	if room < linearize.MaxDescs {
		for _, l := range lanes {
			l.crowded()
		}
		if self != nil {
			self.crowded()
		}
		return room, room > 0
	}
	return room, true
}

// begin readies a batch of n descriptors: what every batch starts with
// (startBatch) and, for a batch verdict sent directly, n slots on its
// lane (every path needs at most as many descriptors as a packet arrived
// with).
func (w *worker) begin(n uint32, v verdict, whole bool, b *rxBatch) {
	w.startBatch()
	if whole && !b.merging && v.v == VerdictForward {
		l := w.lanes.tx[int(v.out)]
		l.reserve(n)
		w.lanes.touch(l) // finish gives back what is left
	}
}

// startBatch is how a batch starts (forward): whether anyone captures,
// the live inline limit, and with several queues one clock read.
func (w *worker) startBatch() {
	w.tap.set = w.tap.point.Begin() // one atomic load while nobody captures (capture.go)
	for i, n := 0, int(w.layout.inlineMax.Load()); i < len(w.umems.dom); i++ {
		w.umems.dom[i].build.Policy.InlineMax = n
	}
	if w.flows.table != nil {
		w.flows.now = w.flows.clock() // one clock read per batch
	}
	w.flows.lastStamp = 0
}

// collect takes in's next packet into buf (rxring checks every
// descriptor, and drops and counts a packet it may not follow), puts back
// a VLAN tag the driver took out, and drops a packet shorter than its IP
// header says (rx_truncated); a capture sees the packet as received, or
// refused with its reason. It fills in p, and reports whether it goes on.
func (w *worker) collect(in *port, buf []xsk.Desc, b *rxBatch, p *rxPkt) bool {
	descs, total, ok := in.rx.Next(buf)
	*p = rxPkt{in: in, descs: descs, total: total}
	b.packets++
	b.rxBytes += uint64(total)
	if !ok {
		w.abandon(lost{why: dropRejected, at: atRing, rx: *p, total: total}, &b.c)
		return false
	}
	if w.restoreVLAN(&p.descs[0]) {
		p.total += vlanTagLen
		b.c.n[cVLANRestored]++
	}
	// A frame cut on its way in is dropped, not sent on cut.
	if d := p.descs[0]; truncated(w.rx.mem[d.Addr:d.Addr+uint64(d.Len)], p.total) {
		if w.flows.table != nil {
			w.takeStamp(d.Addr) // ordering: this packet was seen
		}
		w.abandon(lost{why: dropTruncated, at: atRX, rx: *p, link: in.link, queue: in.queue, total: p.total}, &b.c)
		return false
	}
	if w.tap.set != nil {
		w.tapRX(p)
	}
	return true
}

// carryOut does what verdict v says for p. A verdict naming no link the
// forwarder has, or none at all, drops the packet (handler_drops); a
// drop with a cause (DropFor) is counted under the cause's reason.
func (w *worker) carryOut(p *rxPkt, v verdict, b *rxBatch) {
	switch v.v {
	case VerdictForward:
		if o := int(v.out); w.chg.live.Has(o) { // in range, and not removed (links.go)
			if w.retag(p, v, o, true) {
				w.send(p, o, b)
			}
			return
		}
	case VerdictReflect:
		w.reflect(p, b)
		return
	case VerdictFlood:
		w.flood(p, v, b)
		return
	}
	why := dropHandler
	if c := v.out & (1<<causeBits - 1); v.v == VerdictDrop && c < LinkSet(numCauses) { // DropFor's or DropOut's cause
		why = causeDrops[c]
		// DropOut: counted on the link it was for, where it is still
		// live (else on the link it came in on).
		if o := int(v.out>>causeBits) - 1; o >= 0 && w.chg.live.Has(o) {
			l := w.lanes.tx[o]
			w.abandon(lost{why: outReason(DropCause(c)), at: atRX, rx: *p, link: o, queue: w.q, total: p.total}, &l.bc)
			w.lanes.touch(l)
			return
		}
	}
	w.abandon(lost{why: why, at: atRX, rx: *p, link: p.in.link, queue: p.in.queue, total: p.total}, &b.c)
}

// choose is the flow choice for p: with one queue, this worker's; with
// several (flows), its flow's TX queue, and its arrival stamp, taken
// (cleared, for the ordering) unless peek. It reads the frame, so it runs
// before the layout may recycle it.
func (w *worker) choose(p *rxPkt, peek bool) txChoice {
	if w.flows.table == nil {
		return txChoice{tq: w.q, slot: xps.NoSlot}
	}
	return w.chooseFlow(p, peek)
}

func (w *worker) chooseFlow(p *rxPkt, peek bool) txChoice {
	d := p.descs[0]
	c := txChoice{}
	c.tq, c.slot = w.flows.table.pick(w.rx.mem[d.Addr:d.Addr+uint64(d.Len)], w.q, w.flows.now)
	if peek {
		c.stamp = w.stampOf(d.Addr)
	} else {
		c.stamp = w.takeStamp(d.Addr)
	}
	return c
}

// send lays out p and sends it towards link o. With one queue there is
// no flow to choose and nothing to order (no flows, no merging): p goes
// straight to this worker's lane, as emit would decide too.
func (w *worker) send(p *rxPkt, o int, b *rxBatch) {
	if w.flows.table != nil {
		w.sendFlow(p, o, b)
		return
	}
	l := w.lanes.tx[o]
	if tx := w.layOut(p, l, &b.c); tx != nil {
		w.put(l, tx, p.total)
		return
	}
	w.noRoom(p, o, l)
}

// sendFlow is send with several queues: the flow choice first (it reads
// the frame, which the layout may recycle), then emit.
func (w *worker) sendFlow(p *rxPkt, o int, b *rxBatch) {
	l := w.lanes.tx[o]
	c := w.chooseFlow(p, false)
	if tx := w.layOut(p, l, &b.c); tx != nil {
		w.emit(p.in, o, c, tx, p.total, b)
		return
	}
	w.noRoom(p, o, l)
}

// noRoom abandons p, for which the layout found no room.
func (w *worker) noRoom(p *rxPkt, o int, l *lane) {
	w.abandon(lost{why: dropNoRoom, at: atRX, rx: *p, link: o, queue: w.q, total: p.total}, &l.bc)
	w.lanes.touch(l)
}

// emit sends a packet received on in, laid out in tx, towards link o, on
// TX queue c.tq of its flow: on this worker's own lane when it owns c.tq
// and nothing needs ordering, else through the handoff ring to c.tq's
// owner (a full one drops it, counted).
func (w *worker) emit(in *port, o int, c txChoice, tx []xsk.Desc, total int, b *rxBatch) {
	l := w.lanes.tx[o]
	if w.flows.table != nil {
		w.flows.table.sent(tx, c.tq, c.slot)
	}
	if b.merging || c.tq != w.q {
		if !w.flows.order.push(in, c.tq, o, tx, c.stamp, w.flows.now) {
			w.abandon(lost{why: dropHandoffFull, at: atTX, descs: tx, tq: c.tq, link: o, queue: w.q, total: total}, &l.bc)
		} // pushed: the owner's merge records what becomes of it (capture.go)
		w.lanes.touch(l)
		return
	}
	w.put(l, tx, total)
}

// put writes tx on lane l, or drops the packet (tx_full) when it has no
// room: never in slots begin reserved, only on a lane room left out, a
// link that is down.
func (w *worker) put(l *lane, tx []xsk.Desc, total int) {
	w.lanes.touch(l)
	lc := &l.bc
	if !l.put(tx) {
		w.abandon(lost{why: dropTXFull, at: atTX, descs: tx, tq: w.q, link: l.link, queue: l.queue, total: total}, lc)
		return
	}
	if w.tap.set != nil {
		w.tapOut(l.link, l.queue, capture.TX, 0, tx, total)
	}
	lc.n[cTXPackets]++
	lc.n[cTXBytes] += uint64(total)
	lc.n[cTXDescs] += uint64(len(tx))
}

// finish ends a batch: the RX descriptors go back to the kernel with the
// recycled frames, each lane written gives back its unused slots and
// submits the rest (kicked as the round ends: txLanes.endRound), handoffs
// are published, and the batch's counts added.
func (w *worker) finish(in *port, b *rxBatch) {
	in.rx.Release()
	w.lanes.publishTouched()
	w.publishHandoffs(in)
	w.tapEnd()
	publishRX(in, &b.c, b.packets, b.rxBytes)
}
