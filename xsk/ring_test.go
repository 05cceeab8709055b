package xsk

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// The in-memory rings below are laid out like the kernel's mmap'd rings:
// producer u32 at 0, consumer u32 at 64, flags u32 at 128 and the entries
// from 192 on. The test plays the kernel's side directly on those words.
const (
	fakeProdOff  = 0
	fakeConsOff  = 64
	fakeFlagsOff = 128
	fakeDescOff  = 192
)

// fakeRing is a Go-allocated ring and direct access to its shared words.
type fakeRing struct {
	mem  []byte
	r    ring
	elem uintptr // entry size: 8 (addr rings) or 16 (desc rings)
}

// newFakeRing allocates an 8-byte-aligned ring of size entries of elem
// bytes whose producer and consumer indices both start at start.
func newFakeRing(size, start uint32, elem uintptr) *fakeRing {
	words := make([]uint64, (fakeDescOff+uintptr(size)*elem)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	f := &fakeRing{mem: mem, elem: elem}
	f.r = newRing(mem, fakeProdOff, fakeConsOff, fakeFlagsOff, fakeDescOff, size)
	atomic.StoreUint32(f.word(fakeProdOff), start)
	atomic.StoreUint32(f.word(fakeConsOff), start)
	return f
}

func (f *fakeRing) word(off uintptr) *uint32 {
	return (*uint32)(unsafe.Pointer(&f.mem[off]))
}

func (f *fakeRing) prod() uint32     { return atomic.LoadUint32(f.word(fakeProdOff)) }
func (f *fakeRing) cons() uint32     { return atomic.LoadUint32(f.word(fakeConsOff)) }
func (f *fakeRing) setProd(v uint32) { atomic.StoreUint32(f.word(fakeProdOff), v) }
func (f *fakeRing) setCons(v uint32) { atomic.StoreUint32(f.word(fakeConsOff), v) }
func (f *fakeRing) setFlags(v uint32) {
	atomic.StoreUint32(f.word(fakeFlagsOff), v)
}

// slot returns the bytes of the entry the absolute index idx lands in,
// computed independently of ring's own arithmetic.
func (f *fakeRing) slot(idx uint32) []byte {
	off := fakeDescOff + uintptr(idx%uint32(f.r.size))*f.elem
	return f.mem[off : off+f.elem]
}

// The kernel's side: read or write one entry with plain memory accesses.
func (f *fakeRing) kAddr(idx uint32) uint64 {
	return *(*uint64)(unsafe.Pointer(&f.slot(idx)[0]))
}

func (f *fakeRing) kSetAddr(idx uint32, v uint64) {
	*(*uint64)(unsafe.Pointer(&f.slot(idx)[0])) = v
}

func (f *fakeRing) producer() *Producer {
	p := &Producer{f.r}
	p.initProducer()
	return p
}

func (f *fakeRing) consumer() *Consumer {
	c := &Consumer{f.r}
	c.initConsumer()
	return c
}

// entry is the value the tests put at absolute ring index idx.
func entry(idx uint32) uint64 { return 0xA5A5_0000_0000_0000 | uint64(idx) }

// starts are the initial index values every table case runs from: zero,
// 16 short of 2^32 (the brief's wrap case) and 5 short (wraps mid-case).
var starts = []uint32{0, 0xFFFFFFF0, 0xFFFFFFFB}

type prodOp struct {
	op   string // free, reserve, set, submit, cancel, kcons
	n    uint32
	want uint32 // free: expected result; reserve: expected got
	idx  uint32 // reserve: expected first index, relative to start
}

func TestProducer(t *testing.T) {
	const size = 8
	cases := []struct {
		name string
		ops  []prodOp
		// wantProd and wantCons are the shared indices at the end,
		// relative to start.
		wantProd, wantCons uint32
	}{
		{
			name: "empty ring is all free",
			ops: []prodOp{
				{op: "free", n: 1, want: 8},
				{op: "free", n: 8, want: 8},
				{op: "free", n: 100, want: 8},
			},
		},
		{
			name: "reserve set submit",
			ops: []prodOp{
				{op: "reserve", n: 3, want: 3, idx: 0},
				{op: "set", n: 3},
				{op: "submit", n: 3},
				{op: "free", n: 1, want: 5},
				{op: "reserve", n: 2, want: 2, idx: 3},
				{op: "set", n: 2},
				{op: "submit", n: 2},
			},
			wantProd: 5,
		},
		{
			name: "full ring reserves fewer than asked",
			ops: []prodOp{
				{op: "reserve", n: 5, want: 5, idx: 0},
				{op: "reserve", n: 5, want: 3, idx: 5},
				{op: "reserve", n: 1, want: 0, idx: 8},
				{op: "free", n: 1, want: 0},
				{op: "set", n: 8},
				{op: "submit", n: 8},
				{op: "reserve", n: 1, want: 0, idx: 8},
			},
			wantProd: 8,
		},
		{
			name: "ask for more than the ring holds",
			ops: []prodOp{
				{op: "reserve", n: 1000, want: 8, idx: 0},
				{op: "set", n: 8},
				{op: "submit", n: 8},
			},
			wantProd: 8,
		},
		{
			name: "full ring frees up once the kernel consumes",
			ops: []prodOp{
				{op: "reserve", n: 8, want: 8, idx: 0},
				{op: "set", n: 8},
				{op: "submit", n: 8},
				{op: "reserve", n: 3, want: 0, idx: 8},
				{op: "kcons", n: 3},
				{op: "free", n: 1, want: 3},
				{op: "reserve", n: 4, want: 3, idx: 8},
				{op: "set", n: 3},
				{op: "submit", n: 3},
				{op: "kcons", n: 8},
			},
			wantProd: 11, wantCons: 11,
		},
		{
			name: "cached consumer is not refreshed while it tells enough",
			ops: []prodOp{
				{op: "reserve", n: 6, want: 6, idx: 0},
				{op: "set", n: 6},
				{op: "submit", n: 6},
				{op: "kcons", n: 6},
				// 2 known free: asking for 2 must not look at the kernel.
				{op: "free", n: 2, want: 2},
				// Asking for 3 refreshes and sees all 8.
				{op: "free", n: 3, want: 8},
				{op: "reserve", n: 8, want: 8, idx: 6},
				{op: "set", n: 8},
				{op: "submit", n: 8},
			},
			wantProd: 14, wantCons: 6,
		},
		{
			name: "cancel gives back unsubmitted slots",
			ops: []prodOp{
				{op: "reserve", n: 5, want: 5, idx: 0},
				{op: "cancel", n: 2},
				{op: "set", n: 3},
				{op: "submit", n: 3},
				{op: "free", n: 1, want: 5},
				{op: "reserve", n: 1, want: 1, idx: 3},
				{op: "cancel", n: 1},
				{op: "reserve", n: 8, want: 5, idx: 3},
				{op: "cancel", n: 5},
			},
			wantProd: 3,
		},
		{
			name: "submit in parts",
			ops: []prodOp{
				{op: "reserve", n: 6, want: 6, idx: 0},
				{op: "set", n: 6},
				{op: "submit", n: 2},
				{op: "submit", n: 4},
				{op: "kcons", n: 6},
			},
			wantProd: 6, wantCons: 6,
		},
		{
			name: "many laps around the ring",
			ops: func() []prodOp {
				var ops []prodOp
				for i := uint32(0); i < 10; i++ {
					ops = append(ops,
						prodOp{op: "reserve", n: 5, want: 5, idx: 5 * i},
						prodOp{op: "set", n: 5},
						prodOp{op: "submit", n: 5},
						prodOp{op: "kcons", n: 5})
				}
				return ops
			}(),
			wantProd: 50, wantCons: 50,
		},
	}
	for _, start := range starts {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/start=%#x", tc.name, start), func(t *testing.T) {
				f := newFakeRing(size, start, 8)
				p := f.producer()
				if p.Size() != size {
					t.Fatalf("Size = %d, want %d", p.Size(), size)
				}
				// written counts entries set; cases write each reserved
				// slot once, in order, before any cancel or after it.
				var written, submitted, consumed uint32 // relative to start
				for i, o := range tc.ops {
					switch o.op {
					case "free":
						if got := p.Free(o.n); got != o.want {
							t.Fatalf("op %d: Free(%d) = %d, want %d", i, o.n, got, o.want)
						}
					case "reserve":
						got, idx := p.Reserve(o.n)
						if got != o.want || idx != start+o.idx {
							t.Fatalf("op %d: Reserve(%d) = %d at %#x, want %d at %#x", i, o.n, got, idx, o.want, start+o.idx)
						}
					case "set":
						for k := range o.n {
							idx := start + written + k
							p.SetAddr(idx, entry(idx))
						}
						written += o.n
					case "cancel":
						p.Cancel(o.n)
					case "submit":
						p.Submit(o.n)
						submitted += o.n
						if got := f.prod(); got != start+submitted {
							t.Fatalf("op %d: producer word %#x after Submit, want %#x", i, got, start+submitted)
						}
						if got := p.Pending(); got != submitted-consumed {
							t.Fatalf("op %d: Pending = %d, want %d", i, got, submitted-consumed)
						}
					case "kcons":
						// The kernel reads what was submitted, then
						// moves its consumer index.
						for k := range o.n {
							idx := start + consumed + k
							if v := f.kAddr(idx); v != entry(idx) {
								t.Fatalf("op %d: kernel read %#x at index %#x, want %#x", i, v, idx, entry(idx))
							}
						}
						consumed += o.n
						f.setCons(start + consumed)
					default:
						t.Fatalf("bad op %q", o.op)
					}
				}
				if got := f.prod(); got != start+tc.wantProd {
					t.Errorf("producer word %#x, want %#x", got, start+tc.wantProd)
				}
				if got := f.cons(); got != start+tc.wantCons {
					t.Errorf("consumer word %#x, want %#x", got, start+tc.wantCons)
				}
			})
		}
	}
}

