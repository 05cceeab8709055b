package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/inline"
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

// txLayout is a worker's layout part: the builder of inline slots and
// frag blocks, the page meter, one packet's TX scratch, and the settings
// a layout reads. The worker's alone, but inlineMax, the forwarder's live
// limit (SetInlineMax writes it), loaded once per batch.
type txLayout struct {
	build *inline.Builder
	out   []xsk.Desc // one packet's TX descriptors
	// csum: finish partial TCP/UDP checksums (--complete-checksums).
	csum      bool
	inlineMax *atomic.Int32
	meter     umem.PageMeter // last: some 100 KiB (see worker)
}

func newTXLayout(r *umem.Region, policy linearize.Policy, align int, csum bool, inlineMax *atomic.Int32) txLayout {
	return txLayout{
		build:     inline.NewBuilder(r, policy, 1024, align),
		out:       make([]xsk.Desc, linearize.MaxDescs),
		csum:      csum,
		inlineMax: inlineMax,
	}
}

// layOut lays out p as TX descriptors in w.out and returns them (nil: no
// layout, the packet left Held for the caller to abandon). Frames that
// leave as they came move to the kernel's TX side; frames whose data was
// copied go back to p's fill ring at once. What it counts goes to lc, the
// counts of the lane it leaves by, but a completed checksum, counted on
// the receive side (rc).
func (w *worker) layOut(p *rxPkt, rc, lc *batchCounts) []xsk.Desc {
	chain := p.descs
	path := w.build.Policy.Decide(p.total, len(chain))
	nd := 0
	switch path {
	case linearize.Inline:
		var addr uint64
		var ok bool
		if len(chain) == 1 {
			d := chain[0]
			addr, ok = w.build.Inline(w.mem[d.Addr : d.Addr+uint64(d.Len)])
		} else {
			addr, _, ok = w.build.InlineGather(chain)
		}
		if ok {
			w.out[0] = xsk.Desc{Addr: addr, Len: uint32(p.total)}
			nd = 1
		} else {
			lc.n[cInlineFallbacks]++
			path = linearize.Frame
			if len(chain) > 1 {
				path = linearize.Chain
			}
		}
	case linearize.Frag:
		if nd = w.build.Repack(chain, w.out); nd == 0 {
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
		for j, d := range chain {
			w.zone.Move(d.Addr, umem.Held, umem.KernelTX)
			w.out[j] = xsk.Desc{Addr: d.Addr, Len: d.Len, Options: d.Options & xsk.PktContd}
		}
		nd = len(chain)
	}
	tx := w.out[:nd]
	// Finished on the bytes that leave, on every path (see complete).
	if w.csum && w.complete(tx) {
		rc.n[cCsumCompleted]++
	}
	for _, d := range tx {
		w.meter.Touch(d.Addr, d.Len)
	}
	lc.paths[path]++
	lc.hist[min(nd, linearize.MaxDescs)]++
	return tx
}

// layOutCopy lays out a copy of p as TX descriptors in w.out, in an
// inline slot or a frag block of its own, else (no frag zone, or none
// left) in free frames, one per descriptor of the packet, and returns
// them (nil: no room, for the caller to abandon). The packet's own frames
// stay Held.
func (w *worker) layOutCopy(p *rxPkt, c *batchCounts) []xsk.Desc {
	chain := p.descs
	nd, path := 0, linearize.Frag
	switch d := chain[0]; {
	case len(chain) == 1 && p.total <= w.build.Policy.InlineMax:
		if addr, ok := w.build.Inline(w.mem[d.Addr : d.Addr+uint64(d.Len)]); ok {
			w.out[0] = xsk.Desc{Addr: addr, Len: uint32(p.total)}
			nd, path = 1, linearize.Inline
		}
	case len(chain) == 1:
		nd = w.build.Pack(w.mem[d.Addr:d.Addr+uint64(d.Len)], w.out)
	default:
		nd = w.build.Repack(chain, w.out)
	}
	if nd == 0 {
		if nd = w.copyToFrames(chain); nd > 0 {
			path = linearize.Frame
			if nd > 1 {
				path = linearize.Chain
			}
		}
	}
	if nd == 0 {
		return nil
	}
	c.paths[path]++
	c.hist[min(nd, linearize.MaxDescs)]++
	return w.out[:nd]
}

// copyToFrames copies each descriptor of chain to the start of a free
// frame (each came in one, so each fits) and describes them in w.out; 0,
// with the frames given back, when the worker has too few.
func (w *worker) copyToFrames(chain []xsk.Desc) int {
	if len(chain) > len(w.out) {
		return 0
	}
	for j, d := range chain {
		a, ok := w.frames.Alloc(umem.KernelTX)
		if !ok {
			for _, o := range w.out[:j] {
				w.frames.Free(o.Addr, umem.KernelTX)
			}
			return 0
		}
		copy(w.mem[a:a+uint64(d.Len)], w.mem[d.Addr:d.Addr+uint64(d.Len)])
		w.out[j] = xsk.Desc{Addr: a, Len: d.Len, Options: d.Options & xsk.PktContd}
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

// freeTX returns a TX address to the zone it came from: frames to the
// worker's cache, inline slots and frag references to the builder. It
// reports false for an address that is no UMEM unit (never followed).
func (w *worker) freeTX(addr uint64) bool {
	if w.zone.Contains(addr) {
		w.frames.Free(addr, umem.KernelTX)
		return true
	}
	return w.build.Release(addr)
}

// releaseLent frees what a removed link's closed sockets held: rx, frames
// lent to its fill and RX rings, and tx, what its TX rings never
// completed (RemoveLink read both back before closing them).
func (w *worker) releaseLent(rx, tx []uint64) {
	for _, a := range rx {
		w.frames.Free(xsk.Flat(a), umem.KernelRX)
	}
	for _, a := range tx {
		w.freeTX(xsk.Flat(a))
	}
	w.frames.Publish()
	w.build.Publish()
}
