package fwd

import (
	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Drop reasons as capture codes: the counters' names.
var (
	capBadDesc     = capture.ReasonCode(DropRXBadDesc)
	capTooLong     = capture.ReasonCode(DropRXTooLong)
	capNoRoom      = capture.ReasonCode(DropTXNoRoom)
	capHandoffFull = capture.ReasonCode(DropHandoffFull)
	capHandler     = capture.ReasonCode(DropHandler)
	capTXFull      = capture.ReasonCode(DropTXFull)
	capTruncated   = capture.ReasonCode(DropRXTruncated)
	capAtStop      = capture.ReasonCode(DropAtStop)
)

// Capture is the forwarder's capture point (xdpfwd capture): sessions
// opened on it see what the workers receive, send and drop. A packet
// handed to another worker's TX queue is seen by what becomes of it there:
// sent (TX) when that worker's merge puts it on the TX ring, or dropped
// (tx_full, dropped_at_stop). Each worker takes a session up and lets it
// go at its own batch boundary, so a packet in a handoff ring as a session
// starts may be recorded only as sent, and one as it ends only as
// received. Close ends the sessions (Session.Done).
func (f *Forwarder) Capture() *capture.Hub { return f.capture }

// tapState is a worker's side of package capture. A batch starts with
// set = point.Begin() (inlined: one atomic load, nil while nobody
// captures) and ends with tapEnd; every hook in between tests set, and
// does nothing else while it is nil.
type tapState struct {
	point *capture.Point
	set   *capture.Set // this batch's (tapBegin), or nil
	segs  [][]byte
	descs [linearize.MaxDescs]xsk.Desc // a handed-off packet's, for tapHanded
	// invalid is the batch's rx_bad_descs count at the last rejected
	// packet: tapRejected tells the two reasons of collect apart by it.
	invalid uint64
}

// tapEnd publishes the batch's records.
func (w *worker) tapEnd() {
	if w.tap.set != nil {
		w.tap.set.End()
		w.tap.set = nil
		w.tap.invalid = 0
	}
}

// tapRX offers p as received.
func (w *worker) tapRX(p *rxPkt) {
	w.tapFrames(p.in.link, p.in.queue, capture.RX, 0, p.descs, p.total)
}

// tapRejected offers a packet collect refused, with its reason.
func (w *worker) tapRejected(p *rxPkt) {
	r := capTooLong
	if inv, _ := p.in.rx.Rejects(); inv != w.tap.invalid {
		w.tap.invalid, r = inv, capBadDesc
	}
	w.tapFrames(p.in.link, p.in.queue, capture.Drop, r, p.descs, p.total)
}

// tapFrames offers a received packet, its descriptors in descs: the bytes
// of those that lie in a frame of the zone (an invalid descriptor is not
// read).
func (w *worker) tapFrames(link, queue int, dir capture.Dir, r capture.Reason, descs []xsk.Desc, total int) {
	segs := w.tap.segs[:0]
	for _, d := range descs {
		if !w.umems.of(d.Addr).region.Frames.Contains(d.Addr) || d.Addr+uint64(d.Len) > w.rx.frameStart(d.Addr)+w.rx.frameSize {
			break
		}
		segs = append(segs, w.rx.mem[d.Addr:d.Addr+uint64(d.Len)])
	}
	w.tap.segs = segs
	w.tap.set.Packet(link, queue, dir, r, segs, total)
}

// tapOut offers the packet laid out for transmission in descs, as sent
// (TX) or dropped on its way (Drop) on (link, queue).
func (w *worker) tapOut(link, queue int, dir capture.Dir, r capture.Reason, descs []xsk.Desc, total int) {
	segs := w.tap.segs[:0]
	for _, d := range descs {
		if d.Addr+uint64(d.Len) > uint64(len(w.rx.mem)) {
			break
		}
		segs = append(segs, w.rx.mem[d.Addr:d.Addr+uint64(d.Len)])
	}
	w.tap.segs = segs
	w.tap.set.Packet(link, queue, dir, r, segs, total)
}

// tapHanded offers the packet in the k entries of h from idx, handed to
// this worker, as sent (TX) or dropped on (link, this worker's queue).
func (w *worker) tapHanded(link int, dir capture.Dir, r capture.Reason, h *handoff, idx, k uint32) {
	ds := w.tap.descs[:0]
	total := 0
	for j := range min(k, uint32(len(w.tap.descs))) {
		d := h.at(idx + j).desc
		ds = append(ds, d)
		total += int(d.Len)
	}
	w.tapOut(link, w.q, dir, r, ds, total)
}