type consOp struct {
	op   string // kprod, avail, peek, cancel, release
	n    uint32
	want uint32 // avail/peek: expected count
	idx  uint32 // peek: expected first index, relative to start
}

func TestConsumer(t *testing.T) {
	const size = 8
	cases := []struct {
		name               string
		ops                []consOp
		wantProd, wantCons uint32
	}{
		{
			name: "empty ring has nothing",
			ops: []consOp{
				{op: "avail", n: 8, want: 0},
				{op: "peek", n: 8, want: 0, idx: 0},
				{op: "release", n: 0},
			},
		},
		{
			name: "peek and release",
			ops: []consOp{
				{op: "kprod", n: 5},
				{op: "avail", n: 8, want: 5},
				{op: "avail", n: 2, want: 2},
				{op: "peek", n: 3, want: 3, idx: 0},
				{op: "release", n: 3},
				{op: "peek", n: 8, want: 2, idx: 3},
				{op: "release", n: 2},
				{op: "avail", n: 8, want: 0},
			},
			wantProd: 5, wantCons: 5,
		},
		{
			name: "full ring",
			ops: []consOp{
				{op: "kprod", n: 8},
				{op: "peek", n: 100, want: 8, idx: 0},
				{op: "release", n: 8},
				{op: "kprod", n: 8},
				{op: "peek", n: 4, want: 4, idx: 8},
				{op: "peek", n: 4, want: 4, idx: 12},
				{op: "release", n: 8},
			},
			wantProd: 16, wantCons: 16,
		},
		{
			name: "cached producer refreshed only when it shows none",
			ops: []consOp{
				{op: "kprod", n: 2},
				{op: "peek", n: 1, want: 1, idx: 0},
				{op: "kprod", n: 3},
				// One is still known: no refresh yet.
				{op: "avail", n: 8, want: 1},
				{op: "peek", n: 8, want: 1, idx: 1},
				// Now none is known: refresh sees the 3 new ones.
				{op: "avail", n: 8, want: 3},
				{op: "peek", n: 8, want: 3, idx: 2},
				{op: "release", n: 5},
			},
			wantProd: 5, wantCons: 5,
		},
		{
			name: "cancel hands peeked entries back for the next peek",
			ops: []consOp{
				{op: "kprod", n: 6},
				{op: "peek", n: 5, want: 5, idx: 0},
				{op: "cancel", n: 2},
				{op: "release", n: 3},
				{op: "peek", n: 8, want: 3, idx: 3},
				{op: "cancel", n: 3},
				{op: "avail", n: 8, want: 3},
				{op: "peek", n: 8, want: 3, idx: 3},
				{op: "release", n: 3},
			},
			wantProd: 6, wantCons: 6,
		},
		{
			name: "release in parts lets the kernel refill",
			ops: []consOp{
				{op: "kprod", n: 8},
				{op: "peek", n: 8, want: 8, idx: 0},
				{op: "release", n: 3},
				{op: "kprod", n: 3},
				{op: "release", n: 5},
				{op: "peek", n: 8, want: 3, idx: 8},
				{op: "release", n: 3},
			},
			wantProd: 11, wantCons: 11,
		},
		{
			name: "many laps around the ring",
			ops: func() []consOp {
				var ops []consOp
				for i := uint32(0); i < 10; i++ {
					ops = append(ops,
						consOp{op: "kprod", n: 7},
						consOp{op: "peek", n: 8, want: 7, idx: 7 * i},
						consOp{op: "release", n: 7})
				}
				return ops
			}(),
			wantProd: 70, wantCons: 70,
		},
	}
	for _, start := range starts {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/start=%#x", tc.name, start), func(t *testing.T) {
				f := newFakeRing(size, start, 8)
				c := f.consumer()
				var produced, released uint32
				for i, o := range tc.ops {
					switch o.op {
					case "kprod":
						// The kernel may only produce into slots we released.
						if produced+o.n-released > size {
							t.Fatalf("op %d: bad case: kernel would overrun the ring", i)
						}
						for k := range o.n {
							idx := start + produced + k
							f.kSetAddr(idx, entry(idx))
						}
						produced += o.n
						f.setProd(start + produced)
					case "avail":
						if got := c.Avail(o.n); got != o.want {
							t.Fatalf("op %d: Avail(%d) = %d, want %d", i, o.n, got, o.want)
						}
					case "peek":
						n, idx := c.Peek(o.n)
						if n != o.want || idx != start+o.idx {
							t.Fatalf("op %d: Peek(%d) = %d at %#x, want %d at %#x", i, o.n, n, idx, o.want, start+o.idx)
						}
						for k := range n {
							if v := c.Addr(idx + k); v != entry(idx+k) {
								t.Fatalf("op %d: Addr(%#x) = %#x, want %#x", i, idx+k, v, entry(idx+k))
							}
						}
					case "cancel":
						c.Cancel(o.n)
					case "release":
						c.Release(o.n)
						released += o.n
						if got := f.cons(); got != start+released {
							t.Fatalf("op %d: consumer word %#x after Release, want %#x", i, got, start+released)
						}
					default:
						t.Fatalf("bad op %q", o.op)
					}
				}
				if got := f.prod(); got != start+tc.wantProd {
					t.Errorf("producer word %#x, want %#x", got, start+tc.wantProd)
				}
				if got := f.cons(); got != start+tc.wantCons {
					t.Errorf("consumer word %#x, want %#x", got, start+tc.wantCons)
				}
			})
		}
	}
}

