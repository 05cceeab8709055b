package inline

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

const (
	testInlineSlots = 32
	testFragBlocks  = 3 // of 32 KiB
	testFrames      = 32
)

var testPolicy = linearize.Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 4096}

func newRegion(t testing.TB) *umem.Region {
	t.Helper()
	r, err := umem.New(umem.Config{
		FrameSize: 4096, Frames: testFrames, InlineSlots: testInlineSlots,
		FragOrder: 3, FragBlocks: testFragBlocks, HugePages: umem.HugePagesOff,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newBuilder returns a builder on a fresh region; closing it and checking
// the region's accounting is left to the test, which knows what it holds.
func newBuilder(t testing.TB, align int) (*Builder, *umem.Region) {
	t.Helper()
	r := newRegion(t)
	return NewBuilder(r, testPolicy, 8, align), r
}

func closeAndCheck(t testing.TB, b *Builder, r *umem.Region) {
	t.Helper()
	b.Close()
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if n := r.InUse(); n != 0 {
		t.Fatalf("%d units still in use", n)
	}
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// rxFrames writes the parts into distinct frames of r, as a multi-buffer
// packet would arrive (256 bytes of headroom), and returns its descriptors
// and the frames to free.
func rxFrames(t testing.TB, r *umem.Region, c *umem.Cache, parts ...[]byte) (descs []xsk.Desc, frames []uint64) {
	t.Helper()
	mem := r.Mem()
	for i, p := range parts {
		f, ok := c.Alloc(umem.Held)
		if !ok {
			t.Fatal("out of frames")
		}
		frames = append(frames, f)
		a := f + 256
		copy(mem[a:], p)
		d := xsk.Desc{Addr: a, Len: uint32(len(p))}
		if i < len(parts)-1 {
			d.Options = xsk.PktContd
		}
		descs = append(descs, d)
	}
	return descs, frames
}

func freeFrames(c *umem.Cache, frames []uint64) {
	for _, f := range frames {
		c.Free(f, umem.Held)
	}
}

// gather reads the bytes a descriptor list describes.
func gather(mem []byte, descs []xsk.Desc) []byte {
	out := make([]byte, linearize.Total(descs))
	return out[:linearize.Gather(out, mem, descs)]
}

// checkOut checks descriptors made by Pack/Repack: adjacent, at most a
// chunk each, chained with PktContd, in the frag zone, carrying pkt.
func checkOut(t testing.TB, b *Builder, r *umem.Region, out []xsk.Desc, pkt []byte) {
	t.Helper()
	chunk := b.Policy.ChunkSize
	if want := linearize.Count(len(pkt), chunk); len(out) != want {
		t.Fatalf("%d descriptors for %d bytes, want %d", len(out), len(pkt), want)
	}
	for i, d := range out {
		if int(d.Len) > chunk || d.Len == 0 {
			t.Fatalf("desc %d: %d bytes (chunk %d)", i, d.Len, chunk)
		}
		if i > 0 && d.Addr != out[i-1].Addr+uint64(out[i-1].Len) {
			t.Fatalf("desc %d at %#x not adjacent to the previous", i, d.Addr)
		}
		if last := i == len(out)-1; (d.Options == xsk.PktContd) == last || d.Options&^xsk.PktContd != 0 {
			t.Fatalf("desc %d of %d: options %#x", i, len(out), d.Options)
		}
		if !r.Frags.Contains(d.Addr) || !r.Frags.Contains(d.Addr+uint64(d.Len)-1) {
			t.Fatalf("desc %d at %#x+%d outside the frag zone", i, d.Addr, d.Len)
		}
		if r.Frags.UnitAddr(d.Addr) != r.Frags.UnitAddr(out[0].Addr) {
			t.Fatalf("packet spans two frag blocks")
		}
	}
	if got := gather(r.Mem(), out); !bytes.Equal(got, pkt) {
		t.Fatalf("bytes at the descriptors differ from the packet")
	}
}

func TestNewBuilderPolicy(t *testing.T) {
	r := newRegion(t)
	b := NewBuilder(r, linearize.Policy{InlineMax: 1000, MaxTxFrags: 4, ChunkSize: 4096}, 8, 64)
	if b.Policy.InlineMax != umem.InlineSlotSize || !b.Policy.FragBlocks {
		t.Errorf("policy %+v: want InlineMax clamped to %d and FragBlocks on", b.Policy, umem.InlineSlotSize)
	}
	closeAndCheck(t, b, r)

	r2, err := umem.New(umem.Config{FrameSize: 2048, Frames: 8, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	b2 := NewBuilder(r2, linearize.Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 2048, FragBlocks: true}, 8, 64)
	if b2.Policy.InlineMax != 0 || b2.Policy.FragBlocks {
		t.Errorf("policy %+v on a region without inline and frag zones", b2.Policy)
	}
	if _, ok := b2.Inline(make([]byte, 60)); ok {
		t.Error("Inline succeeded without an inline zone")
	}
	if _, _, ok := b2.InlineGather([]xsk.Desc{{Addr: 0, Len: 10}}); ok {
		t.Error("InlineGather succeeded without an inline zone")
	}
	var out [linearize.MaxDescs]xsk.Desc
	if n := b2.Pack(make([]byte, 100), out[:]); n != 0 {
		t.Error("Pack succeeded without a frag zone")
	}
	if n := b2.Repack([]xsk.Desc{{Addr: 0, Len: 10}}, out[:]); n != 0 {
		t.Error("Repack succeeded without a frag zone")
	}
	if b2.Release(0) || b2.Release(r2.Frames.Base()) {
		t.Error("Release claimed an address with no inline or frag zone")
	}
	b2.Close()
	if err := r2.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestInline(t *testing.T) {
	b, r := newBuilder(t, 64)
	rng := rand.New(rand.NewPCG(1, 2))
	mem := r.Mem()
	for _, n := range []int{1, 14, 60, 64, 128, 255, 256} {
		pkt := randomBytes(rng, n)
		addr, ok := b.Inline(pkt)
		if !ok {
			t.Fatalf("Inline(%d bytes) failed", n)
		}
		if !r.Inline.Contains(addr) || addr%umem.InlineSlotSize != r.Inline.Base()%umem.InlineSlotSize {
			t.Fatalf("Inline = %#x: not an inline slot", addr)
		}
		if !bytes.Equal(mem[addr:addr+uint64(n)], pkt) {
			t.Fatalf("Inline(%d bytes): slot content differs", n)
		}
		if s := r.Inline.StateOf(addr); s != umem.KernelTX {
			t.Fatalf("slot %v, want %v", s, umem.KernelTX)
		}
		if !b.Release(addr) {
			t.Fatalf("Release(%#x) = false", addr)
		}
		if s := r.Inline.StateOf(addr); s != umem.Free {
			t.Fatalf("slot %v after Release", s)
		}
	}
	for _, n := range []int{257, 1514} {
		if addr, ok := b.Inline(make([]byte, n)); ok {
			t.Fatalf("Inline(%d bytes) = %#x, ok", n, addr)
		}
	}
	closeAndCheck(t, b, r)
}

func TestInlineExhaustion(t *testing.T) {
	b, r := newBuilder(t, 64)
	pkt := make([]byte, 64)
	seen := map[uint64]byte{}
	for i := range testInlineSlots {
		pkt[0] = byte(i)
		addr, ok := b.Inline(pkt)
		if !ok {
			t.Fatalf("Inline failed after %d of %d slots", i, testInlineSlots)
		}
		if _, dup := seen[addr]; dup {
			t.Fatalf("slot %#x handed out twice", addr)
		}
		seen[addr] = byte(i)
	}
	for range 3 {
		if addr, ok := b.Inline(pkt); ok {
			t.Fatalf("Inline = %#x with every slot in flight", addr)
		}
		if addr, _, ok := b.InlineGather(nil); ok {
			t.Fatalf("InlineGather = %#x with every slot in flight", addr)
		}
	}
	for a, i := range seen {
		if r.Mem()[a] != i {
			t.Fatalf("slot %#x holds packet %d, want %d: slots overlap", a, r.Mem()[a], i)
		}
		if !b.Release(a) {
			t.Fatalf("Release(%#x) = false", a)
		}
	}
	if _, ok := b.Inline(pkt); !ok {
		t.Fatal("Inline failed after every slot was released")
	}
	// That slot is still in flight: Check must not call it free.
	if r.InUse() != 1 {
		t.Fatalf("InUse = %d, want the 1 slot in flight", r.InUse())
	}
	for a := range seen {
		if r.Inline.StateOf(a) == umem.KernelTX {
			b.Release(a)
		}
	}
	closeAndCheck(t, b, r)
}

func TestInlineGather(t *testing.T) {
	b, r := newBuilder(t, 64)
	rng := rand.New(rand.NewPCG(3, 4))
	fc := r.Frames.NewCache(8)
	parts := [][]byte{randomBytes(rng, 60), randomBytes(rng, 100), randomBytes(rng, 96)}
	descs, frames := rxFrames(t, r, fc, parts...)
	addr, n, ok := b.InlineGather(descs)
	if !ok || n != 256 {
		t.Fatalf("InlineGather = %#x, %d, %v", addr, n, ok)
	}
	if want := bytes.Join(parts, nil); !bytes.Equal(r.Mem()[addr:addr+uint64(n)], want) {
		t.Fatal("slot content differs from the concatenation")
	}
	if s := r.Inline.StateOf(addr); s != umem.KernelTX {
		t.Fatalf("slot %v", s)
	}
	if !b.Release(addr) {
		t.Fatal("Release = false")
	}

	// Too long for a slot, or out of bounds: no slot is kept.
	long, lframes := rxFrames(t, r, fc, make([]byte, 200), make([]byte, 57))
	bad := []xsk.Desc{descs[0], {Addr: uint64(r.Size()) - 10, Len: 20}}
	for _, ds := range [][]xsk.Desc{long, bad, {{Addr: ^uint64(0) - 5, Len: 10}}} {
		if a, n, ok := b.InlineGather(ds); ok || n != 0 || a != 0 {
			t.Fatalf("InlineGather(%v) = %#x, %d, %v", ds, a, n, ok)
		}
		if r.Inline.Counts()[umem.KernelTX] != 0 {
			t.Fatal("a failed InlineGather kept its slot")
		}
	}
	freeFrames(fc, frames)
	freeFrames(fc, lframes)
	fc.Flush()
	if r.Inline.Violations() != 0 {
		t.Fatalf("%d violations", r.Inline.Violations())
	}
	closeAndCheck(t, b, r)
}

func TestPack(t *testing.T) {
	for _, align := range []int{64, umem.ChunkMax} {
		b, r := newBuilder(t, align)
		rng := rand.New(rand.NewPCG(5, uint64(align)))
		var out [linearize.MaxDescs]xsk.Desc
		var inFlight []xsk.Desc
		for _, size := range []int{1, 257, 1514, 4096, 4097, 9000, 8192, 32 << 10} {
			pkt := randomBytes(rng, size)
			n := b.Pack(pkt, out[:])
			if n == 0 {
				t.Fatalf("align %d: Pack(%d bytes) failed", align, size)
			}
			checkOut(t, b, r, out[:n], pkt)
			if out[0].Addr%uint64(align) != 0 {
				t.Fatalf("align %d: packet at %#x", align, out[0].Addr)
			}
			inFlight = append(inFlight, out[:n]...)
		}
		if n := b.Pack(make([]byte, 32<<10+1), out[:]); n != 0 {
			t.Fatalf("Pack of more than a block = %d", n)
		}
		if n := b.Pack(make([]byte, 9000), out[:2]); n != 0 {
			t.Fatalf("Pack into 2 descriptors of room = %d", n)
		}
		for _, d := range inFlight {
			if !b.Release(d.Addr) {
				t.Fatalf("Release(%#x) = false", d.Addr)
			}
		}
		closeAndCheck(t, b, r)
	}
}

func TestRepack(t *testing.T) {
	b, r := newBuilder(t, 64)
	rng := rand.New(rand.NewPCG(7, 8))
	fc := r.Frames.NewCache(16)
	var out [linearize.MaxDescs]xsk.Desc
	for _, lens := range [][]int{
		{1800, 1800, 1800, 1800, 1800}, // 9000 in 5 → 3
		{1792, 1792, 1792, 1792, 1832},
		{100, 100, 100, 100, 100, 100},       // 600 in 6 → 1
		{4096, 4096, 4096, 4096, 4096, 1},    // 20481 → 6
		{3000, 3000, 3000, 3000, 3000, 3000}, // 18000 → 5
	} {
		var parts [][]byte
		for _, l := range lens {
			parts = append(parts, randomBytes(rng, l))
		}
		descs, frames := rxFrames(t, r, fc, parts...)
		n := b.Repack(descs, out[:])
		if n == 0 {
			t.Fatalf("Repack(%v) failed", lens)
		}
		pkt := bytes.Join(parts, nil)
		checkOut(t, b, r, out[:n], pkt)
		freeFrames(fc, frames)
		for _, d := range out[:n] {
			if !b.Release(d.Addr) {
				t.Fatalf("Release(%#x) = false", d.Addr)
			}
		}
	}
	// A descriptor outside the region: nothing is kept.
	descs, frames := rxFrames(t, r, fc, make([]byte, 1800), make([]byte, 1800))
	descs = append(descs, xsk.Desc{Addr: uint64(r.Size()) - 100, Len: 1800})
	if n := b.Repack(descs, out[:]); n != 0 {
		t.Fatalf("Repack with an out-of-bounds descriptor = %d", n)
	}
	if n := b.Repack(descs[:2], out[:0]); n != 0 {
		t.Fatalf("Repack with no room in out = %d", n)
	}
	freeFrames(fc, frames)
	fc.Flush()
	closeAndCheck(t, b, r)
}

// TestReleaseFreesBlock packs packets until the builder moves to a second
// block and checks the first is freed when, and only when, its last
// descriptor is released.
func TestReleaseFreesBlock(t *testing.T) {
	b, r := newBuilder(t, 64)
	var out [linearize.MaxDescs]xsk.Desc
	var first []xsk.Desc
	pkt := make([]byte, 9000)
	n := b.Pack(pkt, out[:])
	block := r.Frags.UnitAddr(out[0].Addr)
	for n > 0 && r.Frags.UnitAddr(out[0].Addr) == block {
		first = append(first, out[:n]...)
		n = b.Pack(pkt, out[:])
	}
	if n == 0 {
		t.Fatal("Pack failed")
	}
	second := append([]xsk.Desc(nil), out[:n]...)
	for i, d := range first {
		if s := r.Frags.StateOf(block); s != umem.Held {
			t.Fatalf("block %v with %d descriptors in flight", s, len(first)-i)
		}
		b.Release(d.Addr)
	}
	if s := r.Frags.StateOf(block); s != umem.Free {
		t.Fatalf("block %v after its %d descriptors completed", s, len(first))
	}
	// The current block is held by the builder until Close, even idle.
	for _, d := range second {
		b.Release(d.Addr)
	}
	if s := r.Frags.StateOf(second[0].Addr); s != umem.Held {
		t.Fatalf("current block %v", s)
	}
	closeAndCheck(t, b, r)
	if s := r.Frags.StateOf(second[0].Addr); s != umem.Free {
		t.Fatalf("current block %v after Close", s)
	}
}

func TestFragExhaustion(t *testing.T) {
	b, r := newBuilder(t, 64)
	var out [linearize.MaxDescs]xsk.Desc
	var inFlight []xsk.Desc
	pkt := make([]byte, 16<<10)
	for range 2 * testFragBlocks {
		n := b.Pack(pkt, out[:])
		if n == 0 {
			t.Fatalf("Pack failed after %d descriptors", len(inFlight))
		}
		inFlight = append(inFlight, out[:n]...)
	}
	for range 3 {
		if n := b.Pack(pkt, out[:]); n != 0 {
			t.Fatal("Pack succeeded with every block full")
		}
	}
	for _, d := range inFlight {
		b.Release(d.Addr)
	}
	if n := b.Pack(pkt, out[:]); n == 0 {
		t.Fatal("Pack failed after every block completed")
	} else {
		for _, d := range out[:n] {
			b.Release(d.Addr)
		}
	}
	closeAndCheck(t, b, r)
}

func TestReleaseOutside(t *testing.T) {
	b, r := newBuilder(t, 64)
	fc := r.Frames.NewCache(4)
	frame, _ := fc.Alloc(umem.Held)
	for _, a := range []uint64{frame, frame + 300, r.Frames.Base(), uint64(r.Size()), uint64(r.Size()) + 1<<20, ^uint64(0), r.Frags.Base() + r.Frags.Size()} {
		if r.Inline.Contains(a) || r.Frags.Contains(a) {
			continue
		}
		if b.Release(a) {
			t.Errorf("Release(%#x) outside the inline and frag zones = true", a)
		}
	}
	fc.Free(frame, umem.Held)
	if v := r.Inline.Violations() + r.Frags.Violations() + r.Frames.Violations(); v != 0 {
		t.Fatalf("%d violations", v)
	}
	closeAndCheck(t, b, r)
}

func TestBuilderZeroAllocs(t *testing.T) {
	b, r := newBuilder(t, 64)
	fc := r.Frames.NewCache(8)
	parts := [][]byte{make([]byte, 1800), make([]byte, 1800), make([]byte, 1800), make([]byte, 1800), make([]byte, 1800)}
	descs, frames := rxFrames(t, r, fc, parts...)
	pkt := make([]byte, 64)
	var out [linearize.MaxDescs]xsk.Desc
	if a := testing.AllocsPerRun(200, func() {
		if addr, ok := b.Inline(pkt); ok {
			b.Release(addr)
		}
		n := b.Repack(descs, out[:])
		for _, d := range out[:n] {
			b.Release(d.Addr)
		}
	}); a != 0 {
		t.Errorf("%v allocs per Inline+Repack+Release", a)
	}
	freeFrames(fc, frames)
	fc.Flush()
	closeAndCheck(t, b, r)
}

func BenchmarkInlineCopy64(b *testing.B) {
	bl, _ := newBuilder(b, 64)
	pkt := make([]byte, 64)
	b.SetBytes(64)
	b.ReportAllocs()
	for b.Loop() {
		addr, ok := bl.Inline(pkt)
		if !ok {
			b.Fatal("Inline failed")
		}
		bl.Release(addr)
	}
}

func BenchmarkRepack9000(b *testing.B) {
	bl, r := newBuilder(b, 64)
	fc := r.Frames.NewCache(8)
	descs, _ := rxFrames(b, r, fc, make([]byte, 1800), make([]byte, 1800), make([]byte, 1800), make([]byte, 1800), make([]byte, 1800))
	var out [linearize.MaxDescs]xsk.Desc
	b.SetBytes(9000)
	b.ReportAllocs()
	for b.Loop() {
		n := bl.Repack(descs, out[:])
		if n != 3 {
			b.Fatalf("Repack = %d descriptors, want 3", n)
		}
		for _, d := range out[:n] {
			bl.Release(d.Addr)
		}
	}
}
