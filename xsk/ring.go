package xsk

import (
	"sync/atomic"
	"unsafe"
)

// This file and socket.go are the only ones in xdpfwd that touch memory
// shared with the kernel. The protocol, as in the kernel's xsk_queue.h and
// libxdp's xsk.h: each ring has one producer and one consumer; each side
// owns one index and only reads the other's. A side reads the other's
// index with acquire semantics (so the entries it publishes are visible)
// and publishes its own with release semantics (after writing or reading
// the entries). Go's sync/atomic operations are sequentially consistent,
// which is at least as strong as both. Indices are free-running uint32s;
// entries live at index & mask, so wrap-around is plain unsigned overflow.

// ring is one mmap'd AF_XDP ring. The shared words are typed atomics, so
// a plain, unordered access to them does not compile.
type ring struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	descs    unsafe.Pointer
	mask     uint32
	size     uint32
	mem      []byte // the whole mapping, for munmap
	// base is the UMEM's place in the process's address space of
	// descriptors (umem.Region.Base): entries hold the kernel's offsets,
	// the accessors below take and give the process's addresses.
	base uint64

	// cachedProd and cachedCons are this side's private copies, refreshed
	// from the shared indices only when they no longer tell enough. On a
	// producer cachedCons is kept at consumer+size, so free slots are
	// cachedCons-cachedProd, as libxdp does.
	cachedProd uint32
	cachedCons uint32
}

func newRing(mem []byte, prodOff, consOff, flagsOff, descOff uint64, size uint32) ring {
	base := unsafe.Pointer(&mem[0])
	return ring{
		producer: (*atomic.Uint32)(unsafe.Add(base, prodOff)),
		consumer: (*atomic.Uint32)(unsafe.Add(base, consOff)),
		flags:    (*atomic.Uint32)(unsafe.Add(base, flagsOff)),
		descs:    unsafe.Add(base, descOff),
		mask:     size - 1,
		size:     size,
		mem:      mem,
	}
}

// Size is the number of entries in the ring.
func (r *ring) Size() uint32 { return r.size }

// NeedsWakeup reports whether the kernel asked, through the ring's flags
// word, to be woken by a syscall before it will touch the ring again.
func (r *ring) NeedsWakeup() bool {
	// The kernel sets and clears the flag with plain stores under its own
	// locking; an atomic load is enough to see its latest value.
	return r.flags.Load()&xdpRingNeedWakeup != 0
}

// Producer is the user-space producer side of a ring (fill or TX).
type Producer struct{ ring }

func (p *Producer) initProducer() {
	p.cachedProd = p.producer.Load()
	p.cachedCons = p.consumer.Load() + p.size
}

// Free returns how many entries can be reserved, refreshing the kernel's
// consumer index only when fewer than want are known to be free.
func (p *Producer) Free(want uint32) uint32 {
	free := p.cachedCons - p.cachedProd
	if free >= want {
		return free
	}
	// Acquire: the kernel has finished with entries before its consumer.
	p.cachedCons = p.consumer.Load() + p.size
	return p.cachedCons - p.cachedProd
}

// Reserve claims up to n entries and returns how many it got and the index
// of the first. Entries are written with SetAddr/SetDesc, then published
// with Submit.
func (p *Producer) Reserve(n uint32) (got, idx uint32) {
	got = min(n, p.Free(n))
	idx = p.cachedProd
	p.cachedProd += got
	return got, idx
}

// Cancel gives back the last n reserved, unsubmitted entries.
func (p *Producer) Cancel(n uint32) { p.cachedProd -= n }

// Submit publishes the first n reserved entries to the kernel.
func (p *Producer) Submit(n uint32) {
	// Release: entries written before this store are visible to the
	// kernel once it reads the new producer index. Only we write it.
	p.producer.Store(p.producer.Load() + n)
}

// Pending is the number of submitted entries the kernel has not consumed.
func (p *Producer) Pending() uint32 {
	return p.producer.Load() - p.consumer.Load()
}

// Consumer is the user-space consumer side of a ring (RX or completion).
type Consumer struct{ ring }

func (c *Consumer) initConsumer() {
	c.cachedCons = c.consumer.Load()
	c.cachedProd = c.producer.Load()
}

// Avail returns how many entries are ready, up to max, refreshing the
// kernel's producer index only when the cached one shows none.
func (c *Consumer) Avail(max uint32) uint32 {
	n := c.cachedProd - c.cachedCons
	if n == 0 {
		// Acquire: entries before the kernel's producer index are written.
		c.cachedProd = c.producer.Load()
		n = c.cachedProd - c.cachedCons
	}
	return min(n, max)
}

