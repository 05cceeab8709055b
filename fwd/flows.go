package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// flowState binds flows to TX queues when a forwarder runs several queues
// (package xps), and remembers, per TX descriptor, which flow it counts
// against, so that the flow's in-flight count drops when the kernel
// completes it. That count is what lets a flow move to another queue only
// when nothing of it is in flight: the kernel's ooo_okay rule.
type flowState struct {
	table     *xps.Table
	symmetric bool
	active    atomic.Int32 // TX queues flows are spread over

	// slots, per UMEM domain, of the flow each in-flight descriptor
	// belongs to.
	slots []flowSlots
}

// flowSlots are the flow slots of one domain's descriptors, by address:
// per frame, per inline slot, per 64 bytes of the frag zone (packets
// start 64-byte aligned there). Written by the worker that builds the
// descriptor, read by the one that reaps it; the handoff ring or the
// worker itself orders the two.
type flowSlots struct {
	region                *umem.Region
	frames, inline, frags []xps.Slot
}

const fragMetaShift = 6

func newFlowState(regions []*umem.Region, mode xps.Mode, size int, symmetric bool, queues int) *flowState {
	t := xps.NewTable(size, xps.DefaultIdle)
	t.SetMode(mode)
	fs := &flowState{table: t, symmetric: symmetric}
	for _, r := range regions {
		fs.slots = append(fs.slots, flowSlots{
			region: r,
			frames: make([]xps.Slot, r.Frames.Len()),
			inline: make([]xps.Slot, r.Inline.Len()),
			frags:  make([]xps.Slot, r.Frags.Size()>>fragMetaShift),
		})
	}
	fs.active.Store(int32(queues))
	return fs
}

// pick returns the TX queue for a frame received on queue rxq.
func (fs *flowState) pick(frame []byte, rxq int, now int64) (int, xps.Slot) {
	n := int(fs.active.Load())
	switch fs.table.Mode() {
	case xps.ModeCPU:
		return xps.CPUQueue(rxq, n), xps.NoSlot
	case xps.ModeHash:
		k, _ := xps.ParseKey(frame, fs.symmetric)
		return xps.HashQueue(k.Hash(), n), xps.NoSlot
	}
	k, _ := xps.ParseKey(frame, fs.symmetric)
	return fs.table.Pick(k, k.Hash(), n, rxq, now)
}

func (fs *flowState) slotOf(addr uint64) *xps.Slot {
	for i := range fs.slots {
		s := &fs.slots[i]
		switch r := s.region; {
		case r.Frames.Contains(addr):
			return &s.frames[r.Frames.Index(addr)]
		case r.Inline.Contains(addr):
			return &s.inline[r.Inline.Index(addr)]
		case r.Frags.Contains(addr):
			return &s.frags[(addr-r.Frags.Base())>>fragMetaShift]
		}
	}
	return nil
}

// sent records descs as in flight on queue tq for the flow in slot. Call it
// before the descriptors can complete.
func (fs *flowState) sent(descs []xsk.Desc, tq int, slot xps.Slot) {
	fs.table.Sent(slot, tq, len(descs))
	for _, d := range descs {
		if p := fs.slotOf(d.Addr); p != nil {
			*p = slot
		}
	}
}

// untracked marks a descriptor sent outside the flow table (a
// reflection, back out of the socket it came in on): its completion is
// not the table's to take off. No xps.Slot has all 32 index bits set (the
// table has at most xps.MaxSize entries).
const untracked = ^xps.Slot(0)

// bypass records descs as sent outside the flow table. Call it before the
// descriptors can complete.
func (fs *flowState) bypass(descs []xsk.Desc) {
	for _, d := range descs {
		if p := fs.slotOf(d.Addr); p != nil {
			*p = untracked
		}
	}
}

// completed takes descs that will not be sent after all off queue tq.
func (fs *flowState) completed(descs []xsk.Desc, tq int) {
	for _, d := range descs {
		fs.done(d.Addr, tq)
	}
}

func (fs *flowState) done(addr uint64, tq int) {
	slot := xps.NoSlot
	if p := fs.slotOf(addr); p != nil {
		slot = *p
	}
	if slot != untracked {
		fs.table.Completed(slot, tq, 1)
	}
}

// completedAddrs takes reaped addresses off queue tq, one table call per
// run of descriptors of the same flow; untracked ones are skipped.
func (fs *flowState) completedAddrs(addrs []uint64, tq int) {
	run, n := xps.NoSlot, 0
	for _, a := range addrs {
		slot := xps.NoSlot
		if p := fs.slotOf(a); p != nil {
			slot = *p
		}
		if slot != run && n > 0 {
			if run != untracked {
				fs.table.Completed(run, tq, n)
			}
			n = 0
		}
		run = slot
		n++
	}
	if n > 0 && run != untracked {
		fs.table.Completed(run, tq, n)
	}
}
