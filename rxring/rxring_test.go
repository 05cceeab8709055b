package rxring_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/xdpfwd/xdpfwd/rxring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// headroom is where the fake kernel puts a packet in its frame, as the
// kernel does past XDP_PACKET_HEADROOM and the program's metadata.
const headroom = 256

// env is a Ring over an in-memory socket, and the kernel's side of it.
type env struct {
	k      *xsktest.Socket
	reg    *umem.Region
	frames *umem.Cache
	r      *rxring.Ring
	// lent are the frames the fake kernel took off the fill ring and has
	// not yet received into, oldest first.
	lent []uint64
}

func newEnv(tb testing.TB, ringSize uint32, frames int, start uint32) *env {
	tb.Helper()
	reg, err := umem.New(umem.Config{FrameSize: 2048, Frames: frames, HugePages: umem.HugePagesOff})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { reg.Close() })
	k := xsktest.New(ringSize, 0, start)
	c := reg.Frames.NewCache(64)
	return &env{k: k, reg: reg, frames: c, r: rxring.New(k.Socket, c)}
}

// take has the fake kernel take everything on the fill ring.
func (e *env) take() {
	e.lent = append(e.lent, e.k.Fill.TakeAddrs(int(e.k.Fill.Size()))...)
}

// deliver has the fake kernel receive packets into lent frames, packet p
// as descs[p] descriptors of 100 bytes, and publish them; it returns the
// descriptors it produced.
func (e *env) deliver(tb testing.TB, descs ...int) []xsk.Desc {
	tb.Helper()
	var out []xsk.Desc
	for _, n := range descs {
		for j := range n {
			if len(e.lent) == 0 {
				tb.Fatal("fake kernel: no frame lent to receive into")
			}
			d := xsk.Desc{Addr: e.lent[0] + headroom, Len: 100}
			e.lent = e.lent[1:]
			if j < n-1 {
				d.Options = xsk.PktContd
			}
			out = append(out, d)
		}
	}
	if got := e.k.RX.Produce(out...); got != len(out) {
		tb.Fatalf("fake kernel: RX ring took %d of %d descriptors", got, len(out))
	}
	e.k.RX.Publish()
	return out
}

// hold claims the n one-frame packets the RX ring holds and reads them,
// as a worker would, and returns their addresses, now the caller's.
func (e *env) hold(tb testing.TB, n uint32) []uint64 {
	tb.Helper()
	if got := e.r.Peek(64, 64); got != n {
		tb.Fatalf("Peek claimed %d, want %d", got, n)
	}
	var held []uint64
	for e.r.More() {
		ch, _, ok := e.r.Next(make([]xsk.Desc, 0, rxring.MaxDescs))
		if !ok {
			tb.Fatal("packet refused")
		}
		held = append(held, ch[0].Addr)
	}
	return held
}

// check verifies the region's books with every frame back in a free list
// or lent to the kernel.
func (e *env) check(tb testing.TB) {
	tb.Helper()
	e.frames.Flush()
	e.take()
	if got := e.reg.Frames.Counts(); got[umem.KernelRX] != len(e.lent) || got[umem.Held] != 0 || got[umem.KernelTX] != 0 {
		tb.Fatalf("frame states %v with %d lent to the kernel", got, len(e.lent))
	}
	e.reg.Frames.Reclaim(umem.KernelRX)
	if err := e.reg.Check(); err != nil {
		tb.Fatal(err)
	}
}

