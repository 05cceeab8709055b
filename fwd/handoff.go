package fwd

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

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
	announce   bool   // producer: published, the owner not yet woken
	_          [55]byte
	cachedTail uint32 // consumer's view of tail
	ents       []handoffEntry
	mask       uint32
	// to is the consumer's waker: publish rouses it if it sleeps; owner
	// the consumer, in whose place the producer may send what it
	// published instead (deliver).
	to    *waker
	owner *worker
	// from is the RX port whose packets the ring carries; read by the
	// consumer when a link is removed (links.go).
	from *port
}

// handoffEntry is one TX descriptor, with the arrival time of its packet
// (0: unknown) for ordering, and the time it was handed off, for the hold
// bound: a packet may have waited in a backlogged RX ring far longer than
// it waits here, and only the wait here is the merge's doing.
type handoffEntry struct {
	desc   xsk.Desc
	stamp  int64
	queued int64
}

func newHandoff(size int, to *waker) *handoff {
	if size <= 0 || size&(size-1) != 0 {
		panic(fmt.Sprintf("handoff ring of %d entries: not a power of two", size))
	}
	return &handoff{ents: make([]handoffEntry, size), mask: uint32(size - 1), to: to}
}

// newHandoffTo makes a handoff ring to worker w.
func newHandoffTo(size int, w *worker) *handoff {
	h := newHandoff(size, w.wake)
	h.owner = w
	return h
}

// deliver sees to what the producer published: sent by the producer in
// the owner's place when the owner sleeps (standin.go), else, or when
// some of it must wait for its turn, by the owner, woken if it sleeps.
func (h *handoff) deliver() {
	if h.owner != nil && h.owner.standIn() {
		return
	}
	h.to.wake()
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

// publish makes the written entries visible to the consumer and reports
// whether there were any.
func (h *handoff) publish() bool {
	if h.pending == 0 {
		return false
	}
	h.tail.Store(h.tail.Load() + h.pending)
	h.pending = 0
	return true
}

// sync refreshes the consumer's view of the tail; fresh then reports
// whether entries were published since.
func (h *handoff) sync()       { h.cachedTail = h.tail.Load() }
func (h *handoff) fresh() bool { return h.tail.Load() != h.cachedTail }

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

// waker rouses a worker sleeping in ppoll(2): an eventfd in its poll set,
// written by a producer only while the worker says it sleeps, so busy
// workers make no syscall per packet. The sleeper stores sleeping before
// its last look at the rings; a producer publishes before it loads
// sleeping (both sequentially consistent): one of them sees the other.
type waker struct {
	sleeping atomic.Bool // set by the owner around ppoll; cleared by a waker
	// idle is set by the owner around ppoll and by nobody else: while it
	// holds, the owner has no packet in its hands (the merge's watermark
	// relies on it; sleeping, which a waker clears before the owner has
	// woken, cannot tell).
	idle  atomic.Bool
	fd    int
	wakes atomic.Uint64 // eventfd writes, for the stats
	buf   [8]byte       // owner's read scratch
}

// wakeOne is the eventfd increment, shared so no write allocates.
var wakeOne = func() []byte {
	b := make([]byte, 8)
	binary.NativeEndian.PutUint64(b, 1)
	return b
}()

func newWaker() (*waker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &waker{fd: fd}, nil
}

// wake rouses the owner if it sleeps; only the first caller writes.
func (k *waker) wake() {
	if k.sleeping.Load() && k.sleeping.CompareAndSwap(true, false) {
		k.wakes.Add(1)
		unix.Write(k.fd, wakeOne)
	}
}

// drain resets the eventfd after a wake-up; owner only.
func (k *waker) drain() { unix.Read(k.fd, k.buf[:]) }

func (k *waker) close() error {
	if k.fd < 0 {
		return nil
	}
	err := unix.Close(k.fd)
	k.fd = -1
	return err
}
