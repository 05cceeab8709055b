package xps

import (
	"sync"
	"sync/atomic"
	"time"
)

// Table limits and policy constants.
const (
	// Ways is the number of entries per bucket (set associativity).
	Ways = 8
	// MaxQueues is the largest queue count Pick chooses among; a larger
	// nqueues is clamped to it, and Sent/Completed ignore the per-queue
	// count of a queue ≥ MaxQueues.
	MaxQueues = 256
	// MaxSize is the largest table (entries); NewTable clamps to it.
	MaxSize = 1 << 22
	// DefaultSize is the table size NewTable uses for size ≤ 0.
	DefaultSize = 1 << 16
	// DefaultIdle is the idle time NewTable uses for idle ≤ 0.
	DefaultIdle = 10 * time.Second
	// OverloadFactor and OverloadMin define an overloaded queue: at least
	// OverloadMin descriptors in flight and more than OverloadFactor times
	// the mean (total in flight / queue count).
	OverloadFactor = 2
	OverloadMin    = 32
	// maxStripes bounds the number of bucket locks.
	maxStripes = 64
)

// Slot identifies a flow's table entry at one generation: Pick returns it,
// the caller keeps it with each descriptor and hands it to Sent and
// Completed. It stays safe to use after the entry is evicted or reused (the
// generation no longer matches and only the per-queue count is updated).
type Slot uint64

// NoSlot is the Slot of a packet that has no table entry (ModeHash, ModeCPU,
// hash fallback).
const NoSlot Slot = 0

// Valid reports whether s refers to a table entry (it may be stale).
func (s Slot) Valid() bool { return s != NoSlot }

func makeSlot(idx int, gen uint32) Slot { return Slot(uint64(gen)<<32 | uint64(idx+1)) }

func (s Slot) split() (idx int, gen uint32) {
	return int(uint32(s)) - 1, uint32(s >> 32)
}

// entry is one flow: 64 bytes, one cache line. All fields are guarded by the
// stripe lock of its bucket.
type entry struct {
	key      Key   // 40 bytes
	lastSeen int64 // monotonic ns of the latest Pick
	inflight int64 // descriptors Sent and not yet Completed, this generation
	gen      uint32
	queue    uint16
	used     bool
	deferred bool // a move is pending (counted once in DeferredMoves)
}

type bucket struct {
	hash [Ways]uint64 // full hashes, one cache line, scanned before the entries
	ents [Ways]entry
}

type paddedMutex struct {
	sync.Mutex
	_ [64 - 8]byte
}

type paddedCounter struct {
	atomic.Int64
	_ [64 - 8]byte
}

type counters struct {
	flows, moves, deferred, evictions, reclaims, fallbacks atomic.Uint64
	entries, staleSends, staleCompletions, underflows      atomic.Uint64
}

// Table is the sticky flow → TX queue table. It is bounded (fixed capacity,
// allocated by NewTable), O(1) per operation, allocation-free after NewTable,
// and safe for concurrent use by any number of goroutines (see the package
// comment for the locking design).
type Table struct {
	mode  atomic.Uint32
	limit atomic.Int32 // SetQueues; 0 = none
	idle  int64
	shift uint   // first bucket = hash >> shift
	smask uint64 // stripe = bucket & smask
	sbits uint   // log2(stripes)
	amask uint64 // alternate bucket = first ^ (x << sbits), x = hash & amask

	buckets []bucket
	locks   []paddedMutex

	qin   [MaxQueues]paddedCounter // in flight per queue
	total paddedCounter            // in flight, all queues
	c     counters
}

// NewTable returns a table of size entries (rounded up to a power of two, at
// least Ways, at most MaxSize; DefaultSize if size ≤ 0) in ModeSticky. An
// entry idle longer than idle (DefaultIdle if idle ≤ 0) with nothing in
// flight is reclaimed when its bucket needs room.
func NewTable(size int, idle time.Duration) *Table {
	if size <= 0 {
		size = DefaultSize
	}
	size = min(size, MaxSize)
	nb := 1
	for nb*Ways < size {
		nb <<= 1
	}
	if idle <= 0 {
		idle = DefaultIdle
	}
	lg := uint(0)
	for 1<<lg < nb {
		lg++
	}
	stripes := min(nb, maxStripes)
	sb := uint(0)
	for 1<<sb < stripes {
		sb++
	}
	t := &Table{
		idle:    int64(idle),
		shift:   64 - lg, // lg = 0: shift 64, every hash maps to bucket 0
		smask:   uint64(stripes - 1),
		sbits:   sb,
		amask:   uint64(nb/stripes - 1), // 0: one bucket per stripe, no second choice
		buckets: make([]bucket, nb),
		locks:   make([]paddedMutex, stripes),
	}
	return t
}