func TestRefill(t *testing.T) {
	for _, c := range []struct {
		name      string
		frames    int
		min       uint32
		preFilled int // addresses already on the fill ring
		wantLent  int
		wantShort uint64
	}{
		{"empty ring filled", 1024, 16, 0, 32, 0},
		{"topped up", 1024, 16, 10, 32, 0},
		{"too little room: left alone", 1024, 16, 20, 20, 0},
		{"cache runs dry", 8, 1, 0, 8, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 16, c.frames, 0xFFFFFFF0) // fill ring of 32: indices wrap
			if c.preFilled > 0 {
				// A full ring of which the kernel took all but preFilled.
				e.r.Refill(32)
				e.lent = append(e.lent, e.k.Fill.TakeAddrs(32-c.preFilled)...)
				if e.k.Fill.Ready() != c.preFilled {
					t.Fatalf("setup: %d on the fill ring, want %d", e.k.Fill.Ready(), c.preFilled)
				}
			}
			e.r.Refill(c.min)
			if got := e.k.Fill.Ready(); got != c.wantLent {
				t.Errorf("fill ring holds %d, want %d", got, c.wantLent)
			}
			if got := e.r.FillShort.Load(); got != c.wantShort {
				t.Errorf("FillShort = %d, want %d", got, c.wantShort)
			}
			for _, a := range e.k.Fill.TakeAddrs(64) {
				if s := e.reg.Frames.StateOf(a); s != umem.KernelRX {
					t.Errorf("frame %#x on the fill ring is %v", a, s)
				}
				e.lent = append(e.lent, a)
			}
			e.check(t)
		})
	}
}

// TestLend: an adaptive lend keeps its floor on the fill ring, doubles
// when a Refill finds the kernel took three quarters of it or more (a
// burst), up to the ring's size, and halves, down to the floor, once the
// kernel took calmLends (64) lends while half of it stayed; a ring the
// cache left short does not grow, and a fixed lend (New's: the ring's
// size) never moves. A lend that keeps more than its floor halves below
// what it keeps only in a flood: Refills that each find half a batch
// taken.
func TestLend(t *testing.T) {
	type step struct {
		take     int    // frames the fake kernel takes off the fill ring first
		wantLend uint32 // after the Refill
		wantOn   int    // on the fill ring after the Refill
	}
	for _, c := range []struct {
		name        string
		floor, keep uint32 // 0: New's
		atLeast     uint32 // Refill's, the batch
		frames      int
		steps       []step
	}{
		{"fixed", 0, 0, 1, 1024, []step{{0, 32, 32}, {31, 32, 32}, {32, 32, 32}}},
		{"a floor of 0 is the ring's size", 0, 0, 1, 1024, []step{{0, 32, 32}, {31, 32, 32}}},
		// More than the lend: refilled once empty all the same.
		{"a floor below the refill's least", 1, 1, 16, 1024, []step{{0, 1, 1}, {0, 1, 1}}},
		{"floor kept", 4, 4, 1, 1024, []step{{0, 4, 4}, {2, 4, 4}, {2, 4, 4}}},
		{"bursts double it to the ring's size", 4, 4, 1, 1024, []step{
			{0, 4, 4}, {3, 8, 8}, {7, 16, 16}, {12, 32, 32}, {32, 32, 32}}},
		{"a burst short of a quarter does not", 8, 8, 1, 1024, []step{{0, 8, 8}, {5, 8, 8}, {6, 16, 16}}},
		{"calm halves it after 64 lends taken", 4, 4, 1, 1024, append(append([]step{{0, 4, 4}, {3, 8, 8}, {6, 16, 16}},
			// 8 at a time leaves half: calm 8, 16, ... 1024 = 64 × 16.
			slices.Repeat([]step{{8, 16, 16}}, 127)...), step{8, 8, 8}, step{4, 8, 8})},
		// 6 frames in all: a burst grows the lend to 8, of which 6 are
		// found; short, it does not grow on the next burst.
		{"a short ring does not grow", 4, 4, 1, 6, []step{{0, 4, 4}, {4, 8, 6}, {6, 8, 6}}},
		// 3 a Refill, under half the batch of 8: 1,350 taken, and the
		// lend stays what it keeps.
		{"calm traffic keeps keep", 4, 16, 8, 1024, append([]step{{0, 16, 16}},
			slices.Repeat([]step{{3, 16, 13}, {3, 16, 10}, {3, 16, 16}}, 150)...)},
		// 8 a Refill, the whole batch: 64 × 16 taken halves it below.
		{"a flood takes it below keep", 4, 16, 8, 1024, append(append([]step{{0, 16, 16}},
			slices.Repeat([]step{{8, 16, 16}}, 127)...), step{8, 8, 8})},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 16, c.frames, 0xFFFFFFF0) // fill ring of 32: indices wrap
			e.r.SetLend(c.floor, c.keep)
			atLeast := c.atLeast
			for i, st := range c.steps {
				e.lent = append(e.lent, e.k.Fill.TakeAddrs(st.take)...)
				// What the kernel took comes back as the frames are
				// used and freed: keep the cache in frames.
				for _, a := range e.lent {
					e.reg.Frames.Move(a, umem.KernelRX, umem.Held)
					e.frames.Free(a, umem.Held)
				}
				e.lent = e.lent[:0]
				e.r.Refill(atLeast)
				if got, on := e.r.Lend.Load(), e.k.Fill.Ready(); got != st.wantLend || on != st.wantOn {
					t.Fatalf("step %d (%d taken): lend %d with %d on the fill ring, want %d with %d", i, st.take, got, on, st.wantLend, st.wantOn)
				}
			}
			e.check(t)
		})
	}
}

