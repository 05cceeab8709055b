package fwd

import (
	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xps"
)

// span locates one packet's descriptors in worker.descs.
type span struct{ start, end uint32 }

// forwardVerdicts is forward with a Handler: it collects a batch, lets the
// handler decide every packet at once, then carries out the verdicts. The
// stages: collect (validate, restore VLAN tags), decide (Handle), then per
// packet lay out and send (or drop, reflect, flood).
func (w *worker) forwardVerdicts(in *port) int {
	merging := w.order.merging()
	room, ok := w.verdictRoom(in, merging)
	if !ok {
		return 0
	}
	if in.rx.Peek(min(room, w.batch), room) == 0 {
		return 0
	}
	w.startBatch()
	var c batchCounts // receive side
	packets, rxBytes := w.collectBatch(in, &c)
	if len(w.pkts) > 0 {
		w.handler.Handle(w.pkts)
	}
	for j := range w.pkts {
		w.chain = append(w.chain[:0], w.descs[w.spans[j].start:w.spans[j].end]...)
		w.carryOut(in, &w.pkts[j], merging, &c)
	}
	in.rx.Release()
	w.finishLanes()
	w.publishHandoffs(in)
	w.tapEnd()
	w.publishRX(in, &c, packets, rxBytes)
	return packets
}

// verdictRoom is how many descriptors a batch from in may take: what every
// handoff ring out of it can hold, or without handoffs what every TX ring
// the handler may choose can hold. A TX ring of a link that is down (its
// kicks failing) does not count: one down link must not stop the others,
// so packets for it are dropped (tx_full) instead.
func (w *worker) verdictRoom(in *port, merging bool) (uint32, bool) {
	room := w.batch
	if merging {
		for _, hs := range in.out {
			for _, h := range hs {
				room = min(room, h.room())
			}
		}
		if room < linearize.MaxDescs {
			if in.blockedAt.Load() == 0 {
				in.blockedAt.Store(w.clock())
			}
			return 0, false
		}
		if in.blockedAt.Load() != 0 {
			in.blockedAt.Store(0)
		}
	}
	for _, p := range w.tx {
		if !p.tx.down() && !merging {
			room = min(room, p.tx.free(w.batch))
		}
	}
	if !in.tx.down() {
		room = min(room, in.tx.free(w.batch)) // reflections
	}
	if room < linearize.MaxDescs {
		for _, p := range w.tx {
			if p.tx.pending() > 0 {
				p.tx.kick()
			}
		}
		if in.tx.pending() > 0 {
			in.tx.kick()
		}
		return room, room > 0
	}
	return room, true
}

// collectBatch collects the packets in's RX ring claimed into w.pkts (one
// Packet each, for the handler) and w.descs/w.spans (their descriptors).
func (w *worker) collectBatch(in *port, c *batchCounts) (packets int, rxBytes uint64) {
	w.pkts, w.spans, w.descs = w.pkts[:0], w.spans[:0], w.descs[:0]
	var b rxBatch
	for in.rx.More() {
		total, ok := w.collect(in, &b)
		if !ok {
			continue
		}
		d := w.chain[0]
		start := uint32(len(w.descs))
		w.descs = append(w.descs, w.chain...)
		w.spans = append(w.spans, span{start, uint32(len(w.descs))})
		w.pkts = append(w.pkts, Packet{
			Data: w.mem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)],
			Len:  total, Link: in.link, Queue: in.queue, total: total,
		})
	}
	c.vlanRestored += b.c.vlanRestored
	c.truncated += b.c.truncated
	return b.packets, b.rxBytes
}

// carryOut does what the handler decided for p, whose descriptors are in
// w.chain. A packet whose Len the handler changed is dropped: laid out by
// it, it would send stale bytes past its end, be cut, or make a
// descriptor the kernel refuses.
func (w *worker) carryOut(in *port, p *Packet, merging bool, c *batchCounts) {
	switch v := p.verdict; {
	case p.Len != p.total:
	case v == VerdictForward:
		if o := int(p.out); o >= 0 && o < w.nlinks {
			w.send(in, o, p.total, merging, c)
			return
		}
	case v == VerdictReflect:
		w.reflect(in, p.total, c)
		return
	case v == VerdictFlood:
		w.flood(in, p, merging, c)
		return
	}
	w.abandon(lost{why: dropHandler, at: atRX, in: in, link: in.link, queue: in.queue, total: p.total}, c)
}

// send lays out the packet in w.chain and sends it towards link o: on this
// worker's TX queue of o when its flow is bound there and nothing needs
// ordering, else through the handoff ring to the owner of the flow's queue.
func (w *worker) send(in *port, o, total int, merging bool, c *batchCounts) {
	lc := &w.tx[o].bc
	tq, slot := w.q, xps.NoSlot
	var stamp int64
	if w.flows != nil {
		d := w.chain[0]
		tq, slot = w.flows.pick(w.mem[d.Addr:d.Addr+uint64(d.Len)], w.q, w.now)
		stamp = w.takeStamp(d.Addr)
	}
	nd := w.layOut(in, total, lc)
	rxSide(c, lc)
	if nd == 0 {
		w.abandon(lost{why: dropNoRoom, at: atRX, in: in, link: o, queue: w.q, total: total}, lc)
		w.touch(w.tx[o])
		return
	}
	w.emit(in, o, total, nd, tq, slot, stamp, merging)
}