// SetMode switches the queue choice. Switching while flows are in flight may
// reorder them once (a sticky flow's queue is not the hash one); it is meant
// for configuration time and A/B measurement.
func (t *Table) SetMode(m Mode) { t.mode.Store(uint32(m)) }

// Mode returns the current mode.
func (t *Table) Mode() Mode { return Mode(t.mode.Load()) }

// SetQueues records a TX queue count change: from now on Pick chooses among
// at most n queues, whatever nqueues its callers pass, so sticky flows on a
// queue ≥ n move on their next packet once they have nothing in flight (until
// then they stay, and the caller must keep that queue draining). n ≤ 0
// removes the limit.
func (t *Table) SetQueues(n int) {
	n = min(max(n, 0), MaxQueues)
	t.limit.Store(int32(n))
}

// Size returns the capacity in entries.
func (t *Table) Size() int { return len(t.buckets) * Ways }

func (t *Table) nqueues(n int) int {
	n = min(max(n, 1), MaxQueues)
	if l := int(t.limit.Load()); l > 0 && l < n {
		n = l
	}
	return n
}

// HashQueue is ModeHash's choice: h % nqueues (nqueues < 1 counts as 1).
func HashQueue(h uint64, nqueues int) int {
	return int(h % uint64(max(nqueues, 1)))
}

// CPUQueue is ModeCPU's choice: rxq % nqueues (nqueues < 1 counts as 1,
// a negative rxq as 0).
func CPUQueue(rxq, nqueues int) int {
	return max(rxq, 0) % max(nqueues, 1)
}

// Pick returns the TX queue for flow k (h must be k.Hash()) among nqueues
// (clamped to [1, MaxQueues] and to the SetQueues limit), and the flow's
// Slot (NoSlot if it has no entry). rxq, the receiving worker's queue, is
// used in ModeCPU only. now is a monotonic nanosecond count (the caller reads
// the clock once per batch); it becomes the flow's last-seen time.
//
// In ModeSticky the queue may be ≥ nqueues: a flow still draining on a queue
// that is no longer in use stays there until its in-flight count is 0.
func (t *Table) Pick(k Key, h uint64, nqueues, rxq int, now int64) (queue int, slot Slot) {
	n := t.nqueues(nqueues)
	switch Mode(t.mode.Load()) {
	case ModeHash:
		return HashQueue(h, n), NoSlot
	case ModeCPU:
		return CPUQueue(rxq, n), NoSlot
	}
	b1, b2 := t.buckets2(h)
	mu := &t.locks[uint64(b1)&t.smask] // b2 is in the same stripe
	mu.Lock()
	bi, i := b1, t.find(b1, k, h)
	if i < 0 && b2 != b1 {
		bi, i = b2, t.find(b2, k, h)
	}
	if i >= 0 {
		e := &t.buckets[bi].ents[i]
		if now > e.lastSeen {
			e.lastSeen = now
		}
		q := int(e.queue)
		if q >= n || t.overloaded(q, n) {
			if e.inflight == 0 {
				if nq := t.leastLoaded(h, n); nq != q {
					e.queue = uint16(nq)
					q = nq
					t.c.moves.Add(1)
				}
				e.deferred = false
			} else if !e.deferred {
				e.deferred = true
				t.c.deferred.Add(1)
			}
		} else {
			e.deferred = false
		}
		s := makeSlot(bi*Ways+i, e.gen)
		mu.Unlock()
		return q, s
	}

	// Miss: a never-used entry (in the emptier of the two buckets first),
	// else the least-recently-used entry with nothing in flight.
	bi, i = t.victim(b1, b2)
	if i < 0 {
		// Every way has descriptors in flight: evicting one could reorder
		// it. This packet gets the stateless choice.
		mu.Unlock()
		t.c.fallbacks.Add(1)
		return HashQueue(h, n), NoSlot
	}
	b := &t.buckets[bi]
	e := &b.ents[i]
	switch {
	case !e.used:
		t.c.entries.Add(1)
	case now-e.lastSeen > t.idle:
		t.c.reclaims.Add(1)
	default:
		t.c.evictions.Add(1)
	}
	q := t.leastLoaded(h, n)
	b.hash[i] = h
	*e = entry{key: k, lastSeen: now, gen: e.gen + 1, queue: uint16(q), used: true}
	s := makeSlot(bi*Ways+i, e.gen)
	mu.Unlock()
	t.c.flows.Add(1)
	return q, s
}