// Peek claims up to max ready entries and returns how many and the index
// of the first. Read them with Addr/Desc, then hand them back with Release.
func (c *Consumer) Peek(max uint32) (n, idx uint32) {
	n = c.Avail(max)
	idx = c.cachedCons
	c.cachedCons += n
	return n, idx
}

// Release tells the kernel that n peeked entries have been read.
func (c *Consumer) Release(n uint32) {
	// Release: our reads of the entries happen before the kernel may
	// overwrite them. Only we write the consumer index.
	c.consumer.Store(c.consumer.Load() + n)
}

// AddrRing entries (fill and completion rings) are u64 UMEM offsets.

// Addr returns the fill/completion entry at idx.
func (c *Consumer) Addr(idx uint32) uint64 {
	return *(*uint64)(unsafe.Add(c.descs, uintptr(idx&c.mask)*8)) + c.base
}

// SetAddr writes the fill/completion entry at idx.
func (p *Producer) SetAddr(idx uint32, addr uint64) {
	*(*uint64)(unsafe.Add(p.descs, uintptr(idx&p.mask)*8)) = addr - p.base
}

// Desc is a packet descriptor of an RX or TX ring (struct xdp_desc).
type Desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// Desc returns the RX/TX entry at idx.
func (c *Consumer) Desc(idx uint32) Desc {
	d := *(*Desc)(unsafe.Add(c.descs, uintptr(idx&c.mask)*unsafe.Sizeof(Desc{})))
	d.Addr += c.base // an unaligned-mode offset in the high bits is kept (Flat)
	return d
}

// SetDesc writes the RX/TX entry at idx.
func (p *Producer) SetDesc(idx uint32, d Desc) {
	d.Addr -= p.base
	*(*Desc)(unsafe.Add(p.descs, uintptr(idx&p.mask)*unsafe.Sizeof(Desc{}))) = d
}

// Unaligned-chunk mode lets the kernel return an address as a base in the
// low 48 bits plus an offset in the high 16 (XSK_UNALIGNED_BUF_OFFSET_SHIFT).
const (
	unalignedOffsetShift = 48
	unalignedAddrMask    = 1<<unalignedOffsetShift - 1
)

// Flat turns a descriptor address into a plain region offset, whichever
// encoding the kernel used.
func Flat(addr uint64) uint64 {
	return addr&unalignedAddrMask + addr>>unalignedOffsetShift
}

// PktContd in a descriptor's Options marks a multi-buffer packet that
// continues in the next descriptor (XDP_PKT_CONTD).
const PktContd = 1

// Cancel hands back the last n peeked, unreleased entries: they will be
// peeked again. Used to leave a multi-buffer packet whose tail did not fit
// in the batch for the next round.
func (c *Consumer) Cancel(n uint32) { c.cachedCons -= n }

// Next returns the next ready entry of an RX ring without claiming it.
func (c *Consumer) Next() (Desc, bool) {
	if c.Avail(1) == 0 {
		return Desc{}, false
	}
	return c.Desc(c.cachedCons), true
}

// Empty reports, from any goroutine, whether the ring holds nothing the
// consumer has not released: both indices are read atomically.
func (c *ring) Empty() bool {
	return c.producer.Load() == c.consumer.Load()
}

// Outstanding appends to buf the addresses of the entries submitted to
// the kernel and not consumed by it yet, [consumer, producer): what a
// socket taken out of service (no longer redirected to, no longer kicked)
// still holds on this ring. desc: the ring holds descriptors (TX), not
// addresses (fill).
func (p *Producer) Outstanding(buf []uint64, desc bool) []uint64 {
	return p.span(buf, p.consumer.Load(), p.producer.Load(), desc)
}

// Queued is how many entries the kernel produced and the consumer has not
// consumed, read from the shared indexes (not the cached ones).
func (c *Consumer) Queued() uint32 { return c.producer.Load() - c.consumer.Load() }

// Unread appends to buf the addresses of the entries the kernel produced
// and the consumer has not consumed, [consumer, producer). desc: the ring
// holds descriptors (RX), not addresses (completion).
func (c *Consumer) Unread(buf []uint64, desc bool) []uint64 {
	return c.span(buf, c.consumer.Load(), c.producer.Load(), desc)
}

func (r *ring) span(buf []uint64, from, to uint32, desc bool) []uint64 {
	for i := from; i != to; i++ {
		if desc {
			buf = append(buf, (*Desc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(Desc{}))).Addr+r.base)
		} else {
			buf = append(buf, *(*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))+r.base)
		}
	}
	return buf
}
