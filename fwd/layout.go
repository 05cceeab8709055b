package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// The TX layout, and the only code in this package that decides where a
// UMEM unit goes: a received frame (Held, as rxring.Ring.Next leaves it)
// leaves on a TX ring (KernelTX) or goes back to its fill ring
// (rxring.Ring.Recycle); an inline slot or frag block is taken for a copy
// (inline.Builder) and comes back from the completion ring (freeTX). The
// states themselves are umem's, checked there: TestOwnershipConfined keeps
// every other file of the package off them.

// txLayout is a worker's layout part: the page meter, one packet's TX
// scratch, and the settings a layout reads; the builders of inline slots
// and frag blocks are the worker's parts of each domain (workerDomain).
// The worker's alone, but inlineMax, the forwarder's live limit
// (SetInlineMax writes it), loaded once per batch.
type txLayout struct {
	out       []xsk.Desc // one packet's TX descriptors
	inlineMax *atomic.Int32
	meter     umem.PageMeter // last: some 100 KiB (see worker)
}

func newTXLayout(inlineMax *atomic.Int32) txLayout {
	return txLayout{
		out:       make([]xsk.Desc, linearize.MaxDescs),
		inlineMax: inlineMax,
	}
}

// layOut lays out p for lane l as TX descriptors in w.layout.out and returns
// them (nil: no layout, the packet left Held for the caller to abandon).
// Frames that leave as they came move to the kernel's TX side; frames
// whose data was copied go back to p's fill ring at once. A lane of
// another domain gets a copy (layOutAcross). What it counts goes to l's
// counts, but a completed checksum, counted on the receive side (rc).
func (w *worker) layOut(p *rxPkt, l *lane, rc *batchCounts) []xsk.Desc {
	if p.in.dom != l.dom {
		return w.layOutAcross(p, l, rc)
	}
	d := &w.umems.dom[l.dom]
	chain := p.descs
	path := d.build.Policy.Decide(p.total, len(chain))
	nd := 0
	switch path {
	case linearize.Inline:
		var addr uint64
		var ok bool
		if len(chain) == 1 {
			c := chain[0]
			addr, ok = d.build.Inline(w.rx.mem[c.Addr : c.Addr+uint64(c.Len)])
		} else {
			addr, _, ok = d.build.InlineGather(chain)
		}
		if ok {
			w.layout.out[0] = xsk.Desc{Addr: addr, Len: uint32(p.total)}
			nd = 1
		} else {
			l.bc.n[cInlineFallbacks]++
			path = linearize.Frame
			if len(chain) > 1 {
				path = linearize.Chain
			}
		}
	case linearize.Frag:
		if nd = d.build.Repack(chain, w.layout.out); nd == 0 {
			path = linearize.Chain
		}
	}
	if nd > 0 {
		p.in.rx.RecycleChain(chain)
	} else {
		// Frame or Chain: the packet leaves from its own frames.
		if len(chain) > linearize.MaxDescs || len(chain) == linearize.MaxDescs && chain[len(chain)-1].Options&xsk.PktContd != 0 {
			// A chain longer than any kernel takes, and no frag block
			// to repack it into.
			return nil
		}
		for j, c := range chain {
			d.region.Frames.Move(c.Addr, umem.Held, umem.KernelTX)
			w.layout.out[j] = xsk.Desc{Addr: c.Addr, Len: c.Len, Options: c.Options & xsk.PktContd}
		}
		nd = len(chain)
	}
	tx := w.layout.out[:nd]
	w.laidOut(tx, p.in.csum, rc)
	l.bc.paths[path]++
	l.bc.hist[min(nd, linearize.MaxDescs)]++
	return tx
}

// laidOut finishes the bytes that leave, on every path (see complete),
// if their port's link asks for it (csum), and meters their pages.
func (w *worker) laidOut(tx []xsk.Desc, csum bool, rc *batchCounts) {
	if csum && w.complete(tx) {
		rc.n[cCsumCompleted]++
	}
	for _, d := range tx {
		w.layout.meter.Touch(d.Addr, d.Len)
	}
}

// layOutAcross lays out p for lane l of another domain than p's: a copy
// in l's domain (layOutCopy), p's own frames back to its fill ring at
// once, while hot.
func (w *worker) layOutAcross(p *rxPkt, l *lane, rc *batchCounts) []xsk.Desc {
	tx := w.layOutCopy(p, l)
	if tx == nil {
		return nil
	}
	p.in.rx.RecycleChain(p.descs)
	w.laidOut(tx, p.in.csum, rc)
	return tx
}

