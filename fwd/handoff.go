package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// handoff carries TX descriptors from the worker that received a packet to
// the worker that owns the TX queue the packet's flow is sent on, so that
// every TX ring keeps a single producer. One ring carries the packets of
// one RX ring bound for one TX link, so its entries are in arrival order. It is a bounded single-producer,
// single-consumer ring: the producer publishes tail after writing the
// entries (release), the consumer reads tail (acquire), reads the entries,
// then publishes head. Entries of one packet are published together, and
// the consumer takes them in order, so a flow's order is preserved.
type handoff struct {
	tail       atomic.Uint32 // written by the producer
	_          [60]byte
	head       atomic.Uint32 // written by the consumer
	_          [60]byte
	cachedHead uint32 // producer's view of head
	pending    uint32 // producer: written, not yet published
	_          [56]byte
	cachedTail uint32 // consumer's view of tail
	ents       []handoffEntry
	mask       uint32
}

// handoffEntry is one TX descriptor, with the arrival time of its packet
// (0: unknown) for ordering.
type handoffEntry struct {
	desc  xsk.Desc
	stamp int64
}

func newHandoff(size int) *handoff {
	return &handoff{ents: make([]handoffEntry, size), mask: uint32(size - 1)}
}

// room is how many entries the producer may still write. It refreshes its
// view of the consumer's head only when the cached one shows less than a
// batch's worth, so callers may ask for a minimum and get a true answer.
func (h *handoff) room() uint32 {
	size := h.mask + 1
	if free := size - (h.tail.Load() + h.pending - h.cachedHead); free >= handoffLowWater {
		return free
	}
	h.cachedHead = h.head.Load()
	return size - (h.tail.Load() + h.pending - h.cachedHead)
}

// handoffLowWater is the free room below which room re-reads the head.
const handoffLowWater = 256

// put writes an entry; the caller checked room.
func (h *handoff) put(e handoffEntry) {
	h.ents[(h.tail.Load()+h.pending)&h.mask] = e
	h.pending++
}

// publish makes the written entries visible to the consumer.
func (h *handoff) publish() {
	if h.pending > 0 {
		h.tail.Store(h.tail.Load() + h.pending)
		h.pending = 0
	}
}

// peek returns how many entries are ready (up to max) and the first index.
func (h *handoff) peek(max uint32) (n, idx uint32) {
	idx = h.head.Load()
	n = h.cachedTail - idx
	if n == 0 {
		h.cachedTail = h.tail.Load()
		n = h.cachedTail - idx
	}
	return min(n, max), idx
}

func (h *handoff) at(idx uint32) *handoffEntry { return &h.ents[idx&h.mask] }

// release gives n read entries back to the producer.
func (h *handoff) release(n uint32) { h.head.Store(h.head.Load() + n) }
