package umem

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// State is the place a unit is in. Exactly one at a time.
type State uint8

const (
	// Free: in the zone's pool or a worker's cache.
	Free State = iota
	// KernelRX: given to the kernel through a fill ring; it comes back on an
	// RX ring (or is released when the socket closes).
	KernelRX
	// Held: owned by one worker between rings.
	Held
	// KernelTX: submitted on a TX ring; it comes back on a completion ring.
	KernelTX
	numStates
)

var stateNames = [numStates]string{"free", "kernel-rx", "held", "kernel-tx"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Zone is a contiguous run of equal, power-of-two sized units inside a
// Region. Units are handed out through per-worker Caches; the shared pool
// behind them is touched only in batches.
type Zone struct {
	name  string
	base  uint64 // offset of unit 0 in the region
	unit  uint64
	shift uint
	n     uint32

	// state is written only by the unit's current owner; ownership passes
	// through the kernel's rings or the pool's mutex, which order the writes.
	state []State

	mu     sync.Mutex
	pool   []uint32 // free unit indices, a stack
	caches []*Cache

	// refs counts the descriptors in flight per unit, for zones whose
	// units hold several packets (frag blocks); nil elsewhere.
	refs []atomic.Int32

	violations atomic.Uint64
}

func newZone(name string, base, unit uint64, n int) *Zone {
	z := &Zone{
		name:  name,
		base:  base,
		unit:  unit,
		shift: uint(bits.TrailingZeros64(unit)),
		n:     uint32(n),
		state: make([]State, n),
		pool:  make([]uint32, n),
	}
	// Lowest addresses on top of the stack, so a lightly loaded process
	// keeps reusing the first few pages.
	for i := range z.pool {
		z.pool[i] = uint32(n - 1 - i)
	}
	return z
}

// Name is the zone's name ("frames", "inline", "frags").
func (z *Zone) Name() string { return z.name }

// Base is the region offset of the zone's first unit.
func (z *Zone) Base() uint64 { return z.base }

// UnitSize is the size of one unit in bytes.
func (z *Zone) UnitSize() int { return int(z.unit) }

// Len is the number of units in the zone.
func (z *Zone) Len() int { return int(z.n) }

// Size is the zone's size in bytes.
func (z *Zone) Size() uint64 { return uint64(z.n) << z.shift }

// Contains reports whether addr falls inside the zone.
func (z *Zone) Contains(addr uint64) bool { return addr-z.base < uint64(z.n)<<z.shift }

// UnitAddr returns the region offset of the unit holding addr, which may
// point anywhere inside it (an RX descriptor points past the headroom).
func (z *Zone) UnitAddr(addr uint64) uint64 {
	return z.base + (addr-z.base)>>z.shift<<z.shift
}

// Index returns the unit index of addr; addr must be inside the zone.
func (z *Zone) Index(addr uint64) int { return int((addr - z.base) >> z.shift) }

// Move records that the unit holding addr goes from one place to another.
// It returns false, and counts a violation, if the unit was not where the
// caller believed: a unit owned twice or lost. The move is still recorded so
// the error is counted once, not on every later step.
func (z *Zone) Move(addr uint64, from, to State) bool {
	i := (addr - z.base) >> z.shift
	if i >= uint64(z.n) {
		z.violations.Add(1)
		return false
	}
	ok := z.state[i] == from
	if !ok {
		z.violations.Add(1)
	}
	z.state[i] = to
	return ok
}

// StateOf returns the recorded place of the unit holding addr.
func (z *Zone) StateOf(addr uint64) State { return z.state[(addr-z.base)>>z.shift] }

// Violations counts ownership errors seen so far (should stay 0).
func (z *Zone) Violations() uint64 { return z.violations.Load() }

// NewCache returns a per-worker cache of up to size units. Caches are
// created at setup; the zone keeps them so Check can see their contents.
func (z *Zone) NewCache(size int) *Cache {
	if size < 2 {
		size = 2
	}
	c := &Cache{z: z, items: make([]uint32, 0, size)}
	z.mu.Lock()
	z.caches = append(z.caches, c)
	z.mu.Unlock()
	return c
}

// FreeUnits returns the units in the pool plus those the caches last
// published: an occupancy reading safe to take while workers run.
func (z *Zone) FreeUnits() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := len(z.pool)
	for _, c := range z.caches {
		n += int(c.published.Load())
	}
	return n
}

// Counts returns how many units are in each state. It reads states written
// by workers, so call it only once they have stopped.
func (z *Zone) Counts() [numStates]int {
	var c [numStates]int
	for _, s := range z.state {
		if s < numStates {
			c[s]++
		}
	}
	return c
}

// Reclaim returns every unit in state s to the pool and reports how many.
// Use it for KernelRX after the sockets are closed: the kernel has let go
// of whatever its fill and RX rings held. Workers must have stopped.
func (z *Zone) Reclaim(s State) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := 0
	for i, st := range z.state {
		if st == s && s != Free {
			z.state[i] = Free
			z.pool = append(z.pool, uint32(i))
			n++
		}
	}
	return n
}