// TestInitFromLiveIndices: the init functions pick up whatever indices the
// kernel's ring already has, including values about to wrap.
func TestInitFromLiveIndices(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prod, cons uint32
		wantFree   uint32 // producer view
		wantAvail  uint32 // consumer view
	}{
		{"empty", 0xFFFFFFF0, 0xFFFFFFF0, 8, 0},
		{"three in flight", 0xFFFFFFF3, 0xFFFFFFF0, 5, 3},
		{"in flight across the wrap", 0x00000002, 0xFFFFFFFD, 3, 5},
		{"full across the wrap", 0x00000004, 0xFFFFFFFC, 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRing(8, 0, 8)
			f.setProd(tc.prod)
			f.setCons(tc.cons)
			p := f.producer()
			if got := p.Free(8); got != tc.wantFree {
				t.Errorf("Free = %d, want %d", got, tc.wantFree)
			}
			if got := p.Pending(); got != tc.wantAvail {
				t.Errorf("Pending = %d, want %d", got, tc.wantAvail)
			}
			if got, idx := p.Reserve(8); got != tc.wantFree || idx != tc.prod {
				t.Errorf("Reserve(8) = %d at %#x, want %d at %#x", got, idx, tc.wantFree, tc.prod)
			}
			c := f.consumer()
			if got, idx := c.Peek(8); got != tc.wantAvail || idx != tc.cons {
				t.Errorf("Peek(8) = %d at %#x, want %d at %#x", got, idx, tc.wantAvail, tc.cons)
			}
		})
	}
}