// buckets2 returns the two candidate buckets of hash h: the first from its
// top bits, the alternate differing from it only above the stripe bits (so
// that one stripe lock guards both), chosen by its low bits. They are equal
// when the table has no more buckets than stripes.
func (t *Table) buckets2(h uint64) (int, int) {
	b1 := h >> t.shift
	if t.amask == 0 {
		return int(b1), int(b1)
	}
	x := h & t.amask
	if x == 0 {
		x = 1
	}
	return int(b1), int(b1 ^ x<<t.sbits)
}

// find returns the way of bucket bi holding k, or -1.
func (t *Table) find(bi int, k Key, h uint64) int {
	b := &t.buckets[bi]
	for i := range b.hash {
		if b.hash[i] == h && b.ents[i].used && b.ents[i].key == k {
			return i
		}
	}
	return -1
}

// victim chooses the entry a new flow takes in buckets b1, b2: a never-used
// one in the bucket with more of them (two-choice balancing), else the LRU
// entry with nothing in flight, else none (-1).
func (t *Table) victim(b1, b2 int) (int, int) {
	cands := [2]int{b1, b2}
	nc := 2
	if b2 == b1 {
		nc = 1
	}
	f1, i1 := free(&t.buckets[b1])
	f2, i2 := 0, -1
	if nc == 2 {
		f2, i2 = free(&t.buckets[b2])
	}
	switch {
	case f1 > 0 && f1 >= f2:
		return b1, i1
	case f2 > 0:
		return b2, i2
	}
	vb, vi := -1, -1
	var seen int64
	for _, bi := range cands[:nc] {
		b := &t.buckets[bi]
		for i := range b.ents {
			if e := &b.ents[i]; e.inflight == 0 && (vi < 0 || e.lastSeen < seen) {
				vb, vi, seen = bi, i, e.lastSeen
			}
		}
	}
	return vb, vi
}