// States is every unit's state, by index: what a successor taking the
// region over needs (Restore). Workers must be parked or stopped.
func (z *Zone) States() []State { return slices.Clone(z.state) }

// Restore sets every unit's state to states' (a predecessor's States)
// and rebuilds the pool from the units Free there, for a region mapped
// from another process's (MapSpace): the caches are emptied first. A
// frag block's descriptor count is 0 after: the predecessor hands over
// with nothing in flight on its TX side. Workers must not have started.
func (z *Zone) Restore(states []State) error {
	if len(states) != int(z.n) {
		return fmt.Errorf("umem zone %s: %d states for %d units", z.name, len(states), z.n)
	}
	for i, s := range states {
		if s >= numStates {
			return fmt.Errorf("umem zone %s: unit %d in %v", z.name, i, s)
		}
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, c := range z.caches {
		c.items = c.items[:0]
		c.Publish()
	}
	copy(z.state, states)
	z.pool = z.pool[:0]
	for i := int(z.n) - 1; i >= 0; i-- { // lowest addresses on top, as newZone
		if z.state[i] == Free {
			z.pool = append(z.pool, uint32(i))
		}
	}
	return nil
}

// Check verifies, with workers stopped, that every free unit sits in
// exactly one free list (pool or cache) and no listed unit is in use.
func (z *Zone) Check() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	seen := make([]bool, z.n)
	var dup, busy int
	mark := func(i uint32) {
		if i >= z.n {
			dup++
			return
		}
		if seen[i] {
			dup++
		}
		seen[i] = true
		if z.state[i] != Free {
			busy++
		}
	}
	for _, i := range z.pool {
		mark(i)
	}
	for _, c := range z.caches {
		for _, i := range c.items {
			mark(i)
		}
	}
	var lost int
	for i, s := range z.state {
		if s == Free && !seen[i] {
			lost++
		}
		if s == Free && z.refs != nil && z.refs[i].Load() != 0 {
			dup++ // a free block still referenced by descriptors
		}
	}
	if v := z.violations.Load(); v != 0 || dup != 0 || busy != 0 || lost != 0 {
		return fmt.Errorf("umem zone %s: %d ownership violations, %d units listed free twice, %d listed free while in use, %d free but in no list",
			z.name, v, dup, busy, lost)
	}
	return nil
}

// Cache is one worker's private stock of free units. It must be used by one
// goroutine at a time; it trades with the zone's pool in batches of half its
// capacity, so most alloc/free pairs never take the lock.
type Cache struct {
	z     *Zone
	items []uint32
	// published is len(items) as of the last Publish, for readers that
	// want occupancy without racing the owner.
	published atomic.Int64
}

// Publish makes the cache's fill level visible to FreeUnits. Owners call
// it once per batch, not per unit.
func (c *Cache) Publish() { c.published.Store(int64(len(c.items))) }

// Zone returns the zone the cache draws from.
func (c *Cache) Zone() *Zone { return c.z }

// Len is the number of units in the cache.
func (c *Cache) Len() int { return len(c.items) }

// Alloc takes a free unit and records it in state to (usually Held or
// KernelRX). ok is false when the zone is exhausted: the caller counts a
// drop; it never blocks.
func (c *Cache) Alloc(to State) (addr uint64, ok bool) {
	if len(c.items) == 0 && !c.refill() {
		return 0, false
	}
	n := len(c.items) - 1
	i := c.items[n]
	c.items = c.items[:n]
	z := c.z
	if z.state[i] != Free {
		z.violations.Add(1)
	}
	z.state[i] = to
	return z.base + uint64(i)<<z.shift, true
}

// Free returns the unit holding addr, which the caller believed to be in
// state from. A unit that is already free is counted as a violation and not
// listed again, so it can never be handed out twice.
func (c *Cache) Free(addr uint64, from State) {
	z := c.z
	i := (addr - z.base) >> z.shift
	if i >= uint64(z.n) {
		z.violations.Add(1)
		return
	}
	switch s := z.state[i]; {
	case s == Free:
		z.violations.Add(1)
		return
	case s != from:
		z.violations.Add(1)
	}
	z.state[i] = Free
	if len(c.items) == cap(c.items) {
		c.flush(cap(c.items) / 2)
	}
	c.items = append(c.items, uint32(i))
}

// Flush gives every cached unit back to the pool.
func (c *Cache) Flush() { c.flush(len(c.items)) }

func (c *Cache) refill() bool {
	z := c.z
	want := cap(c.items) / 2
	z.mu.Lock()
	n := min(want, len(z.pool))
	c.items = append(c.items, z.pool[len(z.pool)-n:]...)
	z.pool = z.pool[:len(z.pool)-n]
	c.published.Store(int64(len(c.items)))
	z.mu.Unlock()
	return n > 0
}

func (c *Cache) flush(n int) {
	z := c.z
	k := len(c.items) - n
	z.mu.Lock()
	z.pool = append(z.pool, c.items[k:]...)
	c.items = c.items[:k]
	c.published.Store(int64(k))
	z.mu.Unlock()
}