// TestEntriesAcrossWrap writes entries through the ring at absolute indices
// on both sides of 2^32 and checks they land in slot idx & mask, in the
// kernel's byte layout, and read back the same way.
func TestEntriesAcrossWrap(t *testing.T) {
	const size = 16
	indices := []uint32{0xFFFFFFF0, 0xFFFFFFF7, 0xFFFFFFFE, 0xFFFFFFFF, 0, 1, 7, 15, 16, 0x7FFFFFFF, 0x80000000}

	t.Run("addr", func(t *testing.T) {
		f := newFakeRing(size, 0, 8)
		p, c := &Producer{f.r}, &Consumer{f.r}
		for _, idx := range indices {
			v := 0x0123_4567_89AB_CDEF ^ uint64(idx)<<8
			p.SetAddr(idx, v)
			raw := f.mem[fakeDescOff+uintptr(idx&(size-1))*8:][:8]
			if got := binary.NativeEndian.Uint64(raw); got != v {
				t.Errorf("SetAddr(%#x): slot %d holds %#x, want %#x", idx, idx&(size-1), got, v)
			}
			if got := c.Addr(idx); got != v {
				t.Errorf("Addr(%#x) = %#x, want %#x", idx, got, v)
			}
			// The same slot one lap (and 2^32/size laps) away.
			if got := c.Addr(idx + size); got != v {
				t.Errorf("Addr(%#x) = %#x, want %#x (same slot)", idx+size, got, v)
			}
		}
		// Neighbouring slots were not touched by the last write.
		p.SetAddr(0xFFFFFFFF, 1)
		p.SetAddr(0, 2)
		if c.Addr(0xFFFFFFFF) != 1 || c.Addr(0) != 2 {
			t.Errorf("slots 15 and 0 hold %#x and %#x, want 1 and 2", c.Addr(0xFFFFFFFF), c.Addr(0))
		}
		if len(f.mem) != fakeDescOff+size*8 {
			t.Fatalf("bad test ring size %d", len(f.mem))
		}
	})

	t.Run("desc", func(t *testing.T) {
		if s := unsafe.Sizeof(Desc{}); s != 16 {
			t.Fatalf("Desc is %d bytes, struct xdp_desc is 16", s)
		}
		f := newFakeRing(size, 0, 16)
		p, c := &Producer{f.r}, &Consumer{f.r}
		for _, idx := range indices {
			d := Desc{Addr: 256<<48 | uint64(idx)*2048, Len: 60 + idx%1000, Options: idx & 1}
			p.SetDesc(idx, d)
			raw := f.mem[fakeDescOff+uintptr(idx&(size-1))*16:][:16]
			got := Desc{
				Addr:    binary.NativeEndian.Uint64(raw[0:]),
				Len:     binary.NativeEndian.Uint32(raw[8:]),
				Options: binary.NativeEndian.Uint32(raw[12:]),
			}
			if got != d {
				t.Errorf("SetDesc(%#x): slot %d holds %+v, want %+v", idx, idx&(size-1), got, d)
			}
			if got := c.Desc(idx); got != d {
				t.Errorf("Desc(%#x) = %+v, want %+v", idx, got, d)
			}
		}
		p.SetDesc(0xFFFFFFFF, Desc{Addr: 1, Len: 1})
		p.SetDesc(0, Desc{Addr: 2, Len: 2})
		if c.Desc(0xFFFFFFFF).Addr != 1 || c.Desc(0).Addr != 2 || c.Desc(15).Len != 1 {
			t.Errorf("slots 15 and 0 hold %+v and %+v", c.Desc(15), c.Desc(0))
		}
	})
}