// emit sends the packet laid out in w.out[:nd] towards link o, on TX queue
// tq of its flow (slot): on this worker's own TX ring when it owns tq and
// nothing needs ordering, else through the handoff ring to tq's owner.
func (w *worker) emit(in *port, o, total, nd, tq int, slot xps.Slot, stamp int64, merging bool) {
	if w.flows != nil {
		w.flows.sent(w.out[:nd], tq, slot)
	}
	if merging || tq != w.q {
		if !w.order.push(in, tq, o, w.out[:nd], stamp, w.now) {
			w.abandon(lost{why: dropHandoffFull, at: atTX, descs: w.out[:nd], tq: tq, link: o, queue: w.q, total: total}, &w.tx[o].bc)
		} // pushed: the owner's merge records what becomes of it
		w.touch(w.tx[o])
		return
	}
	w.put(w.tx[o], total, nd)
}

// reflect sends the packet in w.chain back out of the socket it came in
// on: the same link and queue, no flow table (its completion is not
// counted there either), no ordering.
func (w *worker) reflect(in *port, total int, c *batchCounts) {
	nd := w.layOut(in, total, &in.bc)
	rxSide(c, &in.bc)
	if nd == 0 {
		w.abandon(lost{why: dropNoRoom, at: atRX, in: in, link: in.link, queue: in.queue, total: total}, &in.bc)
		w.touch(in)
		return
	}
	if w.flows != nil {
		w.flows.bypass(w.out[:nd])
	}
	w.put(in, total, nd)
}

// rxSide moves what layOut counted for the input link (a completed
// checksum) from a TX ring's counts to the batch's receive-side ones.
func rxSide(c, lc *batchCounts) {
	c.csumCompleted += lc.csumCompleted
	lc.csumCompleted = 0
}

// put writes w.out[:nd] on p's TX ring, or drops them (tx_full) when it
// has no room: only a ring verdictRoom left out, a link that is down.
func (w *worker) put(p *port, total, nd int) {
	w.touch(p)
	lc := &p.bc
	if !p.tx.put(w.out[:nd]) {
		w.abandon(lost{why: dropTXFull, at: atTX, descs: w.out[:nd], tq: w.q, link: p.link, queue: p.queue, total: total}, lc)
		return
	}
	if w.tap.set != nil {
		w.tapOut(p.link, p.queue, capture.TX, 0, w.out[:nd], total)
	}
	lc.txPackets++
	lc.txBytes += uint64(total)
	lc.txDescs += uint64(nd)
}

// flood sends a copy of the packet out of every link in p.out but its own,
// the packet itself out of the last: every copy in an inline slot or a frag
// block of its own, so no UMEM address goes to two TX rings.
func (w *worker) flood(in *port, p *Packet, merging bool, c *batchCounts) {
	set := p.out &^ LinkSet(0).Add(in.link) & AllLinks(w.nlinks)
	if set == 0 {
		w.abandon(lost{why: dropHandler, at: atRX, in: in, link: in.link, queue: in.queue, total: p.total}, c)
		return
	}
	// Finish a partial checksum once, before the copies are made.
	if w.csum && w.complete(w.chain) {
		c.csumCompleted++
	}
	last := 63
	for last >= 0 && !set.Has(last) {
		last--
	}
	for o := 0; o < last; o++ {
		if set.Has(o) {
			w.sendCopy(in, o, p.total, merging)
		}
	}
	w.send(in, last, p.total, merging, c)
}

// sendCopy sends a copy of the packet in w.chain to link o, leaving the
// packet itself in place.
func (w *worker) sendCopy(in *port, o, total int, merging bool) {
	lc := &w.tx[o].bc
	nd := w.layOutCopy(total, lc)
	if nd == 0 {
		w.abandon(lost{why: dropNoRoom, at: atCopy, link: o, queue: w.q, total: total}, lc)
		w.touch(w.tx[o])
		return
	}
	tq, slot := w.q, xps.NoSlot
	var stamp int64
	if w.flows != nil {
		d := w.chain[0]
		tq, slot = w.flows.pick(w.mem[d.Addr:d.Addr+uint64(d.Len)], w.q, w.now)
		stamp = w.stampOf(d.Addr) // the packet itself takes it, last
	}
	w.emit(in, o, total, nd, tq, slot, stamp, merging)
}

// touch notes that p's TX ring (or counts) were written this batch.
func (w *worker) touch(p *port) {
	if !p.touched {
		p.touched = true
		w.touched = append(w.touched, p)
	}
}

// finishLanes submits what the batch wrote on each TX ring and publishes
// the per-lane counts.
func (w *worker) finishLanes() {
	for _, p := range w.touched {
		p.touched = false
		p.tx.publish() // kicked by run: kickOrDefer
		w.publishTX(p, &p.bc)
		p.bc = batchCounts{}
	}
	w.touched = w.touched[:0]
}
