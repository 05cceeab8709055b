// Package rxring owns the receive side of one AF_XDP socket: its fill
// ring, which user space produces, and its RX ring, which the kernel
// produces. It lends free frames to the kernel through the fill ring,
// takes received packets off the RX ring whole (a multi-buffer packet is
// one chain of descriptors, never split across two batches), checks every
// descriptor before anything follows it, and puts frames whose data was
// copied or dropped straight back on the fill ring while they are hot.
// It is txring's counterpart: txring owns the TX and completion rings.
//
// # Ownership of frames
//
// Every frame this package touches is a unit of the frames zone of a
// umem.Region, and moves through umem's bookkeeping only here and in the
// caller's TX layout code: Refill takes free frames from the caller's
// umem.Cache into state KernelRX; Next moves the frames of a received
// packet from KernelRX to Held, after which the caller owns them and must
// send them (its layout code moves them to KernelTX), or give them back
// with Recycle, which returns them to KernelRX on the fill ring (or, if
// the fill ring holds its lend or is full, to the cache as Free). A
// descriptor outside the zone is never followed; one that runs past the
// end of its frame is not sent, and its frame is recycled.
//
// # Concurrency
//
// A Ring has a single owner: one goroutine at a time calls Refill, Peek,
// More, Next, Recycle, RecycleChain, Release and Head, which use the xsk
// rings' cached indices and unguarded batch state, and the umem.Cache the
// Ring was given, which the owner may share among all the Rings it owns. Other
// goroutines may call Empty (both RX indices loaded atomically) and read
// the counters (atomics, added to once per batch or per event). The
// socket's TX and completion rings are not the Ring's and may be owned by
// another goroutine.
//
// Both rings are shared with the kernel through xsk's index protocol: the
// kernel writes the RX producer index (release) after writing the
// descriptors and the packet bytes; Peek loads it (acquire); Release
// stores the RX consumer index (release) once every descriptor of the
// batch has been read, after which the kernel may overwrite them. The
// Ring writes the fill producer index (release, once per Refill and once
// per Release) after writing the addresses; the kernel writes the fill
// consumer index, which the Ring loads (acquire) only when its cached copy
// shows too little room. The RX and fill flags words (need_wakeup) are
// written by the kernel and loaded here atomically.
//
// It never allocates, never blocks, and makes no syscall per packet:
// Refill makes one recvfrom when the fill ring asks for a wake-up. It
// never reads or writes packet bytes, and never hands one frame to the
// kernel twice: a frame goes on the fill ring only from the Cache (Free)
// or from Recycle (Held), each checked by the zone.
package rxring

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// MaxDescs is the most descriptors a packet may have and still be
// returned by Next: the kernel's limit for one packet on a TX ring
// (linearize.MaxDescs, MAX_SKB_FRAGS + 1). A longer packet is dropped
// whole, since sending its head and reading its tail as new packets would
// put payload where an Ethernet header is expected.
const MaxDescs = linearize.MaxDescs

// Ring is the fill and RX ring pair of one socket.
type Ring struct {
	s      *xsk.Socket
	rx     *xsk.Consumer
	fill   *xsk.Producer
	zone   *umem.Zone
	frames *umem.Cache
	unit   uint64 // zone's unit size

	// The batch Peek claimed: n descriptors from idx; k is the next one
	// Next reads.
	idx, n, k uint32
	// recycled counts fill slots reserved and written by Recycle since
	// the last Release; fillFull is set once Recycle found no room, so the
	// rest of the batch goes to the cache without re-reading the kernel's
	// index.
	recycled uint32
	fillFull bool
	// room is how many Recycle may put on the fill ring this batch
	// before it holds the lend, read once a batch (roomKnown).
	room      uint32
	roomKnown bool
	// This batch's drops, published by Release.
	invalid, tooLong uint64

	// lend is how many frames Refill keeps on the fill ring, between
	// lendFloor and the ring's size (SetLend): a burst doubles it, calm
	// traffic halves it down to lendKeep, a flood down to lendFloor
	// (adapt). onRing is what the last Refill left on the ring, since
	// which submitted more went on it (recycled); calm counts the frames
	// the kernel took since the lend last changed while half of it or
	// more stayed on the ring. A ring left short by an empty cache does
	// not grow: the frames it lacks are not a burst's.
	lend, lendFloor, lendKeep uint32
	onRing, submitted         uint32
	calm                      uint32
	short                     bool // the last Refill ran out of frames

	// FillShort counts refills cut short because the cache had no free
	// frame (the kernel then drops at rx_fill_ring_empty); FillWakeups the
	// recvfrom calls made because the fill ring asked for a wake-up;
	// Invalid the packets dropped for a descriptor outside the zone or
	// past the end of its frame; TooLong those of more than MaxDescs
	// descriptors. Atomic so a stats reader may load them while the owner
	// runs.
	FillShort   atomic.Uint64
	FillWakeups atomic.Uint64
	Invalid     atomic.Uint64
	TooLong     atomic.Uint64
	// Lend is lend, for stats readers; LendGrew counts its doublings.
	Lend     atomic.Uint32
	LendGrew atomic.Uint64
}

