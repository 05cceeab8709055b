package fwd

import (
	"github.com/xdpfwd/xdpfwd/csum"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// complete finishes a TCP/UDP checksum its sender left partial for
// offload, on the bytes that leave: descs are the packet's TX descriptors
// (region offsets), whatever layout layOut chose for it. It runs after the
// copy, not before, so that a gathered inline copy or a repacked frag
// block is finished in the one place it is contiguous, and a chain is
// summed across the frames it leaves from, with no copy. It reports
// whether it completed one, so each packet is counted once, whatever its
// path.
func (w *worker) complete(descs []xsk.Desc) bool {
	if len(descs) == 1 {
		d := descs[0]
		return csum.Complete(w.rx.mem[d.Addr:d.Addr+uint64(d.Len)]) == csum.Completed
	}
	// On the stack: CompleteChain keeps no reference to it.
	var segs [linearize.MaxDescs][]byte
	if len(descs) > len(segs) {
		return false // layOut never makes more
	}
	for i, d := range descs {
		segs[i] = w.rx.mem[d.Addr : d.Addr+uint64(d.Len)]
	}
	return csum.CompleteChain(segs[:len(descs)]) == csum.Completed
}