// TestRefillWakes: a Refill that puts frames on a fill ring asking for a
// wake-up makes one recvfrom (failing here: the socket has no
// descriptor), counted; one that finds too little room makes none.
func TestRefillWakes(t *testing.T) {
	e := newEnv(t, 16, 1024, 0)
	e.k.Fill.SetNeedWakeup(true)
	e.r.Refill(1)
	e.r.Refill(1) // full: left alone
	if got := e.r.FillWakeups.Load(); got != 1 {
		t.Errorf("FillWakeups = %d, want 1", got)
	}
	e.k.Fill.TakeAddrs(4)
	e.r.Refill(1)
	if got := e.r.FillWakeups.Load(); got != 2 {
		t.Errorf("FillWakeups = %d after a second refill, want 2", got)
	}
	e.k.Fill.SetNeedWakeup(false)
	e.k.Fill.TakeAddrs(4)
	e.r.Refill(1)
	if got := e.r.FillWakeups.Load(); got != 2 {
		t.Errorf("FillWakeups = %d without need_wakeup, want 2", got)
	}
}

// TestPeekWholePackets: Peek claims whole packets only, and a packet
// longer than the batch whole or not at all.
func TestPeekWholePackets(t *testing.T) {
	for _, c := range []struct {
		name      string
		packets   []int // descriptors per packet on the RX ring
		max, room uint32
		want      uint32
	}{
		{"singles up to max", []int{1, 1, 1, 1, 1}, 3, 64, 3},
		{"all of a short ring", []int{1, 1}, 64, 64, 2},
		{"chain cut at max is left whole", []int{1, 3, 1}, 3, 64, 1},
		{"chains that fit", []int{2, 3, 1}, 6, 64, 6},
		{"long first packet, room for it", []int{5, 1}, 3, 5, 5},
		{"long first packet, no room", []int{5, 1}, 3, 4, 0},
		{"18 descriptors: sent as a chain when room allows", []int{18}, 8, 18, 18},
		{"18 descriptors, no room", []int{18}, 8, 17, 0},
		{"19 descriptors: claimed to be dropped, room or not", []int{19, 1}, 8, 8, 19},
		{"empty", nil, 64, 64, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 64, 1024, 0xFFFFFFF8)
			e.r.Refill(1)
			e.take()
			e.deliver(t, c.packets...)
			if got := e.r.Peek(c.max, c.room); got != c.want {
				t.Fatalf("Peek(%d, %d) = %d, want %d", c.max, c.room, got, c.want)
			}
			// What was not claimed is there for the next Peek, from the
			// same place.
			total := 0
			for _, n := range c.packets {
				total += n
			}
			var packets int
			for e.r.More() {
				e.r.Next(make([]xsk.Desc, 0, rxring.MaxDescs))
				packets++
			}
			e.r.Release()
			if left := e.k.RX.Ready(); left != total-int(c.want) {
				t.Fatalf("%d descriptors left on the RX ring, want %d", left, total-int(c.want))
			}
		})
	}
}