// Calm traffic halves an adaptive lend once the kernel has taken
// calmLends times the lend while at least half of it stayed on the fill
// ring: a link busy in bursts keeps its frames, one that calmed down
// gives them back to the cache as the kernel uses them. Slowly: a lend
// grows only after the ring ran low, often empty. Three floods of
// 300,000 datagrams from a sender sharing the worker's CPUs (its stalls
// growing the lend) lost 5,697 to 9,777 of them to an empty fill ring
// with 8 (three runs), which halved the lend again within milliseconds,
// and 432 to 3,350 with 64 (five runs), while any traffic below the
// flood halved a lend below what it keeps (SetLend); 0 to 373 with 64
// once only a flood did (three), none with the whole ring always lent.
const calmLends = 64

// New wraps the receive side of s, lending the kernel frames from frames,
// a cache of the frames zone of the region s is bound to.
func New(s *xsk.Socket, frames *umem.Cache) *Ring {
	z := frames.Zone()
	r := &Ring{s: s, rx: &s.RX, fill: &s.Fill, zone: z, frames: frames, unit: uint64(z.UnitSize())}
	r.SetLend(0, 0)
	return r
}

// SetLend makes Refill keep at least keep frames on the fill ring, more
// while the link takes bursts: a Refill that finds the kernel took three
// quarters of the lend or more since the last, a quarter or less left,
// doubles it, up to the ring's size; calm traffic halves it again, down
// to keep. Only a flood (Refills that each find half a batch or more
// taken) takes it below keep, down to floor: a ring the kernel copies
// into as fast as it can is better short, its frames still in cache,
// while one at a lower rate keeps keep for a worker that stalls. A
// keep of 0 or above the ring's size is the ring's size; a floor of 0 or
// above keep is keep. New's lends the ring whole, always.
func (r *Ring) SetLend(floor, keep uint32) {
	if keep == 0 || keep > r.fill.Size() {
		keep = r.fill.Size()
	}
	if floor == 0 || floor > keep {
		floor = keep
	}
	r.lendFloor, r.lendKeep = floor, keep
	r.lend = keep
	r.calm = 0
	r.Lend.Store(r.lend)
}

// adapt moves the lend on what the kernel took since the last Refill,
// which found onRing left on the fill ring; batch is a worker's batch,
// of which half taken between two Refills is a flood.
func (r *Ring) adapt(onRing, batch uint32) {
	taken := uint32(0)
	if was := r.onRing + r.submitted; was > onRing { // an adopted ring's first Refill knew nothing before
		taken = was - onRing
	}
	r.submitted = 0
	switch {
	case r.lendFloor == r.fill.Size():
	case taken >= r.lend-r.lend/4 && onRing <= r.lend/4 && r.lend < r.fill.Size() && !r.short:
		r.lend *= 2
		r.calm = 0
		r.Lend.Store(r.lend)
		r.LendGrew.Add(1)
	case onRing >= r.lend/2 && (r.lend > r.lendKeep || r.lend > r.lendFloor && taken >= batch/2):
		r.calm += taken
		if r.calm >= calmLends*r.lend {
			r.lend /= 2
			r.calm = 0
			r.Lend.Store(r.lend)
		}
	}
}

// Socket returns the socket the ring belongs to.
func (r *Ring) Socket() *xsk.Socket { return r.s }

// Refill tops the fill ring up to the lend (SetLend) with frames from the
// cache, if at least atLeast are missing (a smaller refill is not worth
// the store; a lend smaller than that is refilled once empty), and wakes
// the kernel if the fill ring asks for it. A cache that runs dry is
// counted in FillShort.
func (r *Ring) Refill(atLeast uint32) {
	fill := r.fill
	onRing := fill.Pending()
	r.adapt(onRing, atLeast)
	r.onRing = onRing
	if onRing >= r.lend || r.lend-onRing < min(atLeast, r.lend) {
		return
	}
	want := r.lend - onRing
	if r.short = r.lendMore(want) < want; r.short {
		r.FillShort.Add(1)
	}
	r.wakeFill()
}

