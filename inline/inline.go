// Package inline owns the copy side of xdpfwd's TX paths: it copies small
// packets whole into 256-byte slots of the UMEM's inline zone, repacks
// scattered multi-buffer packets into adjacent chunks of a frag block, and
// returns those slots and blocks when the kernel completes them. A Builder
// does this for one worker; a Sender wraps one around its own socket for
// programs that build their own packets.
//
// The inline zone is the user-space counterpart of the premapped zone Eric
// Dumazet proposes on netdev for drivers behind an IOMMU, "a piece of
// coherent memory (128 or 256 bytes per entry in TX ring)" ("Re: [PATCH RFC
// 0/7] add socket to netdev page frag recycling support", 2021), into which
// small packets are copied whole ("[RFC net] tcp: Fix performance
// regression for request-response workloads", 2022): one contiguous run of
// slots, so thousands of small packets in flight touch a handful of pages
// (one, on 2 MiB pages), and the buffer a packet arrived in is recycled at
// once, while it is hot.
//
// # Concurrency
//
// A Builder belongs to one worker goroutine: its slot cache and packer are
// unguarded. Any worker may Release an address another worker's Builder
// produced, through its own Builder on the same region, once the kernel
// has returned it on a completion ring: a frag block's reference count is
// atomic, and a slot's ownership passed through the ring. A Sender is used
// by one goroutine at a time; it owns its region, socket and rings.
//
// What the kernel shares is the copy: the bytes written into a slot or a
// block become the kernel's when the TX descriptor that names them is
// published (txring.Ring.Submit), and must not be written again until the
// address comes back from the completion ring and is Released.
//
// A Builder never touches rings, never blocks, and never allocates per
// packet: an exhausted zone is reported (ok == false, or 0 descriptors) for
// the caller to fall back, never waited for.
package inline

import (
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Builder makes TX descriptors for one worker.
type Builder struct {
	mem    []byte
	region *umem.Region
	slots  *umem.Cache
	packer *umem.Packer
	Policy linearize.Policy
}

// NewBuilder returns a builder over r's inline and frag zones, with
// per-worker caches of cacheSize units. Packets copied into frag blocks
// start on packAlign boundaries: 64 (a cache line) in copy mode; the chunk
// size in zero-copy mode, where a descriptor may not cross into a page the
// device does not see as contiguous.
func NewBuilder(r *umem.Region, policy linearize.Policy, cacheSize, packAlign int) *Builder {
	if policy.ChunkSize <= 0 {
		policy.ChunkSize = r.ChunkSize()
	}
	b := &Builder{mem: r.Mem(), region: r, Policy: policy}
	if r.Inline.Len() == 0 {
		b.Policy.InlineMax = 0
	} else {
		b.slots = r.Inline.NewCache(cacheSize)
	}
	b.Policy.InlineMax = min(b.Policy.InlineMax, umem.InlineSlotSize)
	if r.Frags.Len() == 0 {
		b.Policy.FragBlocks = false
	} else {
		b.packer = r.Frags.NewPacker(max(cacheSize/64, 4), packAlign)
		b.Policy.FragBlocks = true
	}
	return b
}

// Inline copies pkt into a fresh slot, marked as going to the kernel's TX
// side, and returns its address. ok is false when the zone is exhausted.
func (b *Builder) Inline(pkt []byte) (addr uint64, ok bool) {
	if b.slots == nil || len(pkt) > umem.InlineSlotSize {
		return 0, false
	}
	if addr, ok = b.slots.Alloc(umem.KernelTX); ok {
		copy(b.mem[addr:addr+umem.InlineSlotSize], pkt)
	}
	return addr, ok
}

// InlineGather copies the data of descs (region offsets) into a fresh
// slot. ok is false when the zone is exhausted or the data did not all fit.
func (b *Builder) InlineGather(descs []xsk.Desc) (addr uint64, n int, ok bool) {
	if b.slots == nil {
		return 0, 0, false
	}
	if addr, ok = b.slots.Alloc(umem.KernelTX); !ok {
		return 0, 0, false
	}
	n = linearize.Gather(b.mem[addr:addr+umem.InlineSlotSize], b.mem, descs)
	if n != linearize.Total(descs) {
		b.slots.Free(addr, umem.KernelTX)
		return 0, 0, false
	}
	return addr, n, true
}

// Pack copies pkt into the current frag block and describes it as the
// fewest adjacent descriptors, written to out. It returns how many, or 0
// when there is no room (the caller falls back or drops).
func (b *Builder) Pack(pkt []byte, out []xsk.Desc) int {
	if b.packer == nil {
		return 0
	}
	chunk := b.Policy.ChunkSize
	k := linearize.Count(len(pkt), chunk)
	if k > len(out) {
		return 0
	}
	addr, ok := b.packer.Place(len(pkt), k)
	if !ok {
		return 0
	}
	copy(b.mem[addr:addr+uint64(len(pkt))], pkt)
	return linearize.Cut(out, addr, len(pkt), chunk)
}

// Repack copies a multi-buffer packet's descs into the current frag block
// as the fewest adjacent descriptors, written to out; 0 when there is no
// room.
func (b *Builder) Repack(descs, out []xsk.Desc) int {
	if b.packer == nil {
		return 0
	}
	total := linearize.Total(descs)
	chunk := b.Policy.ChunkSize
	k := linearize.Count(total, chunk)
	if k > len(out) {
		return 0
	}
	addr, ok := b.packer.Place(total, k)
	if !ok {
		return 0
	}
	if linearize.Gather(b.mem[addr:addr+uint64(total)], b.mem, descs) != total {
		// Descriptors outside the UMEM: give the references back.
		for range k {
			b.packer.Release(addr)
		}
		return 0
	}
	return linearize.Cut(out, addr, total, chunk)
}

// Release returns a completed TX address if it belongs to the inline or
// frag zone, and reports whether it did.
func (b *Builder) Release(addr uint64) bool {
	switch r := b.region; {
	case r.Inline.Contains(addr):
		b.slots.Free(addr, umem.KernelTX)
	case r.Frags.Contains(addr):
		b.packer.Release(addr)
	default:
		return false
	}
	return true
}

// Publish makes the builder's cache levels visible to occupancy readers.
func (b *Builder) Publish() {
	if b.slots != nil {
		b.slots.Publish()
	}
	if b.packer != nil {
		b.packer.Publish()
	}
}

// Close gives back the builder's cached slots and its current block.
func (b *Builder) Close() {
	if b.slots != nil {
		b.slots.Flush()
	}
	if b.packer != nil {
		b.packer.Close()
	}
}
