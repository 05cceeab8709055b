package umem

import (
	"sync/atomic"
)

// Packer places copied packets into frag blocks, the way the kernel's
// page_frag allocator carves a large page: one current block per worker,
// filled at increasing offsets, and a per-block reference count so a block
// returns to the pool once every descriptor placed in it has completed.
// The packer holds one reference on its current block (page_frag's bias),
// so a block is never freed while it is still being filled.
//
// A Packer is used by one worker; Release may be called by whichever
// worker reaped the completion, through its own Packer on the same zone.
type Packer struct {
	z     *Zone
	cache *Cache
	align uint64
	cur   uint64 // region offset of the current block
	off   uint64 // next free offset in it
	has   bool
}

// NewPacker returns a packer over z, a frag zone, that starts every packet
// on an align boundary (the UMEM chunk size: descriptors are then cut on
// chunk and page boundaries, which zero-copy drivers require).
func (z *Zone) NewPacker(cacheSize, align int) *Packer {
	z.mu.Lock()
	if z.refs == nil {
		z.refs = make([]atomic.Int32, z.n)
	}
	z.mu.Unlock()
	return &Packer{z: z, cache: z.NewCache(cacheSize), align: uint64(align)}
}

// Place reserves n bytes for a packet that will leave as descs descriptors
// and returns the region offset of its first byte. ok is false when n does
// not fit in a block or the zone is exhausted: the caller falls back.
func (p *Packer) Place(n, descs int) (addr uint64, ok bool) {
	size := (uint64(n) + p.align - 1) / p.align * p.align
	if p.z.n == 0 || size > p.z.unit {
		return 0, false
	}
	if !p.has || p.off+size > p.z.unit {
		if !p.next() {
			return 0, false
		}
	}
	addr = p.cur + p.off
	p.off += size
	p.z.refs[(p.cur-p.z.base)>>p.z.shift].Add(int32(descs))
	return addr, true
}

// next retires the current block and takes a fresh one.
func (p *Packer) next() bool {
	p.drop()
	a, ok := p.cache.Alloc(Held)
	if !ok {
		return false
	}
	p.z.refs[(a-p.z.base)>>p.z.shift].Store(1) // the packer's own reference
	p.cur, p.off, p.has = a, 0, true
	return true
}

func (p *Packer) drop() {
	if p.has {
		p.has = false
		p.unref(p.cur)
	}
}

// Release drops the reference of one completed descriptor at addr.
func (p *Packer) Release(addr uint64) {
	if !p.z.Contains(addr) {
		p.z.violations.Add(1)
		return
	}
	p.unref(addr)
}

func (p *Packer) unref(addr uint64) {
	i := (addr - p.z.base) >> p.z.shift
	switch v := p.z.refs[i].Add(-1); {
	case v == 0:
		p.cache.Free(p.z.base+i<<p.z.shift, Held)
	case v < 0:
		p.z.violations.Add(1)
		p.z.refs[i].Store(0)
	}
}

// Publish makes the packer's cache level visible to occupancy readers.
func (p *Packer) Publish() { p.cache.Publish() }

// Close gives up the current block; it is freed once its descriptors
// complete (at once, if none are in flight).
func (p *Packer) Close() {
	p.drop()
	p.cache.Flush()
}

// ReclaimReferenced frees, once the sockets are closed and no packer is in
// use, every block still referenced by descriptors the kernel never
// completed, and returns how many descriptor references that dropped.
func (z *Zone) ReclaimReferenced() int {
	if z.refs == nil {
		return 0
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	n := 0
	for i := range z.refs {
		if r := z.refs[i].Swap(0); r > 0 && z.state[i] == Held {
			n += int(r)
			z.state[i] = Free
			z.pool = append(z.pool, uint32(i))
		}
	}
	return n
}