func TestFlat(t *testing.T) {
	for _, tc := range []struct {
		addr, want uint64
	}{
		{0, 0},
		{0x1234, 0x1234},
		{0x0000_FFFF_FFFF_FFFF, 0x0000_FFFF_FFFF_FFFF}, // largest plain address
		{256<<48 | 0x10000, 0x10100},                   // copy-mode RX: XDP_PACKET_HEADROOM
		{1<<48 | 0, 1},
		{0xFFFF<<48 | 0x800, 0x800 + 0xFFFF},
		{300<<48 | 0x1_0000_0000, 0x1_0000_012C}, // base above 4 GiB
	} {
		if got := Flat(tc.addr); got != tc.want {
			t.Errorf("Flat(%#x) = %#x, want %#x", tc.addr, got, tc.want)
		}
	}
}

func TestNeedsWakeup(t *testing.T) {
	f := newFakeRing(8, 0, 8)
	p, c := &Producer{f.r}, &Consumer{f.r}
	for _, tc := range []struct {
		flags uint32
		want  bool
	}{
		{0, false},
		{xdpRingNeedWakeup, true},
		{2, false},
		{xdpRingNeedWakeup | 2, true},
		{0xFFFFFFFF, true},
		{0xFFFFFFFE, false},
		{0, false},
	} {
		f.setFlags(tc.flags)
		if got := p.NeedsWakeup(); got != tc.want {
			t.Errorf("flags %#x: producer NeedsWakeup = %v, want %v", tc.flags, got, tc.want)
		}
		if got := c.NeedsWakeup(); got != tc.want {
			t.Errorf("flags %#x: consumer NeedsWakeup = %v, want %v", tc.flags, got, tc.want)
		}
	}
	if xdpRingNeedWakeup != 1 {
		t.Errorf("XDP_RING_NEED_WAKEUP = %d, want 1", xdpRingNeedWakeup)
	}
}

