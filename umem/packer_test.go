package umem

import (
	"math/rand/v2"
	"testing"
)

// fragRegion is a region with blocks frag blocks of 32 KiB.
func fragRegion(t testing.TB, blocks int) *Region {
	t.Helper()
	return testRegion(t, Config{FrameSize: 2048, Frames: 8, InlineSlots: 16, FragOrder: 3, FragBlocks: blocks, HugePages: HugePagesOff})
}

func blockOf(z *Zone, addr uint64) uint64 { return z.UnitAddr(addr) }

func TestPackerPlaceAlignment(t *testing.T) {
	for _, align := range []int{64, 2048, 4096} {
		r := fragRegion(t, 2)
		z := r.Frags
		p := z.NewPacker(4, align)
		var prevEnd uint64
		var block uint64
		for i, n := range []int{1, 60, 64, 65, 1514, 0, 4096, 4097, 9000} {
			a, ok := p.Place(n, 1)
			if !ok {
				t.Fatalf("align %d: Place(%d) failed", align, n)
			}
			if a%uint64(align) != 0 {
				t.Errorf("align %d: Place(%d) = %#x, not aligned", align, n, a)
			}
			if !z.Contains(a) || !z.Contains(a+uint64(max(n, 1))-1) {
				t.Fatalf("align %d: Place(%d) = %#x, outside the zone", align, n, a)
			}
			if i == 0 {
				block = blockOf(z, a)
				if a != block {
					t.Errorf("align %d: first packet at %#x, not at its block's start %#x", align, a, block)
				}
			} else if blockOf(z, a) == block {
				if a < prevEnd {
					t.Errorf("align %d: Place(%d) = %#x overlaps the previous packet ending at %#x", align, n, a, prevEnd)
				}
				if want := (prevEnd + uint64(align) - 1) / uint64(align) * uint64(align); a != want {
					t.Errorf("align %d: Place(%d) = %#x, want the next boundary %#x", align, n, a, want)
				}
			} else if a != blockOf(z, a) {
				t.Errorf("align %d: packet in a fresh block at %#x, not at its start", align, a)
			}
			if blockOf(z, a) != blockOf(z, a+uint64(max(n, 1))-1) {
				t.Errorf("align %d: Place(%d) = %#x crosses a block boundary", align, n, a)
			}
			block = blockOf(z, a)
			prevEnd = a + uint64(n)
		}
	}
}

func TestPackerTooLarge(t *testing.T) {
	r := fragRegion(t, 2)
	p := r.Frags.NewPacker(4, 64)
	size := r.Frags.UnitSize()
	for _, n := range []int{size + 1, size + 64, 1 << 20} {
		if a, ok := p.Place(n, 1); ok {
			t.Errorf("Place(%d) into %d-byte blocks = %#x, ok", n, size, a)
		}
	}
	a, ok := p.Place(size, 8)
	if !ok || a != blockOf(r.Frags, a) {
		t.Fatalf("Place of a whole block = %#x, %v", a, ok)
	}
	for range 8 {
		p.Release(a)
	}
	p.Close()
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.InUse() != 0 {
		t.Fatalf("%d units in use after releasing everything", r.InUse())
	}
}

func TestPackerNoZone(t *testing.T) {
	r := testRegion(t, Config{FrameSize: 2048, Frames: 8, HugePages: HugePagesOff})
	p := r.Frags.NewPacker(4, 64)
	if _, ok := p.Place(100, 1); ok {
		t.Fatal("Place succeeded on an empty frag zone")
	}
	p.Close()
}

