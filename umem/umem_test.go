package umem

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

func testRegion(t testing.TB, cfg Config) *Region {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"default", DefaultConfig(2)},
		{"4k-frames-order3", Config{FrameSize: 4096, Frames: 100, InlineSlots: 3, FragOrder: 3, FragBlocks: 5, HugePages: HugePagesOff}},
		{"no-frags", Config{FrameSize: 2048, Frames: 10, InlineSlots: 0, FragOrder: 0, FragBlocks: 7, HugePages: HugePagesOff}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRegion(t, tc.cfg)
			if r.Size()%hugePage != 0 {
				t.Errorf("size %d not a multiple of 2 MiB", r.Size())
			}
			if r.Size() != tc.cfg.Size() {
				t.Errorf("region of %d bytes, Config.Size %d", r.Size(), tc.cfg.Size())
			}
			var end uint64
			for _, z := range r.Zones() {
				if z.Len() == 0 {
					continue
				}
				if z.Base() < end {
					t.Errorf("zone %s at %d overlaps previous zone ending at %d", z.Name(), z.Base(), end)
				}
				if z.Base()%uint64(z.UnitSize()) != 0 {
					t.Errorf("zone %s base %d not aligned to its unit %d", z.Name(), z.Base(), z.UnitSize())
				}
				end = z.Base() + z.Size()
				for _, a := range []uint64{z.Base(), z.Base() + z.Size() - 1} {
					if r.ZoneOf(a) != z {
						t.Errorf("ZoneOf(%d) is not %s", a, z.Name())
					}
				}
			}
			if end > uint64(r.Size()) {
				t.Errorf("zones end at %d past region size %d", end, r.Size())
			}
			if tc.cfg.FragOrder == 0 && r.Frags.Len() != 0 {
				t.Errorf("frag order 0 still has %d blocks", r.Frags.Len())
			}
			if r.Backing() == "" {
				t.Error("no backing reported")
			}
			if err := r.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConfigRejected(t *testing.T) {
	for _, cfg := range []Config{
		{FrameSize: 3000, Frames: 1},
		{FrameSize: 2048, Frames: 0},
		{FrameSize: 2048, Frames: 1, FragOrder: 5},
		{FrameSize: 2048, Frames: 1, Headroom: 4096},
	} {
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestRandomOwnership drives several caches through random alloc, kernel
// round trips and frees, checking no address is ever handed out twice.
func TestRandomOwnership(t *testing.T) {
	r := testRegion(t, Config{FrameSize: 2048, Frames: 512, HugePages: HugePagesOff})
	z := r.Frames
	caches := []*Cache{z.NewCache(64), z.NewCache(64), z.NewCache(16)}
	owned := map[uint64]State{}
	rng := rand.New(rand.NewPCG(1, 2))
	var exhausted int
	for step := 0; step < 200000; step++ {
		c := caches[rng.IntN(len(caches))]
		switch op := rng.IntN(4); {
		case op <= 1:
			to := []State{Held, KernelRX}[op]
			a, ok := c.Alloc(to)
			if !ok {
				exhausted++
				// Exhausted only when every unit is owned or stocked
				// in another worker's cache.
				stocked := 0
				for _, o := range caches {
					stocked += o.Len()
				}
				if len(owned)+stocked != z.Len() {
					t.Fatalf("step %d: exhausted with %d owned and %d cached of %d", step, len(owned), stocked, z.Len())
				}
				continue
			}
			if _, dup := owned[a]; dup {
				t.Fatalf("step %d: address %#x handed out twice", step, a)
			}
			if z.UnitAddr(a) != a {
				t.Fatalf("address %#x not unit aligned", a)
			}
			owned[a] = to
		case op == 2 && len(owned) > 0: // move through the TX side
			for a, s := range owned {
				if s == Held {
					if !z.Move(a+100, Held, KernelTX) {
						t.Fatalf("move of %#x refused", a)
					}
					owned[a] = KernelTX
				}
				break
			}
		case len(owned) > 0: // free from any worker, at an inner offset
			for a, s := range owned {
				c.Free(a+uint64(rng.IntN(2048)), s)
				delete(owned, a)
				break
			}
		}
	}
	for a, s := range owned {
		caches[0].Free(a, s)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if c := z.Counts(); c[Free] != z.Len() {
		t.Fatalf("counts %v after freeing everything", c)
	}
	if exhausted == 0 {
		t.Log("zone never exhausted; the exhaustion branch was not exercised")
	}
}

func TestViolations(t *testing.T) {
	r := testRegion(t, Config{FrameSize: 2048, Frames: 8, HugePages: HugePagesOff})
	c := r.Frames.NewCache(8)
	a, _ := c.Alloc(Held)
	c.Free(a, Held)
	c.Free(a, Held) // double free: counted, not listed twice
	if v := r.Frames.Violations(); v != 1 {
		t.Fatalf("violations = %d after a double free, want 1", v)
	}
	seen := map[uint64]bool{}
	for {
		b, ok := c.Alloc(Held)
		if !ok {
			break
		}
		if seen[b] {
			t.Fatalf("%#x handed out twice after a double free", b)
		}
		seen[b] = true
	}
	if len(seen) != 8 {
		t.Fatalf("got %d units, want 8", len(seen))
	}
	if err := r.Check(); err == nil {
		t.Fatal("Check passed with a violation recorded")
	}
}

func TestReclaimAndLeak(t *testing.T) {
	r := testRegion(t, Config{FrameSize: 2048, Frames: 16, HugePages: HugePagesOff})
	c := r.Frames.NewCache(4)
	for range 10 {
		if _, ok := c.Alloc(KernelRX); !ok {
			t.Fatal("alloc failed")
		}
	}
	held, _ := c.Alloc(Held)
	if got := r.InUse(); got != 11 {
		t.Fatalf("InUse = %d, want 11", got)
	}
	if n := r.Frames.Reclaim(KernelRX); n != 10 {
		t.Fatalf("reclaimed %d, want 10", n)
	}
	if got := r.InUse(); got != 1 {
		t.Fatalf("InUse = %d after reclaim, want the 1 held unit", got)
	}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	c.Free(held, Held)
	if r.InUse() != 0 {
		t.Fatal("unit still in use after free")
	}
}

func BenchmarkCacheAllocFree(b *testing.B) {
	r := testRegion(b, DefaultConfig(2))
	c := r.Frames.NewCache(512)
	var addrs [64]uint64
	b.ReportAllocs()
	for b.Loop() {
		for i := range addrs {
			addrs[i], _ = c.Alloc(Held)
		}
		for _, a := range addrs {
			c.Free(a, Held)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/pair")
}

func BenchmarkMove(b *testing.B) {
	r := testRegion(b, DefaultConfig(2))
	c := r.Frames.NewCache(512)
	a, _ := c.Alloc(Held)
	b.ReportAllocs()
	for b.Loop() {
		r.Frames.Move(a, Held, KernelTX)
		r.Frames.Move(a, KernelTX, Held)
	}
}

// TestMapSpace: a successor maps the regions another process made from
// their file (here a second mapping of it in this one): the same bytes,
// written through either mapping; every unit's state restored, each Free
// unit back in its pool once, the others where the predecessor had them;
// a file of another size refused.
func TestMapSpace(t *testing.T) {
	cfgs := []Config{
		{FrameSize: 2048, Frames: 512, InlineSlots: 64, FragOrder: 3, FragBlocks: 4, HugePages: HugePagesOff},
		{FrameSize: 4096, Frames: 128, InlineSlots: 0, HugePages: HugePagesOff},
	}
	old, err := NewSpace(cfgs...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range old {
			r.Close()
		}
	}()
	c := old[0].Frames.NewCache(64)
	var lent []uint64
	for range 100 {
		a, ok := c.Alloc(KernelRX)
		if !ok {
			t.Fatal("alloc")
		}
		lent = append(lent, a)
	}
	c.Flush()
	copy(old[0].Mem()[lent[7]:], "lent frame seven")
	states := old[0].Frames.States()

	dup, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(old[0].File().Fd())), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	next, err := MapSpace(dup, 0, cfgs...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range next {
			r.Close()
		}
	}()
	if got := string(next[0].Mem()[lent[7] : lent[7]+16]); got != "lent frame seven" {
		t.Errorf("the successor reads %q at frame %#x", got, lent[7])
	}
	copy(next[1].Bytes(), "written by the successor")
	if got := string(old[1].Bytes()[:24]); got != "written by the successor" {
		t.Errorf("the predecessor reads %q", got)
	}
	if next[0].Backing() != Backing4K || next[1].Base() != old[1].Base() {
		t.Errorf("backing %v, second region at %#x (was %#x)", next[0].Backing(), next[1].Base(), old[1].Base())
	}
	if err := next[0].Frames.Restore(states); err != nil {
		t.Fatal(err)
	}
	if got := next[0].Frames.Counts(); got[KernelRX] != 100 || got[Free] != 412 {
		t.Errorf("restored counts %v, want 100 kernel-rx, 412 free", got)
	}
	for _, a := range lent {
		if s := next[0].Frames.StateOf(a); s != KernelRX {
			t.Fatalf("frame %#x: %v, want kernel-rx", a, s)
		}
	}
	if err := next[0].Check(); err != nil {
		t.Error(err)
	}
	if err := next[0].Frames.Restore(states[:10]); err == nil {
		t.Error("Restore of 10 states for 512 units: no error")
	}
	short, _ := os.CreateTemp(t.TempDir(), "short")
	short.Truncate(4096)
	if _, err := MapSpace(short, 0, cfgs...); err == nil {
		t.Error("MapSpace of a file of another size: no error")
	}
}