// TestNext reads packets of every shape: the chain and length a good one
// arrives as, its frames Held; a bad one dropped, counted, its frames in
// the zone recycled and the others never touched.
func TestNext(t *testing.T) {
	type want struct {
		ok       bool
		descs    int
		total    int
		recycled int // frames back on the fill ring
	}
	for _, c := range []struct {
		name  string
		descs []xsk.Desc // addresses relative to frame 0 of the zone; bad marks one outside it
		want  want
		inv   uint64
		long  uint64
	}{
		{"one frame", []xsk.Desc{{Addr: headroom, Len: 60}}, want{true, 1, 60, 0}, 0, 0},
		{"chain of three", []xsk.Desc{{Addr: headroom, Len: 1792, Options: xsk.PktContd}, {Addr: 2048 + headroom, Len: 1792, Options: xsk.PktContd}, {Addr: 4096 + headroom, Len: 100}}, want{true, 3, 3684, 0}, 0, 0},
		{"unaligned-chunk encoding", []xsk.Desc{{Addr: headroom << 48, Len: 60}}, want{true, 1, 60, 0}, 0, 0},
		{"runs past its frame", []xsk.Desc{{Addr: headroom, Len: 2048 - headroom + 1}}, want{false, 1, 2048 - headroom + 1, 1}, 1, 0},
		{"second piece outside the zone", []xsk.Desc{{Addr: headroom, Len: 100, Options: xsk.PktContd}, {Addr: bad, Len: 100}}, want{false, 2, 200, 1}, 1, 0},
		{"outside the zone", []xsk.Desc{{Addr: bad, Len: 60}}, want{false, 1, 60, 0}, 1, 0},
		{"19 pieces", chainOf(19), want{false, 18, 19 * 100, 19}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 64, 1024, 0)
			base := e.reg.Frames.Base()
			// Lend every frame the packet uses, as the kernel would have
			// received into them.
			var ds []xsk.Desc
			lent := map[uint64]bool{}
			for _, d := range c.descs {
				if d.Addr != bad {
					a := xsk.Flat(d.Addr)
					d.Addr += base
					lent[e.reg.Frames.UnitAddr(a+base)] = true
				}
				ds = append(ds, d)
			}
			for range len(lent) {
				e.frames.Alloc(umem.KernelRX) // lowest addresses first: frames 0, 1, 2, …
			}
			for a := range lent {
				if s := e.reg.Frames.StateOf(a); s != umem.KernelRX {
					t.Fatalf("setup: frame %#x is %v", a, s)
				}
			}
			e.k.RX.Produce(ds...)
			e.k.RX.Publish()
			if n := e.r.Peek(64, 64); n != uint32(len(ds)) {
				t.Fatalf("Peek = %d, want %d", n, len(ds))
			}
			chain, total, ok := e.r.Next(make([]xsk.Desc, 0, rxring.MaxDescs))
			if ok != c.want.ok || total != c.want.total || len(chain) != c.want.descs || e.r.More() {
				t.Fatalf("Next = %d descs, %d bytes, %v (more: %v); want %+v", len(chain), total, ok, e.r.More(), c.want)
			}
			if ok {
				for i, d := range chain {
					if d.Addr != xsk.Flat(ds[i].Addr) || d.Len != ds[i].Len || d.Options != ds[i].Options {
						t.Errorf("chain[%d] = %+v, want %+v flattened", i, d, ds[i])
					}
					if s := e.reg.Frames.StateOf(d.Addr); s != umem.Held {
						t.Errorf("frame of chain[%d] is %v, want held", i, s)
					}
				}
			}
			e.r.Release()
			if e.k.RX.Ready() != 0 {
				t.Errorf("%d descriptors not released", e.k.RX.Ready())
			}
			if got := e.k.Fill.Ready(); got != c.want.recycled {
				t.Errorf("%d frames recycled to the fill ring, want %d", got, c.want.recycled)
			}
			if e.r.Invalid.Load() != c.inv || e.r.TooLong.Load() != c.long {
				t.Errorf("Invalid %d, TooLong %d; want %d, %d", e.r.Invalid.Load(), e.r.TooLong.Load(), c.inv, c.long)
			}
			if v := e.reg.Frames.Violations(); v != 0 {
				t.Errorf("%d ownership violations", v)
			}
			if ok {
				e.r.RecycleChain(chain)
				e.r.Release()
			}
			e.check(t)
		})
	}
}

