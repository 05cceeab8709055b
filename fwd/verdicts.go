package fwd

import (
	"math/bits"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// A Handler's verdicts: the batch is collected whole (decide), the handler
// decides every packet at once, and each verdict is carried out by the
// pipeline's stages (pipeline.go: carryOut). What only a Handler asks for
// is here: reflect and flood.

// verdicts is a worker's Handler part: the handler, and the batch's
// packets and where their descriptors are. The worker's alone.
type verdicts struct {
	handler Handler
	vlans   VLANHandler // the handler, if it is one
	pkts    []Packet
	spans   []span
	descs   []xsk.Desc
}

func newVerdicts(h Handler, ringSize int) verdicts {
	if h == nil {
		return verdicts{}
	}
	vlans, _ := h.(VLANHandler)
	return verdicts{handler: h, vlans: vlans, pkts: make([]Packet, 0, ringSize), spans: make([]span, 0, ringSize), descs: make([]xsk.Desc, 0, ringSize)}
}

// span locates one packet's descriptors in verdicts.descs.
type span struct{ start, end uint32 }

// decide collects the packets in's RX ring claimed into w.verdicts: pkts
// (one Packet each, for the handler) and descs/spans (their descriptors),
// and lets the handler decide them.
func (w *worker) decide(in *port, b *rxBatch) {
	v := &w.verdicts
	v.pkts, v.spans, v.descs = v.pkts[:0], v.spans[:0], v.descs[:0]
	for in.rx.More() {
		start := len(v.descs)
		var p rxPkt
		if !w.collect(in, v.descs[start:], b, &p) {
			continue
		}
		// p.descs lies at v.descs[start:] already (the batch takes no
		// more descriptors than v.descs holds): this only extends it.
		v.descs = append(v.descs[:start], p.descs...)
		v.spans = append(v.spans, span{uint32(start), uint32(len(v.descs))})
		d := p.descs[0]
		v.pkts = append(v.pkts, Packet{
			Data: w.rx.mem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)],
			Len:  p.total, Link: in.link, Queue: in.queue, total: int32(p.total),
			Arrival: w.arrivalOf(d.Addr),
		})
	}
	if len(v.pkts) > 0 {
		v.handler.Handle(v.pkts)
	}
}

// collected is packet j of the batch decide collected from in.
func (w *worker) collected(in *port, j int) rxPkt {
	v := &w.verdicts
	s := v.spans[j]
	return rxPkt{in: in, descs: v.descs[s.start:s.end:s.end], total: int(v.pkts[j].total)}
}

// verdictOf is the verdict the handler gave packet j of the batch. A
// packet whose Len the handler changed is dropped: laid out by it, it
// would send stale bytes past its end, be cut, or make a descriptor the
// kernel refuses.
func (vs *verdicts) verdictOf(j int) verdict {
	p := &vs.pkts[j]
	if p.Len != int(p.total) {
		return verdict{}
	}
	v := verdict{v: p.verdict, out: p.out}
	if p.verdict == VerdictFlood && p.dropped != 0 {
		v.dropped, v.cause = p.dropped, p.cause
	}
	if p.vid != 0 {
		v.vid = p.vid
		if vs.vlans != nil {
			v.untagged = vs.vlans.Untagged(p.vid)
		}
	}
	return v
}

// reflect sends p back out of the socket it came in on: the same link and
// queue, no flow table (its completion is not counted there either), no
// ordering.
func (w *worker) reflect(p *rxPkt, b *rxBatch) {
	l := p.in.tx
	tx := w.layOut(p, l, &b.c)
	if tx == nil {
		w.abandon(lost{why: dropNoRoom, at: atRX, rx: *p, link: l.link, queue: l.queue, total: p.total}, &l.bc)
		w.lanes.touch(l)
		return
	}
	if w.flows.table != nil {
		w.flows.table.bypass(tx)
	}
	w.put(l, tx, p.total)
}

// flood sends a copy of p out of every link of v's set but its own, p
// itself out of the last: every copy in an inline slot or a frag block
// of its own, so no UMEM address goes to two TX rings. The links v
// dropped (FloodDropOut) count it first, each as a drop of its own.
func (w *worker) flood(p *rxPkt, v verdict, b *rxBatch) {
	// The links it has, not those removed (links.go), but its own.
	links := w.chg.live &^ LinkSet(0).Add(p.in.link)
	set, dropped := v.out&links, v.dropped&links
	if dropped != 0 {
		w.floodDrops(p, v.cause, dropped, set == 0)
	}
	if set == 0 {
		if dropped == 0 { // a flood to nowhere
			w.abandon(lost{why: dropHandler, at: atRX, rx: *p, link: p.in.link, queue: p.in.queue, total: p.total}, &b.c)
		}
		return
	}
	// Finish a partial checksum once, before the copies are made.
	if p.in.csum && w.complete(p.descs) {
		b.c.n[cCsumCompleted]++
	}
	last := 63
	for last >= 0 && !set.Has(last) {
		last--
	}
	for o := 0; o < last; o++ {
		if set.Has(o) && w.retag(p, v, o, false) {
			w.sendCopy(p, o, b)
		}
	}
	if w.retag(p, v, last, true) {
		w.send(p, last, b)
	}
}

// floodDrops counts p as dropped for cause c on each link of dropped, as
// DropOut does on one (a capture sees a drop on each); p stays in place
// for the rest of its flood unless last, when it is released with the
// last count.
func (w *worker) floodDrops(p *rxPkt, c DropCause, dropped LinkSet, last bool) {
	why := outReason(c)
	for dropped != 0 {
		o := bits.TrailingZeros64(uint64(dropped))
		dropped &= dropped - 1
		at := atCopy
		if last && dropped == 0 {
			at = atRX
		}
		l := w.lanes.tx[o]
		w.abandon(lost{why: why, at: at, rx: *p, link: o, queue: w.q, total: p.total}, &l.bc)
		w.lanes.touch(l)
	}
}

// sendCopy sends a copy of p to link o, leaving p itself in place (a
// copy is made of the frame as it is now: retag may change it after).
func (w *worker) sendCopy(p *rxPkt, o int, b *rxBatch) {
	l := w.lanes.tx[o]
	tx := w.layOutCopy(p, l)
	if tx == nil {
		w.abandon(lost{why: dropNoRoom, at: atCopy, rx: *p, link: o, queue: w.q, total: p.total}, &l.bc)
		w.lanes.touch(l)
		return
	}
	c := w.choose(p, true) // p itself takes the stamp, last
	w.emit(p.in, o, c, tx, p.total, b)
}
