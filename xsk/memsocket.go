package xsk

import "golang.org/x/sys/unix"

// NewMemSocket returns a Socket that no kernel socket backs, for tests: its
// four rings lie in memory the caller owns, each laid out as the kernel lays
// out a ring it maps — the producer, consumer and flags words and the
// entries at the offsets in off (as XDP_MMAP_OFFSETS reports them), RX of
// rxSize descriptors, TX of txSize, fill and completion of fillSize
// addresses, all powers of two. The rings start from the indices already in that
// memory. Whatever plays the kernel's side must follow the protocol in
// ring.go on the same words, with sync/atomic. The memory must be 8-byte
// aligned and stays the caller's: Close unmaps nothing. The socket has no
// file descriptor (FD is -1), so Kick, WakeRX and Stats fail with EBADF,
// unless SetMemHooks says what Kick and WakeRX do.
//
// Package xsktest builds such sockets and plays the kernel's side.
func NewMemSocket(fill, comp, rx, tx []byte, off unix.XDPMmapOffsets, rxSize, txSize, fillSize uint32) *Socket {
	s := &Socket{fd: -1, cfg: Config{RingSize: txSize, RXSize: rxSize, FillSize: fillSize}}
	memRing := func(mem []byte, o unix.XDPRingOffset, n uint32) ring {
		r := newRing(mem, o.Producer, o.Consumer, o.Flags, o.Desc, n)
		r.mem = nil // not a mapping: Close must not unmap it
		return r
	}
	s.Fill.ring = memRing(fill, off.Fr, fillSize)
	s.Comp.ring = memRing(comp, off.Cr, fillSize)
	s.RX.ring = memRing(rx, off.Rx, rxSize)
	s.TX.ring = memRing(tx, off.Tx, txSize)
	s.Fill.initProducer()
	s.TX.initProducer()
	s.Comp.initConsumer()
	s.RX.initConsumer()
	return s
}

// MemHooks play the kernel's part in a memory socket's calls: Kick stands
// for the sendto that has the kernel process the TX ring (its error is
// Kick's: ENETDOWN for a link that is down), WakeRX for the recvfrom that
// wakes a driver waiting on the fill ring. A nil field keeps EBADF.
type MemHooks struct {
	Kick   func() error
	WakeRX func()
}

// SetMemHooks sets what Kick and WakeRX do on a socket of NewMemSocket's,
// before the socket is used. The hooks run on the goroutine that calls
// Kick or WakeRX, concurrently with whatever else plays the kernel's side.
func (s *Socket) SetMemHooks(h MemHooks) { s.mem = &h }

// SetMemBinding sets, on a socket of NewMemSocket's before it is used,
// what the kernel's bind sets on a real one: the place of its UMEM in the
// process's address space (umem.Region.Base: the rings then hold the
// UMEM's own offsets, as the kernel's do) and whether it is bound in
// zero-copy mode.
func (s *Socket) SetMemBinding(base uint64, zeroCopy bool) {
	for _, r := range []*ring{&s.Fill.ring, &s.Comp.ring, &s.RX.ring, &s.TX.ring} {
		r.base = base
	}
	s.zeroCopy = zeroCopy
}