// bad is a descriptor address outside the frames zone.
const bad = 1 << 40

func chainOf(n int) []xsk.Desc {
	ds := make([]xsk.Desc, n)
	for i := range ds {
		ds[i] = xsk.Desc{Addr: uint64(i)*2048 + headroom, Len: 100, Options: xsk.PktContd}
	}
	ds[n-1].Options = 0
	return ds
}

// TestRecycleFillFull: frames recycled while the fill ring is full go to
// the cache, free; those that fit are published by Release only.
func TestRecycleFillFull(t *testing.T) {
	e := newEnv(t, 8, 1024, 0) // fill ring of 16
	e.r.Refill(1)
	e.take()
	e.deliver(t, 1, 1, 1, 1, 1, 1)
	e.r.Refill(1) // the fill ring is full again
	held := e.hold(t, 6)
	// The kernel takes two entries: two recycled frames fit, four do not.
	e.lent = append(e.lent, e.k.Fill.TakeAddrs(2)...)
	for _, a := range held {
		e.r.Recycle(a)
	}
	if got := e.k.Fill.Ready(); got != 14 {
		t.Fatalf("fill ring shows %d before Release, want 14", got)
	}
	e.r.Release()
	if got := e.k.Fill.Ready(); got != 16 {
		t.Fatalf("fill ring holds %d after Release, want 16", got)
	}
	free := 0
	for _, a := range held {
		switch s := e.reg.Frames.StateOf(a); s {
		case umem.Free:
			free++
		case umem.KernelRX:
		default:
			t.Errorf("recycled frame %#x is %v", a, s)
		}
	}
	if free != 4 {
		t.Errorf("%d recycled frames went to the cache, want 4", free)
	}
	e.check(t)
}

// TestRecycleToLend: under a lend smaller than the ring, Recycle puts
// frames back on the fill ring only until it holds the lend; the rest go
// to the cache, and the frame freed last is the next lent.
func TestRecycleToLend(t *testing.T) {
	e := newEnv(t, 8, 1024, 0) // fill ring of 16
	e.r.SetLend(8, 8)
	e.r.Refill(1)
	// The kernel takes 5 of the 8 (a quarter or less left would be a
	// burst, growing the lend) and receives into them.
	e.lent = append(e.lent, e.k.Fill.TakeAddrs(5)...)
	e.deliver(t, 1, 1, 1, 1, 1)
	e.r.Refill(1) // 8 again
	held := e.hold(t, 5)
	// The kernel takes three: three recycled frames bring the ring back
	// to its lend of 8, the other two go to the cache.
	e.lent = append(e.lent, e.k.Fill.TakeAddrs(3)...)
	for _, a := range held {
		e.r.Recycle(a)
	}
	e.r.Release()
	if got := e.k.Fill.Ready(); got != 8 {
		t.Fatalf("fill ring holds %d after Release, want the lend, 8", got)
	}
	var free []uint64
	for _, a := range held {
		switch s := e.reg.Frames.StateOf(a); s {
		case umem.Free:
			free = append(free, a)
		case umem.KernelRX:
		default:
			t.Errorf("recycled frame %#x is %v", a, s)
		}
	}
	if len(free) != 2 {
		t.Fatalf("%d recycled frames went to the cache, want 2", len(free))
	}
	// The next refill lends the frame recycled last first: still hot.
	e.lent = append(e.lent, e.k.Fill.TakeAddrs(1)...)
	e.r.Refill(1)
	got := e.k.Fill.TakeAddrs(8)
	e.lent = append(e.lent, got...)
	if last, want := got[len(got)-1], free[len(free)-1]-headroom; last != want {
		t.Errorf("refill lent %#x, want %#x, the frame freed last", last, want)
	}
	e.check(t)
}

