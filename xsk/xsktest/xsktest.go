// Package xsktest gives tests an AF_XDP socket without a kernel: an
// *xsk.Socket whose four rings live in ordinary memory, and the kernel's
// side of each ring — produce RX descriptors and completions, take fill
// addresses and TX descriptors — on the same producer and consumer words,
// under the same index protocol (sync/atomic) as the kernel's xsk_queue.h.
// Code under test uses the Socket as it would a bound one (its RX, TX,
// Fill and Comp rings, txring.New); the test drives the Ring fields.
//
// The kernel's side of a ring belongs to one goroutine at a time, as does
// the user's side; the two may run concurrently.
package xsktest

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// The layout of every ring: the three shared words on their own cache
// lines, then the entries, as the kernel lays out the rings it maps.
const (
	prodOff  = 0
	consOff  = 64
	flagsOff = 128
	descOff  = 192
)

var offsets = unix.XDPRingOffset{Producer: prodOff, Consumer: consOff, Flags: flagsOff, Desc: descOff}

// Socket is an in-memory socket and the kernel's side of its rings.
type Socket struct {
	// Socket is what the code under test uses. It has no file
	// descriptor: Kick, WakeRX and Stats fail with EBADF.
	Socket *xsk.Socket
	// The kernel's side: it produces on RX and Comp, consumes Fill and TX.
	RX, TX, Fill, Comp *Ring
}

// New returns a socket with RX and TX rings of ringSize descriptors and
// fill and completion rings of fillSize addresses (powers of two; 0:
// twice ringSize), every index starting at start: a start just short of
// 2^32 makes the indices wrap within a test.
func New(ringSize, fillSize, start uint32) *Socket {
	return NewRings(ringSize, ringSize, fillSize, start)
}

// NewRings is New with an RX ring of rxSize descriptors and a TX ring of
// txSize (xsk.Config.RXSize); rxSize 0 is txSize.
func NewRings(rxSize, txSize, fillSize, start uint32) *Socket {
	if fillSize == 0 {
		fillSize = 2 * txSize
	}
	if rxSize == 0 {
		rxSize = txSize
	}
	for _, n := range []uint32{rxSize, txSize, fillSize} {
		if n == 0 || n&(n-1) != 0 {
			panic("xsktest: ring sizes must be powers of two")
		}
	}
	desc := uint32(unsafe.Sizeof(xsk.Desc{}))
	s := &Socket{
		RX:   newRing(rxSize, desc, start),
		TX:   newRing(txSize, desc, start),
		Fill: newRing(fillSize, 8, start),
		Comp: newRing(fillSize, 8, start),
	}
	off := unix.XDPMmapOffsets{Rx: offsets, Tx: offsets, Fr: offsets, Cr: offsets}
	s.Socket = xsk.NewMemSocket(s.Fill.mem, s.Comp.mem, s.RX.mem, s.TX.mem, off, rxSize, txSize, fillSize)
	return s
}

// Ring is the kernel's side of one in-memory ring. As a producer (RX,
// completion) it writes entries past the published producer index and
// makes them visible with Publish; as a consumer (fill, TX) it reads
// published entries and hands them back as it takes them.
type Ring struct {
	mem  []byte
	size uint32
	elem uint32
	// prod is the kernel's producer index, published or not (producer
	// side); the consumer side keeps no private state.
	prod uint32
}

func newRing(size, elem, start uint32) *Ring {
	words := make([]uint64, (descOff+uint64(size)*uint64(elem))/8)
	r := &Ring{
		mem:  unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8),
		size: size,
		elem: elem,
		prod: start,
	}
	atomic.StoreUint32(r.word(prodOff), start)
	atomic.StoreUint32(r.word(consOff), start)
	return r
}

func (r *Ring) word(off uintptr) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

func (r *Ring) slot(idx uint32) unsafe.Pointer {
	return unsafe.Pointer(&r.mem[descOff+uintptr(idx&(r.size-1))*uintptr(r.elem)])
}

