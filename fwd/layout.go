package fwd

import (
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

// layOut lays out the packet in w.chain, received on in, as TX
// descriptors in w.out and returns how many (0: no layout, the packet
// left Held for the caller to abandon). Frames that leave as they came
// move to the kernel's TX side; frames whose data was copied go back to
// in's fill ring at once.
func (w *worker) layOut(in *port, total int, c *batchCounts) int {
	path := w.build.Policy.Decide(total, len(w.chain))
	nd := 0
	switch path {
	case linearize.Inline:
		var addr uint64
		var ok bool
		if len(w.chain) == 1 {
			d := w.chain[0]
			addr, ok = w.build.Inline(w.mem[d.Addr : d.Addr+uint64(d.Len)])
		} else {
			addr, _, ok = w.build.InlineGather(w.chain)
		}
		if ok {
			w.out[0] = xsk.Desc{Addr: addr, Len: uint32(total)}
			nd = 1
		} else {
			c.fallbacks++
			path = linearize.Frame
			if len(w.chain) > 1 {
				path = linearize.Chain
			}
		}
	case linearize.Frag:
		if nd = w.build.Repack(w.chain, w.out); nd == 0 {
			path = linearize.Chain
		}
	}
	if nd > 0 {
		in.rx.RecycleChain(w.chain)
	} else {
		// Frame or Chain: the packet leaves from its own frames.
		if len(w.chain) > linearize.MaxDescs || len(w.chain) == cap(w.chain) && w.chain[len(w.chain)-1].Options&xsk.PktContd != 0 {
			// A chain longer than any kernel takes, and no frag block
			// to repack it into.
			return 0
		}
		for j, d := range w.chain {
			w.zone.Move(d.Addr, umem.Held, umem.KernelTX)
			w.out[j] = xsk.Desc{Addr: d.Addr, Len: d.Len, Options: d.Options & xsk.PktContd}
		}
		nd = len(w.chain)
	}
	// Finished on the bytes that leave, on every path (see complete).
	if w.csum && w.complete(w.out[:nd]) {
		c.csumCompleted++
	}
	for _, d := range w.out[:nd] {
		w.meter.Touch(d.Addr, d.Len)
	}
	c.paths[path]++
	c.hist[min(nd, linearize.MaxDescs)]++
	return nd
}

// layOutCopy lays out a copy of the packet in w.chain as TX descriptors in
// w.out, in an inline slot or a frag block of its own, else (no frag zone,
// or none left) in free frames, one per descriptor of the packet, and
// returns how many (0: no room, for the caller to abandon). The packet's
// own frames stay Held.
func (w *worker) layOutCopy(total int, c *batchCounts) int {
	nd, path := 0, linearize.Frag
	switch d := w.chain[0]; {
	case len(w.chain) == 1 && total <= w.build.Policy.InlineMax:
		if addr, ok := w.build.Inline(w.mem[d.Addr : d.Addr+uint64(d.Len)]); ok {
			w.out[0] = xsk.Desc{Addr: addr, Len: uint32(total)}
			nd, path = 1, linearize.Inline
		}
	case len(w.chain) == 1:
		nd = w.build.Pack(w.mem[d.Addr:d.Addr+uint64(d.Len)], w.out)
	default:
		nd = w.build.Repack(w.chain, w.out)
	}
	if nd == 0 {
		if nd = w.copyToFrames(); nd > 0 {
			path = linearize.Frame
			if nd > 1 {
				path = linearize.Chain
			}
		}
	}
	if nd == 0 {
		return 0
	}
	c.paths[path]++
	c.hist[min(nd, linearize.MaxDescs)]++
	return nd
}

// copyToFrames copies each descriptor of the packet in w.chain to the
// start of a free frame (each came in one, so each fits) and describes
// them in w.out; 0, with the frames given back, when the worker has too
// few.
func (w *worker) copyToFrames() int {
	if len(w.chain) > len(w.out) {
		return 0
	}
	for j, d := range w.chain {
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
	return len(w.chain)
}

// drop gives the frames of the packet in w.chain, received on in, back to
// in's fill ring: the packet is not sent (abandon).
func (w *worker) drop(in *port) { in.rx.RecycleChain(w.chain) }

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