// Brace tops the fill ring up to n frames (at most its size) at once,
// and the lend to n if it was less: for a pause in which its owner will
// refill nothing (parked for a link change or a handover), so the kernel
// may go on receiving as long as n frames last, and for the moments
// after it, when the owner catches up. A flood lowers the lend again as
// it would have (SetLend). A cache without n frames lends what it has,
// uncounted: nothing was dropped. Like Refill, it is called between
// batches (after Release).
func (r *Ring) Brace(n uint32) {
	n = min(n, r.fill.Size())
	if r.lend < n {
		r.lend, r.calm = n, 0
		r.Lend.Store(r.lend)
	}
	if onRing := r.fill.Pending(); onRing < n {
		r.lendMore(n - onRing)
		r.wakeFill()
	}
}

// lendMore puts up to n free frames from the cache on the fill ring and
// publishes them; it returns how many: fewer when the cache runs dry.
func (r *Ring) lendMore(n uint32) uint32 {
	fill := r.fill
	n, idx := fill.Reserve(n)
	k := uint32(0)
	for ; k < n; k++ {
		addr, ok := r.frames.Alloc(umem.KernelRX)
		if !ok {
			break
		}
		fill.SetAddr(idx+k, addr)
	}
	fill.Cancel(n - k)
	if k > 0 {
		fill.Submit(k)
		r.submitted += k
	}
	return k
}

// FillWanted reports whether the fill ring asks for a wake-up: a
// zero-copy driver that ran out of frames waits for one (a sendto, a
// recvfrom or a poll of the socket) before it takes those lent since. Its
// owner's sleep then polls the socket (fwd's waitSet).
func (r *Ring) FillWanted() bool { return r.fill.NeedsWakeup() }

// wakeFill wakes the kernel if the fill ring asks for it.
func (r *Ring) wakeFill() {
	if r.fill.NeedsWakeup() {
		r.FillWakeups.Add(1)
		r.s.WakeRX()
	}
}

// Peek claims up to max descriptors of the RX ring, trimmed to whole
// packets, for Next to read, and returns how many. A first packet longer
// than max (a multi-buffer packet of many frames) is claimed whole,
// however long (the kernel publishes a packet's descriptors together), if
// room can take it or it is too long to send at all (more than MaxDescs);
// else nothing is claimed until there is room. Every claimed descriptor
// must be read with Next before Release.
func (r *Ring) Peek(max, room uint32) uint32 {
	rx := r.rx
	n, idx := rx.Peek(max)
	end := n
	for end > 0 && rx.Desc(idx+end-1).Options&xsk.PktContd != 0 {
		end--
	}
	if end == 0 && n > 0 {
		rx.Cancel(n)
		n, idx = rx.Peek(rx.Size())
		for k := range n {
			if rx.Desc(idx+k).Options&xsk.PktContd == 0 {
				if k+1 <= room || k+1 > MaxDescs {
					end = k + 1
				}
				break
			}
		}
	}
	rx.Cancel(n - end)
	r.idx, r.n, r.k = idx, end, 0
	return end
}

// More reports whether the batch Peek claimed has a packet Next has not
// read.
func (r *Ring) More() bool { return r.k < r.n }

// Next reads the next packet of the batch: it appends its descriptors,
// with plain region offsets (xsk.Flat), to chain, whose capacity must be
// at least MaxDescs, and moves their frames from the kernel's side to the
// caller (KernelRX to Held). It returns the chain, the packet's length in
// bytes, and whether the caller may use it. A packet with a descriptor
// outside the frames zone or past the end of its frame, or of more than
// MaxDescs descriptors, is dropped and counted (Invalid, TooLong): ok is
// false, and its frames are already recycled.
func (r *Ring) Next(chain []xsk.Desc) (_ []xsk.Desc, total int, ok bool) {
	chain = chain[:0]
	valid, count := true, 0
	for r.k < r.n {
		d := r.rx.Desc(r.idx + r.k)
		r.k++
		d.Addr = xsk.Flat(d.Addr)
		total += int(d.Len)
		count++
		inZone := r.zone.Contains(d.Addr)
		if inZone {
			r.zone.Move(d.Addr, umem.KernelRX, umem.Held)
		}
		if !inZone || d.Addr+uint64(d.Len) > r.zone.UnitAddr(d.Addr)+r.unit {
			valid = false
		}
		if count <= MaxDescs {
			chain = append(chain, d)
		} else if inZone {
			r.Recycle(d.Addr)
		}
		if d.Options&xsk.PktContd == 0 {
			break
		}
	}
	switch {
	case !valid:
		r.invalid++
	case count > MaxDescs:
		r.tooLong++
	default:
		return chain, total, true
	}
	r.RecycleChain(chain)
	return chain, total, false
}