// TestBrace: Brace tops the fill ring up to what it is asked, beyond the
// lend and up to the ring's size, and raises the lend to it; calm
// traffic halves it again once the kernel took 64 lends.
func TestBrace(t *testing.T) {
	e := newEnv(t, 8, 1024, 0xFFFFFFF0) // fill ring of 16: indices wrap
	e.r.SetLend(4, 4)
	e.r.Refill(1)
	e.r.Brace(12)
	if got, lend := e.k.Fill.Ready(), e.r.Lend.Load(); got != 12 || lend != 12 {
		t.Fatalf("braced: fill ring holds %d, lend %d, want 12 and 12", got, lend)
	}
	e.r.Brace(64)
	if got, lend := e.k.Fill.Ready(), e.r.Lend.Load(); got != 16 || lend != 16 {
		t.Fatalf("braced past its size: fill ring holds %d, lend %d, want 16 and 16", got, lend)
	}
	taken := 0
	for e.r.Lend.Load() == 16 && taken < 2000 {
		e.lent = append(e.lent, e.k.Fill.TakeAddrs(4)...)
		for _, a := range e.lent {
			e.reg.Frames.Move(a, umem.KernelRX, umem.Held)
			e.frames.Free(a, umem.Held)
		}
		e.lent = e.lent[:0]
		taken += 4
		e.r.Refill(1)
	}
	if got := e.r.Lend.Load(); got != 8 || taken != 64*16 {
		t.Errorf("after %d taken 4 at a time the lend is %d, want 8 after %d", taken, got, 64*16)
	}
	e.check(t)
}

// TestHead: Head shows the next unclaimed descriptor, flattened, without
// claiming it, and refuses one outside the zone.
func TestHead(t *testing.T) {
	e := newEnv(t, 8, 1024, 0)
	if _, ok := e.r.Head(); ok || !e.r.Empty() {
		t.Fatal("Head or Empty on an empty ring")
	}
	e.r.Refill(1)
	e.take()
	ds := e.deliver(t, 1, 1)
	d, ok := e.r.Head()
	if !ok || d != ds[0] || e.r.Empty() {
		t.Fatalf("Head = %+v, %v; want %+v", d, ok, ds[0])
	}
	e.r.Peek(1, 64)
	e.r.Next(make([]xsk.Desc, 0, rxring.MaxDescs))
	if d, ok := e.r.Head(); !ok || d != ds[1] {
		t.Fatalf("Head after claiming one = %+v, %v; want %+v", d, ok, ds[1])
	}
	e.k.RX.Produce(xsk.Desc{Addr: bad, Len: 60})
	e.k.RX.Publish()
	e.r.Release()
	e.r.Peek(1, 64)
	e.r.Next(make([]xsk.Desc, 0, rxring.MaxDescs))
	e.r.Release()
	if _, ok := e.r.Head(); ok {
		t.Fatal("Head returned an address outside the zone")
	}
}

// TestRandomTraffic runs the fake kernel and the Ring in turns over many
// rounds with indices crossing 2^32: random packets of 1 to 20
// descriptors, random batch sizes and room, every packet sent back by
// recycling. Every descriptor is read once, in order; the books balance.
func TestRandomTraffic(t *testing.T) {
	e := newEnv(t, 64, 512, 0xFFFFFF00)
	rng := rand.New(rand.NewPCG(3, 4))
	var produced, read []xsk.Desc
	var drops, packets uint64
	chain := make([]xsk.Desc, 0, rxring.MaxDescs)
	for round := range 3000 {
		e.r.Refill(1 + uint32(rng.IntN(32)))
		e.take()
		// The kernel receives whole packets while frames and room last.
		for range rng.IntN(4) {
			n := 1 + rng.IntN(20)
			if rng.IntN(3) > 0 {
				n = 1
			}
			if n > len(e.lent) || uint32(e.k.RX.Ready()+n) > e.k.RX.Size() {
				break
			}
			produced = append(produced, e.deliver(t, n)...)
		}
		room := uint32(1 + rng.IntN(40))
		e.r.Peek(uint32(1+rng.IntN(32)), room)
		for e.r.More() {
			var ok bool
			var total int
			chain, total, ok = e.r.Next(chain)
			packets++
			n := len(chain)
			if !ok {
				drops++
				n = total / 100 // every piece is 100 bytes
			} else {
				e.r.RecycleChain(chain)
			}
			for i := range n {
				read = append(read, produced[len(read)])
				if i < len(chain) && chain[i] != read[len(read)-1] {
					t.Fatalf("round %d: descriptor %d is %+v, want %+v", round, len(read)-1, chain[i], read[len(read)-1])
				}
			}
		}
		e.r.Release()
	}
	if len(read) < 5000 {
		t.Fatalf("only %d descriptors read", len(read))
	}
	if e.r.TooLong.Load() != drops || e.r.Invalid.Load() != 0 {
		t.Fatalf("TooLong %d, Invalid %d; %d dropped", e.r.TooLong.Load(), e.r.Invalid.Load(), drops)
	}
	t.Logf("%d descriptors in %d packets, %d of 19–20 descriptors dropped", len(read), packets, drops)
	e.check(t)
}