// layOutCopy lays out a copy of p for lane l as TX descriptors in
// w.layout.out, in an inline slot or a frag block of l's domain, else (no
// frag zone, or none left) in its free frames, one per descriptor of the
// packet, and returns them (nil: no room, for the caller to abandon). The
// packet's own frames stay Held. A copy into another domain is counted as
// such.
func (w *worker) layOutCopy(p *rxPkt, l *lane) []xsk.Desc {
	d := &w.umems.dom[l.dom]
	chain := p.descs
	nd, path := 0, linearize.Frag
	switch c := chain[0]; {
	case len(chain) == 1 && p.total <= d.build.Policy.InlineMax:
		if addr, ok := d.build.Inline(w.rx.mem[c.Addr : c.Addr+uint64(c.Len)]); ok {
			w.layout.out[0] = xsk.Desc{Addr: addr, Len: uint32(p.total)}
			nd, path = 1, linearize.Inline
		}
	case len(chain) == 1:
		nd = d.build.Pack(w.rx.mem[c.Addr:c.Addr+uint64(c.Len)], w.layout.out)
	default:
		nd = d.build.Repack(chain, w.layout.out)
	}
	if nd == 0 {
		if nd = w.copyToFrames(d, chain); nd > 0 {
			path = linearize.Frame
			if nd > 1 {
				path = linearize.Chain
			}
		}
	}
	if nd == 0 {
		return nil
	}
	c := &l.bc
	c.paths[path]++
	c.hist[min(nd, linearize.MaxDescs)]++
	if p.in.dom != l.dom {
		c.n[crossCount[path]]++
		c.n[cCrossBytes] += uint64(p.total)
	}
	return w.layout.out[:nd]
}

// crossCount is the counter of a copy across domains by the path it
// took: a chain of frames counts as frames.
var crossCount = [linearize.NumPaths]count{
	linearize.Inline: cCrossInline,
	linearize.Frame:  cCrossFrame,
	linearize.Chain:  cCrossFrame,
	linearize.Frag:   cCrossFrag,
}

// copyToFrames copies each descriptor of chain to the start of a free
// frame of d (each came in one, so each fits) and describes them in
// w.layout.out; 0, with the frames given back, when the worker has too few.
func (w *worker) copyToFrames(d *workerDomain, chain []xsk.Desc) int {
	if len(chain) > len(w.layout.out) {
		return 0
	}
	for j, c := range chain {
		a, ok := d.frames.Alloc(umem.KernelTX)
		if !ok {
			for _, o := range w.layout.out[:j] {
				d.frames.Free(o.Addr, umem.KernelTX)
			}
			return 0
		}
		copy(w.rx.mem[a:a+uint64(c.Len)], w.rx.mem[c.Addr:c.Addr+uint64(c.Len)])
		w.layout.out[j] = xsk.Desc{Addr: a, Len: c.Len, Options: c.Options & xsk.PktContd}
	}
	return len(chain)
}

// drop gives the frames of p back to its fill ring: the packet is not
// sent (abandon).
func (w *worker) drop(p *rxPkt) { p.in.rx.RecycleChain(p.descs) }

// release gives back TX descriptors that will not be sent.
func (w *worker) release(descs []xsk.Desc) {
	for _, d := range descs {
		w.freeTX(d.Addr)
	}
}

// freeTX returns a TX address to the zone it came from, in its domain:
// frames to the worker's cache, inline slots and frag references to the
// builder. It reports false for an address that is no UMEM unit (never
// followed).
func (w *worker) freeTX(addr uint64) bool {
	d := w.umems.of(addr)
	if d.region.Frames.Contains(addr) {
		d.frames.Free(addr, umem.KernelTX)
		return true
	}
	return d.build.Release(addr)
}

// releaseLent frees what a removed link's closed sockets held: rx, frames
// lent to its fill and RX rings, and tx, what its TX rings never
// completed (RemoveLink read both back before closing them).
func (w *worker) releaseLent(rx, tx []uint64) {
	for _, a := range rx {
		a = xsk.Flat(a)
		w.umems.of(a).frames.Free(a, umem.KernelRX)
	}
	for _, a := range tx {
		w.freeTX(xsk.Flat(a))
	}
	w.umems.publish()
}