// Recycle puts the Held frame holding addr (anywhere inside it) back on
// the fill ring, published by the next Release; if the fill ring holds
// the lend already, or is full, the frame goes to the cache, whose
// newest frame Refill lends next. Use it for frames whose data was
// copied, or whose packet was dropped, so they go back while still hot.
// An address outside the zone is ignored: it was never the caller's.
func (r *Ring) Recycle(addr uint64) {
	if !r.zone.Contains(addr) {
		return
	}
	addr = r.zone.UnitAddr(addr)
	if r.recycleRoom() {
		if got, idx := r.fill.Reserve(1); got == 1 {
			r.zone.Move(addr, umem.Held, umem.KernelRX)
			r.fill.SetAddr(idx, addr)
			r.recycled++
			return
		}
		r.fillFull = true
	}
	r.frames.Free(addr, umem.Held)
}

// recycleRoom reports whether a recycled frame may go on the fill ring:
// it is not full, and it holds less than the lend. What it holds is read
// from the kernel's index once a batch, and only under a lend smaller
// than the ring (SetLend): a ring lent whole takes what fits.
func (r *Ring) recycleRoom() bool {
	if r.fillFull {
		return false
	}
	if r.lend == r.fill.Size() {
		return true
	}
	if !r.roomKnown {
		r.room = r.lend - min(r.lend, r.fill.Pending())
		r.roomKnown = true
	}
	return r.recycled < r.room
}

// RecycleChain recycles the frames of every descriptor in chain.
func (r *Ring) RecycleChain(chain []xsk.Desc) {
	for _, d := range chain {
		r.Recycle(d.Addr)
	}
}

// Release hands the batch's RX descriptors back to the kernel, publishes
// the frames recycled since the last Release on the fill ring, and adds
// the batch's drops to the counters.
func (r *Ring) Release() {
	if r.n > 0 {
		r.rx.Release(r.n)
		r.n, r.k = 0, 0
	}
	if r.recycled > 0 {
		r.fill.Submit(r.recycled)
		r.submitted += r.recycled
		r.recycled = 0
	}
	r.fillFull, r.roomKnown = false, false
	if r.invalid != 0 {
		r.Invalid.Add(r.invalid)
		r.invalid = 0
	}
	if r.tooLong != 0 {
		r.TooLong.Add(r.tooLong)
		r.tooLong = 0
	}
}

// Rejects returns how many packets of the current batch Next refused as
// invalid and as too long (both start again at zero after Release).
func (r *Ring) Rejects() (invalid, tooLong uint64) { return r.invalid, r.tooLong }

// Head returns the first descriptor on the RX ring not yet claimed, with
// a plain region offset, without claiming it; ok is false when there is
// none or its address is outside the frames zone (never to be followed).
func (r *Ring) Head() (d xsk.Desc, ok bool) {
	d, ok = r.rx.Next()
	if !ok {
		return d, false
	}
	d.Addr = xsk.Flat(d.Addr)
	return d, r.zone.Contains(d.Addr)
}

// Empty reports, from any goroutine, whether the RX ring holds anything
// the owner has not released.
func (r *Ring) Empty() bool { return r.rx.Empty() }

// Ready reports, to the ring's owner, whether a descriptor waits to be
// read: its cached view first, the kernel's producer index only when that
// shows none.
func (r *Ring) Ready() bool { return r.rx.Avail(1) > 0 }

// Lent appends to buf the frames the kernel still holds on the ring's
// socket: on the fill ring, not taken yet, and on the RX ring, not read
// yet (state umem.KernelRX). Call it once the socket is out of service
// (its program no longer redirects to it) and before closing it: in copy
// mode these are all the frames the socket holds, which closing it gives
// back.
func (r *Ring) Lent(buf []uint64) []uint64 {
	buf = r.fill.Outstanding(buf, false)
	return r.rx.Unread(buf, true)
}