// stallTimeout bounds how long either side of a randomized test waits for
// the other to move, so a broken protocol fails instead of hanging.
const stallTimeout = 10 * time.Second

// waiter spins, yielding now and then, while the other side has not moved,
// and reports a stall once it has waited stallTimeout.
type waiter struct {
	n     int
	since time.Time
}

// wait is called on every fruitless round; it returns false on a stall or
// when stop is set.
func (w *waiter) wait(stop *atomic.Bool) bool {
	// Yield at once: on a small, busy machine the other side may be
	// waiting for this very thread's CPU.
	runtime.Gosched()
	if w.n++; w.n%64 != 0 {
		return true
	}
	if w.since.IsZero() {
		w.since = time.Now()
	}
	return !stop.Load() && time.Since(w.since) < stallTimeout
}

// progress is called whenever the other side has moved.
func (w *waiter) progress() { w.n, w.since = 0, time.Time{} }

// TestRandomProducerKernelConsumer streams sequence numbers from our
// Producer to a simulated kernel consumer on another goroutine through a
// 64-entry ring, in random batch sizes, using only the ring protocol.
// Under -race, a missing happens-before edge in the protocol is reported.
func TestRandomProducerKernelConsumer(t *testing.T) {
	const size = 64
	total := uint64(1_000_000)
	if testing.Short() {
		total = 100_000
	}
	const start = 0xFFFFFFF0
	f := newFakeRing(size, start, 8)
	p := f.producer()

	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() { // the kernel
		rng := rand.New(rand.NewPCG(3, 4))
		prodp, consp := f.word(fakeProdOff), f.word(fakeConsOff)
		cons := atomic.LoadUint32(consp)
		var next uint64
		var w waiter
		for next < total {
			avail := atomic.LoadUint32(prodp) - cons
			if avail > size {
				errc <- fmt.Errorf("kernel sees %d entries in a %d ring", avail, size)
				return
			}
			if avail == 0 {
				if !w.wait(&stop) {
					errc <- fmt.Errorf("kernel: no new entry after %d of %d", next, total)
					return
				}
				continue
			}
			w.progress()
			n := min(avail, 1+rng.Uint32N(size))
			for k := range n {
				v := f.kAddr(cons + k)
				if v != next {
					errc <- fmt.Errorf("kernel read %d at index %#x, want %d", v, cons+k, next)
					return
				}
				next++
			}
			cons += n
			atomic.StoreUint32(consp, cons)
		}
		errc <- nil
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	var seq uint64
	var w waiter
	var short, full int
	for seq < total {
		want := min(1+rng.Uint32N(size+size/2), uint32(total-seq))
		got, idx := p.Reserve(want)
		if got == 0 {
			full++
			select {
			case err := <-errc:
				t.Fatalf("kernel stopped after %d entries were produced: %v", seq, err)
			default:
			}
			if !w.wait(&stop) {
				stop.Store(true)
				t.Fatalf("producer: ring full for %v after %d of %d entries; kernel: %v", stallTimeout, seq, total, <-errc)
			}
			continue
		}
		w.progress()
		if got < want {
			short++
		}
		// Sometimes keep fewer than reserved, to exercise Cancel.
		keep := got
		if rng.IntN(8) == 0 {
			keep = rng.Uint32N(got + 1)
			p.Cancel(got - keep)
		}
		for k := range keep {
			p.SetAddr(idx+k, seq)
			seq++
		}
		p.Submit(keep)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := f.prod(); got != start+uint32(total) {
		t.Errorf("producer word %#x, want %#x", got, start+uint32(total))
	}
	if got := f.cons(); got != start+uint32(total) {
		t.Errorf("consumer word %#x, want %#x", got, start+uint32(total))
	}
	t.Logf("%d entries; %d short reserves, %d reserves on a full ring", total, short, full)
}

// TestRandomKernelProducerConsumer is the other direction: a simulated
// kernel produces descriptors, our Consumer peeks and releases them.
func TestRandomKernelProducerConsumer(t *testing.T) {
	const size = 64
	total := uint64(1_000_000)
	if testing.Short() {
		total = 100_000
	}
	const start = 0xFFFFFFF0
	f := newFakeRing(size, start, 16)
	c := f.consumer()

	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() { // the kernel
		rng := rand.New(rand.NewPCG(5, 6))
		prodp, consp := f.word(fakeProdOff), f.word(fakeConsOff)
		prod := atomic.LoadUint32(prodp)
		var seq uint64
		var w waiter
		for seq < total {
			free := size - (prod - atomic.LoadUint32(consp))
			if free > size {
				errc <- fmt.Errorf("kernel sees %d free entries in a %d ring", free, size)
				return
			}
			if free == 0 {
				if !w.wait(&stop) {
					errc <- fmt.Errorf("kernel: ring still full after %d of %d", seq, total)
					return
				}
				continue
			}
			w.progress()
			n := min(free, 1+rng.Uint32N(size), uint32(total-seq))
			for k := range n {
				s := f.slot(prod + k)
				*(*Desc)(unsafe.Pointer(&s[0])) = Desc{Addr: seq, Len: uint32(seq) ^ 0x5A5A, Options: uint32(seq >> 32)}
				seq++
			}
			prod += n
			atomic.StoreUint32(prodp, prod)
		}
		errc <- nil
	}()

	rng := rand.New(rand.NewPCG(7, 8))
	var next uint64
	var w waiter
	var kernelDone bool
	var kernelErr error
	for next < total {
		n, idx := c.Peek(1 + rng.Uint32N(size+size/2))
		if n == 0 {
			// A kernel that finished may have published its last
			// entries after this Peek looked: look again before
			// calling it stopped.
			if !kernelDone {
				select {
				case kernelErr = <-errc:
					kernelDone = true
					if kernelErr != nil {
						t.Fatalf("kernel stopped after %d entries were consumed: %v", next, kernelErr)
					}
					continue
				default:
				}
			} else if c.Avail(1) == 0 {
				t.Fatalf("kernel finished, consumer stuck after %d of %d entries", next, total)
			}
			if !w.wait(&stop) {
				stop.Store(true)
				if !kernelDone {
					kernelErr = <-errc
				}
				t.Fatalf("consumer: nothing new for %v after %d of %d entries; kernel: %v", stallTimeout, next, total, kernelErr)
			}
			continue
		}
		w.progress()
		for k := range n {
			d := c.Desc(idx + k)
			if want := (Desc{Addr: next, Len: uint32(next) ^ 0x5A5A, Options: uint32(next >> 32)}); d != want {
				stop.Store(true)
				if !kernelDone {
					<-errc
				}
				t.Fatalf("Desc(%#x) = %+v, want %+v", idx+k, d, want)
			}
			next++
		}
		c.Release(n)
	}
	if !kernelDone {
		kernelErr = <-errc
	}
	if kernelErr != nil {
		t.Fatal(kernelErr)
	}
	if got := f.cons(); got != start+uint32(total) {
		t.Errorf("consumer word %#x, want %#x", got, start+uint32(total))
	}
}

// BenchmarkProducerReserveSubmit: our side reserves, writes and submits a
// batch of 64 addresses; the simulated kernel consumes them by moving its
// index.
func BenchmarkProducerReserveSubmit(b *testing.B) {
	const size, batch = 2048, 64
	f := newFakeRing(size, 0xFFFFFFF0, 8)
	p := f.producer()
	consp := f.word(fakeConsOff)
	prodp := f.word(fakeProdOff)
	var addr uint64
	b.ReportAllocs()
	for b.Loop() {
		got, idx := p.Reserve(batch)
		if got != batch {
			b.Fatalf("Reserve(%d) = %d", batch, got)
		}
		for k := range got {
			p.SetAddr(idx+k, addr)
			addr += 2048
		}
		p.Submit(got)
		// The kernel: take everything submitted.
		atomic.StoreUint32(consp, atomic.LoadUint32(prodp))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/entry")
}

// BenchmarkConsumerPeekRelease: the simulated kernel publishes a batch of
// 64 descriptors by moving its index; our side peeks, reads and releases
// them.
func BenchmarkConsumerPeekRelease(b *testing.B) {
	const size, batch = 2048, 64
	f := newFakeRing(size, 0xFFFFFFF0, 16)
	c := f.consumer()
	prodp := f.word(fakeProdOff)
	for i := range uint32(size) {
		s := f.slot(i)
		*(*Desc)(unsafe.Pointer(&s[0])) = Desc{Addr: uint64(i) * 2048, Len: 64}
	}
	var sum uint64
	b.ReportAllocs()
	for b.Loop() {
		// The kernel: publish a batch (the entries are already there).
		atomic.StoreUint32(prodp, atomic.LoadUint32(prodp)+batch)
		n, idx := c.Peek(batch)
		if n != batch {
			b.Fatalf("Peek(%d) = %d", batch, n)
		}
		for k := range n {
			d := c.Desc(idx + k)
			sum += Flat(d.Addr) + uint64(d.Len)
		}
		c.Release(n)
	}
	if sum == 0 {
		b.Fatal("read nothing")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/entry")
}