// Size is the number of entries.
func (r *Ring) Size() uint32 { return r.size }

// ProducerIndex and ConsumerIndex are the published indices.
func (r *Ring) ProducerIndex() uint32 { return atomic.LoadUint32(r.word(prodOff)) }
func (r *Ring) ConsumerIndex() uint32 { return atomic.LoadUint32(r.word(consOff)) }

// SetNeedWakeup sets or clears the ring's need_wakeup flag.
func (r *Ring) SetNeedWakeup(on bool) {
	var v uint32
	if on {
		v = unix.XDP_RING_NEED_WAKEUP
	}
	atomic.StoreUint32(r.word(flagsOff), v)
}

// room is how many entries the producer may still write (acquire: the
// consumer is done with the entries before its index).
func (r *Ring) room() uint32 { return r.size - (r.prod - r.ConsumerIndex()) }

// Room is how many entries the producer may still write.
func (r *Ring) Room() int { return int(r.room()) }

// Produce writes descriptors (an RX ring) after those already produced,
// as many as there is room for, and returns how many; they stay invisible
// to the consumer until Publish.
func (r *Ring) Produce(ds ...xsk.Desc) int {
	n := min(uint32(len(ds)), r.room())
	for _, d := range ds[:n] {
		*(*xsk.Desc)(r.slot(r.prod)) = d
		r.prod++
	}
	return int(n)
}

// ProduceAddrs is Produce for an address ring (completion).
func (r *Ring) ProduceAddrs(addrs ...uint64) int {
	n := min(uint32(len(addrs)), r.room())
	for _, a := range addrs[:n] {
		*(*uint64)(r.slot(r.prod)) = a
		r.prod++
	}
	return int(n)
}

// Publish makes what was produced visible (release), and reports how many
// entries it published.
func (r *Ring) Publish() int {
	n := r.prod - r.ProducerIndex()
	atomic.StoreUint32(r.word(prodOff), r.prod)
	return int(n)
}

// Ready is how many published entries the consumer has not released.
func (r *Ring) Ready() int { return int(r.ProducerIndex() - r.ConsumerIndex()) }

// Take reads up to max published descriptors (a TX ring), oldest first,
// and releases them to the producer.
func (r *Ring) Take(max int) []xsk.Desc {
	cons := r.ConsumerIndex()
	n := min(uint32(max), r.ProducerIndex()-cons)
	out := make([]xsk.Desc, n)
	for i := range n {
		out[i] = *(*xsk.Desc)(r.slot(cons + i))
	}
	atomic.StoreUint32(r.word(consOff), cons+n)
	return out
}

// TakeInto is Take into buf, up to its length, without allocating; it
// returns how many it took.
func (r *Ring) TakeInto(buf []xsk.Desc) int {
	cons := r.ConsumerIndex()
	n := min(uint32(len(buf)), r.ProducerIndex()-cons)
	for i := range n {
		buf[i] = *(*xsk.Desc)(r.slot(cons + i))
	}
	atomic.StoreUint32(r.word(consOff), cons+n)
	return int(n)
}

// TakeAddrsInto is TakeAddrs into buf, up to its length, without
// allocating; it returns how many it took.
func (r *Ring) TakeAddrsInto(buf []uint64) int {
	cons := r.ConsumerIndex()
	n := min(uint32(len(buf)), r.ProducerIndex()-cons)
	for i := range n {
		buf[i] = *(*uint64)(r.slot(cons + i))
	}
	atomic.StoreUint32(r.word(consOff), cons+n)
	return int(n)
}

// TakeAddrs is Take for an address ring (fill).
func (r *Ring) TakeAddrs(max int) []uint64 {
	cons := r.ConsumerIndex()
	n := min(uint32(max), r.ProducerIndex()-cons)
	out := make([]uint64, n)
	for i := range n {
		out[i] = *(*uint64)(r.slot(cons + i))
	}
	atomic.StoreUint32(r.word(consOff), cons+n)
	return out
}