// TestPackerReuseAfterCompletion fills a block, moves on, and checks the
// block returns only when the last of its descriptors completes, and that
// it is then handed out again.
func TestPackerReuseAfterCompletion(t *testing.T) {
	r := fragRegion(t, 2)
	z := r.Frags
	p := z.NewPacker(2, 64)
	const pkt = 8192 // 4 per 32 KiB block, 2 descriptors each
	var first []uint64
	for range 4 {
		a, ok := p.Place(pkt, 2)
		if !ok {
			t.Fatal("Place failed")
		}
		first = append(first, a)
	}
	blockA := blockOf(z, first[0])
	for _, a := range first {
		if blockOf(z, a) != blockA {
			t.Fatalf("packet %#x not in the first block %#x", a, blockA)
		}
	}
	b, ok := p.Place(pkt, 2) // retires block A
	if !ok || blockOf(z, b) == blockA {
		t.Fatalf("fifth packet at %#x, %v: want a fresh block", b, ok)
	}
	// Release every descriptor of A but one: A stays held, and with the
	// zone's only other block current, there is nothing to hand out.
	for i, a := range first {
		p.Release(a)
		if i < 3 {
			p.Release(a + 4096)
		}
	}
	if s := z.StateOf(blockA); s != Held {
		t.Fatalf("block A %v with one descriptor in flight", s)
	}
	for range 3 {
		if _, ok := p.Place(pkt, 2); !ok {
			t.Fatal("Place into the current block failed")
		}
	}
	if a, ok := p.Place(pkt, 2); ok {
		t.Fatalf("Place = %#x while block A still has a descriptor in flight", a)
	}
	p.Release(first[3] + 4096) // A's last descriptor
	if s := z.StateOf(blockA); s != Free {
		t.Fatalf("block A %v after its last descriptor completed", s)
	}
	a, ok := p.Place(pkt, 2)
	if !ok || blockOf(z, a) != blockA {
		t.Fatalf("Place = %#x, %v: want block A %#x reused", a, ok, blockA)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestPackerCloseFreesIdleBlock(t *testing.T) {
	r := fragRegion(t, 2)
	z := r.Frags
	p := z.NewPacker(2, 64)
	a, _ := p.Place(1000, 1)
	p.Release(a)
	if s := z.StateOf(a); s != Held {
		t.Fatalf("current block %v after its packets completed: the packer's own reference should hold it", s)
	}
	p.Close()
	if s := z.StateOf(a); s != Free {
		t.Fatalf("block %v after Close with nothing in flight", s)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.InUse() != 0 {
		t.Fatalf("InUse = %d", r.InUse())
	}
}

func TestPackerCloseWithInFlight(t *testing.T) {
	r := fragRegion(t, 2)
	z := r.Frags
	p := z.NewPacker(2, 64)
	a, _ := p.Place(9000, 3)
	p.Close()
	if s := z.StateOf(a); s != Held {
		t.Fatalf("block %v after Close with 3 descriptors in flight", s)
	}
	for i := range 3 {
		// A completion is reaped by whichever worker: release through
		// another packer on the same zone.
		q := z.NewPacker(2, 64)
		q.Release(a + uint64(i)*4096)
		q.Close()
	}
	if s := z.StateOf(a); s != Free {
		t.Fatalf("block %v after its last descriptor completed", s)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestPackerExhaustion(t *testing.T) {
	r := fragRegion(t, 3)
	z := r.Frags
	p := z.NewPacker(2, 64)
	size := z.UnitSize()
	var addrs []uint64
	for range 3 {
		a, ok := p.Place(size, 1)
		if !ok {
			t.Fatal("Place failed before the zone was exhausted")
		}
		addrs = append(addrs, a)
	}
	for range 5 {
		if a, ok := p.Place(1, 1); ok {
			t.Fatalf("Place = %#x with every block in use", a)
		}
	}
	p.Release(addrs[1])
	a, ok := p.Place(100, 1)
	if !ok || blockOf(z, a) != addrs[1] {
		t.Fatalf("Place after a release = %#x, %v: want block %#x", a, ok, addrs[1])
	}
	p.Release(addrs[0])
	p.Release(addrs[2])
	p.Release(a)
	p.Close()
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.InUse() != 0 {
		t.Fatalf("InUse = %d", r.InUse())
	}
}

func TestPackerDoubleRelease(t *testing.T) {
	r := fragRegion(t, 2)
	z := r.Frags
	p := z.NewPacker(2, 64)
	a, _ := p.Place(100, 1)
	p.Close()
	p.Release(a)
	if err := r.Check(); err != nil {
		t.Fatalf("after a clean release: %v", err)
	}
	p.Release(a) // the block is free: freed exactly once, the extra counted
	if v := z.Violations(); v != 1 {
		t.Fatalf("violations = %d after a double release, want 1", v)
	}
	if err := r.Check(); err == nil {
		t.Fatal("Check passed after a double release")
	}
	// The block is listed free once: two allocations get two blocks.
	p.Close() // flush the packer's cache to the pool
	c := z.NewCache(4)
	x, _ := c.Alloc(Held)
	y, ok := c.Alloc(Held)
	if !ok || x == y {
		t.Fatalf("allocations %#x, %#x (%v) after a double release", x, y, ok)
	}
	if _, ok := c.Alloc(Held); ok {
		t.Fatal("a third block out of a 2-block zone")
	}
}

func TestPackerReleaseOutsideZone(t *testing.T) {
	r := fragRegion(t, 2)
	p := r.Frags.NewPacker(2, 64)
	p.Release(r.Frames.Base())
	p.Release(r.Frags.Base() + r.Frags.Size())
	if v := r.Frags.Violations(); v != 2 {
		t.Fatalf("violations = %d, want 2", v)
	}
}

// TestPackerRandom drives two packers on one zone with random packets and
// completions reaped by either, checking that no two live packets ever
// overlap, that a fresh block never has descriptors in flight, and that
// everything returns.
func TestPackerRandom(t *testing.T) {
	r := fragRegion(t, 6)
	z := r.Frags
	packers := []*Packer{z.NewPacker(2, 64), z.NewPacker(2, 64)}
	rng := rand.New(rand.NewPCG(9, 10))

	type pkt struct {
		addr  uint64
		n     int
		descs []uint64 // addresses still to complete
	}
	var live []*pkt
	owner := make(map[uint64]*pkt) // 64-byte granule → live packet
	inflight := map[uint64]int{}   // block → descriptors in flight
	cur := make([]uint64, len(packers))
	var failed int
	for step := range 40000 {
		if rng.IntN(2) == 0 || len(live) == 0 {
			i := rng.IntN(len(packers))
			n := 1 + rng.IntN(20000)
			k := (n + 4095) / 4096
			a, ok := packers[i].Place(n, k)
			if !ok {
				failed++
				continue
			}
			blk := blockOf(z, a)
			if blk != blockOf(z, a+uint64(n)-1) {
				t.Fatalf("step %d: packet %#x+%d crosses a block", step, a, n)
			}
			if blk != cur[i] && inflight[blk] != 0 {
				t.Fatalf("step %d: block %#x handed out with %d descriptors in flight", step, blk, inflight[blk])
			}
			cur[i] = blk
			p := &pkt{addr: a, n: n}
			for g := a; g < a+uint64(n); g += 64 {
				if o := owner[g]; o != nil {
					t.Fatalf("step %d: packet %#x+%d overlaps live packet %#x+%d", step, a, n, o.addr, o.n)
				}
				owner[g] = p
			}
			for j := range k {
				p.descs = append(p.descs, a+uint64(j)*4096)
			}
			inflight[blk] += k
			live = append(live, p)
			continue
		}
		j := rng.IntN(len(live))
		p := live[j]
		d := rng.IntN(len(p.descs))
		packers[rng.IntN(len(packers))].Release(p.descs[d])
		inflight[blockOf(z, p.addr)]--
		p.descs = append(p.descs[:d], p.descs[d+1:]...)
		if len(p.descs) == 0 {
			for g := p.addr; g < p.addr+uint64(p.n); g += 64 {
				delete(owner, g)
			}
			live = append(live[:j], live[j+1:]...)
		}
	}
	for _, p := range live {
		for _, d := range p.descs {
			packers[0].Release(d)
		}
	}
	for _, p := range packers {
		p.Close()
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if r.InUse() != 0 {
		t.Fatalf("InUse = %d after everything completed", r.InUse())
	}
	if failed == 0 {
		t.Log("zone never exhausted")
	}
}

func TestPackerZeroAllocs(t *testing.T) {
	r := fragRegion(t, 4)
	p := r.Frags.NewPacker(4, 64)
	if a := testing.AllocsPerRun(1000, func() {
		a, ok := p.Place(9000, 3)
		if ok {
			p.Release(a)
			p.Release(a + 4096)
			p.Release(a + 8192)
		}
	}); a != 0 {
		t.Errorf("%v allocs per Place+Release", a)
	}
}

func BenchmarkPackerPlaceRelease(b *testing.B) {
	r := fragRegion(b, 4)
	p := r.Frags.NewPacker(4, 64)
	b.ReportAllocs()
	for b.Loop() {
		a, ok := p.Place(1514, 1)
		if !ok {
			b.Fatal("Place failed")
		}
		p.Release(a)
	}
}