// free returns the number of never-used entries of b and the first one.
func free(b *bucket) (n, first int) {
	first = -1
	for i := range b.ents {
		if !b.ents[i].used {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	return n, first
}

// overloaded reports whether queue q (< n) holds at least OverloadMin
// descriptors and more than OverloadFactor times the mean.
func (t *Table) overloaded(q, n int) bool {
	if n <= 1 {
		return false
	}
	in := t.qin[q].Load()
	return in >= OverloadMin && in*int64(n) > OverloadFactor*t.total.Load()
}

// leastLoaded returns the queue < n with the fewest descriptors in flight,
// scanning from h % n so that ties go to the hash choice.
func (t *Table) leastLoaded(h uint64, n int) int {
	q := HashQueue(h, n)
	best, bestIn := q, t.qin[q].Load()
	for range n - 1 {
		if q++; q == n {
			q = 0
		}
		if in := t.qin[q].Load(); in < bestIn {
			best, bestIn = q, in
		}
	}
	return best
}

// Sent records n descriptors of the flow of s submitted on queue. Call it
// before publishing them to the kernel. s may be NoSlot or stale: then only
// the per-queue count changes.
func (t *Table) Sent(s Slot, queue, n int) {
	if n <= 0 {
		return
	}
	if queue >= 0 && queue < MaxQueues {
		t.qin[queue].Add(int64(n))
		t.total.Add(int64(n))
	}
	if s == NoSlot {
		return
	}
	e, mu := t.lookup(s)
	if e == nil {
		t.c.staleSends.Add(1)
		return
	}
	mu.Lock()
	if e.used && e.gen == gen(s) {
		e.inflight += int64(n)
		mu.Unlock()
		return
	}
	mu.Unlock()
	t.c.staleSends.Add(1)
}

// Completed records the completion of n descriptors of the flow of s on
// queue. s may be NoSlot or stale (the entry was reused since): then only
// the per-queue count changes. Counts never go below 0 (Stats.Underflows).
func (t *Table) Completed(s Slot, queue, n int) {
	if n <= 0 {
		return
	}
	if queue >= 0 && queue < MaxQueues {
		t.sub(&t.qin[queue].Int64, int64(n))
		t.sub(&t.total.Int64, int64(n))
	}
	if s == NoSlot {
		return
	}
	e, mu := t.lookup(s)
	if e == nil {
		t.c.staleCompletions.Add(1)
		return
	}
	mu.Lock()
	if e.used && e.gen == gen(s) {
		e.inflight -= int64(n)
		if e.inflight < 0 {
			e.inflight = 0
			mu.Unlock()
			t.c.underflows.Add(1)
			return
		}
		mu.Unlock()
		return
	}
	mu.Unlock()
	t.c.staleCompletions.Add(1)
}

// sub subtracts n from c; if that takes it below 0 (a Completed without its
// Sent), it adds the deficit back and counts an underflow.
func (t *Table) sub(c *atomic.Int64, n int64) {
	if v := c.Add(-n); v < 0 {
		c.Add(-v)
		t.c.underflows.Add(1)
	}
}

func gen(s Slot) uint32 { _, g := s.split(); return g }

// lookup returns the entry and stripe lock of s, or nil if s is out of range.
func (t *Table) lookup(s Slot) (*entry, *sync.Mutex) {
	idx, _ := s.split()
	if idx < 0 || idx >= len(t.buckets)*Ways {
		return nil, nil
	}
	bi := idx / Ways
	return &t.buckets[bi].ents[idx%Ways], &t.locks[uint64(bi)&t.smask].Mutex
}

// Stats is a snapshot of a Table's counters.
type Stats struct {
	Mode string
	// Size is the capacity in entries, Entries the entries ever used (≤
	// Size), Queues the SetQueues limit (0: none).
	Size, Entries uint64
	Queues        int
	// Flows counts flows given an entry (new flows, and flows returning
	// after eviction).
	Flows uint64
	// Moves counts flows moved to another queue (queue count shrank, or
	// overloaded queue) with nothing in flight.
	Moves uint64
	// DeferredMoves counts moves postponed because the flow had descriptors
	// in flight (once per episode, not per packet).
	DeferredMoves uint64
	// Evictions counts entries taken from a flow not yet idle (table too
	// small); Reclaims entries taken from a flow idle longer than the idle
	// time (aging).
	Evictions, Reclaims uint64
	// Fallbacks counts packets given the hash choice because every entry of
	// their bucket had descriptors in flight.
	Fallbacks uint64
	// StaleSends and StaleCompletions count Sent/Completed calls whose slot
	// no longer matched its entry's generation (only the per-queue count
	// was updated); Underflows counts completions beyond what was sent
	// (clamped at 0) — a caller bug.
	StaleSends, StaleCompletions, Underflows uint64
	// InFlight is the total in flight; QueueInFlight the count per queue, up
	// to the highest queue with a nonzero count.
	InFlight      int64
	QueueInFlight []int64
}

// Stats returns a snapshot of the counters (each read atomically, not all at
// one instant). It allocates (QueueInFlight); do not call it per packet.
func (t *Table) Stats() Stats {
	s := Stats{
		Mode:             t.Mode().String(),
		Size:             uint64(t.Size()),
		Entries:          t.c.entries.Load(),
		Queues:           int(t.limit.Load()),
		Flows:            t.c.flows.Load(),
		Moves:            t.c.moves.Load(),
		DeferredMoves:    t.c.deferred.Load(),
		Evictions:        t.c.evictions.Load(),
		Reclaims:         t.c.reclaims.Load(),
		Fallbacks:        t.c.fallbacks.Load(),
		StaleSends:       t.c.staleSends.Load(),
		StaleCompletions: t.c.staleCompletions.Load(),
		Underflows:       t.c.underflows.Load(),
		InFlight:         t.total.Load(),
	}
	last := -1
	var q [MaxQueues]int64
	for i := range q {
		if q[i] = t.qin[i].Load(); q[i] != 0 {
			last = i
		}
	}
	s.QueueInFlight = append([]int64(nil), q[:last+1]...)
	return s
}