// TestConcurrentKernel runs the fake kernel on its own goroutine (run with
// -race): it takes frames off the fill ring and receives single-frame
// packets into them while the owner reads and recycles. Every packet
// arrives once; no frame is ever owned twice.
func TestConcurrentKernel(t *testing.T) {
	const total = 100000
	e := newEnv(t, 64, 512, 0xFFFF0000)
	done := make(chan []uint64)
	go func() {
		var lent []uint64
		buf := make([]uint64, 64)
		sent := 0
		for sent < total {
			n := e.k.Fill.TakeAddrsInto(buf)
			lent = append(lent, buf[:n]...)
			k := min(len(lent), 1+rand.IntN(16), total-sent)
			var b [16]xsk.Desc
			for i := range k {
				b[i] = xsk.Desc{Addr: lent[i] + headroom, Len: uint32(60 + (sent+i)%64)}
			}
			m := e.k.RX.Produce(b[:k]...)
			lent = lent[m:]
			sent += m
			e.k.RX.Publish()
			if m == 0 {
				runtime.Gosched()
			}
		}
		done <- lent
	}()
	chain := make([]xsk.Desc, 0, rxring.MaxDescs)
	for got := 0; got < total; {
		e.r.Refill(8)
		if e.r.Peek(uint32(1+rand.IntN(64)), 64) == 0 {
			runtime.Gosched()
			continue
		}
		for e.r.More() {
			var ok bool
			chain, _, ok = e.r.Next(chain)
			if !ok || chain[0].Len != uint32(60+got%64) {
				t.Fatalf("packet %d: %+v, ok %v", got, chain, ok)
			}
			got++
			e.r.RecycleChain(chain)
		}
		e.r.Release()
	}
	e.lent = <-done
	e.check(t)
}

// BenchmarkPacket: the owner's side of one received single-frame packet:
// Peek, Next, Recycle and Release in batches of 64, the fake kernel
// turning the fill ring around between batches. ns/packet is per packet.
func BenchmarkPacket(b *testing.B) {
	const batch = 64
	e := newEnv(b, 256, 1024, 0)
	e.r.Refill(1)
	buf := make([]uint64, 512)
	descs := make([]xsk.Desc, batch)
	chain := make([]xsk.Desc, 0, rxring.MaxDescs)
	b.ReportAllocs()
	for b.Loop() {
		// The kernel's part: receive a batch into frames off the fill ring.
		n := e.k.Fill.TakeAddrsInto(buf[:batch])
		for i := range n {
			descs[i] = xsk.Desc{Addr: buf[i] + headroom, Len: 64}
		}
		e.k.RX.Produce(descs[:n]...)
		e.k.RX.Publish()

		e.r.Peek(batch, batch)
		for e.r.More() {
			var ok bool
			chain, _, ok = e.r.Next(chain)
			if !ok {
				b.Fatal("packet refused")
			}
			e.r.RecycleChain(chain)
		}
		e.r.Release()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/packet")
	if v := e.reg.Frames.Violations(); v != 0 {
		b.Fatalf("%d ownership violations", v)
	}
}
