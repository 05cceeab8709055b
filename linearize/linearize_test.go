package linearize

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/xdpfwd/xdpfwd/xsk"
)

func TestPathString(t *testing.T) {
	for p, want := range map[Path]string{Frame: "frame", Inline: "inline", Frag: "frag", Chain: "chain", NumPaths: "invalid", 200: "invalid"} {
		if got := p.String(); got != want {
			t.Errorf("Path(%d).String() = %q, want %q", p, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	// The forwarder's usual policy, with a low MaxTxFrags so the repack
	// rule can be exercised with realistic packet sizes.
	base := Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 4096, FragBlocks: true}
	with := func(f func(*Policy)) Policy { p := base; f(&p); return p }
	noInline := with(func(p *Policy) { p.InlineMax = 0 })
	noFrags := with(func(p *Policy) { p.FragBlocks = false })
	chunk2k := with(func(p *Policy) { p.ChunkSize = 2048 })
	maxDescs := with(func(p *Policy) { p.MaxTxFrags = MaxDescs })

	for _, tc := range []struct {
		name     string
		p        Policy
		total, n int
		want     Path
	}{
		// Inline limit boundaries.
		{"255 single", base, 255, 1, Inline},
		{"256 single", base, 256, 1, Inline},
		{"257 single", base, 257, 1, Frame},
		{"1 byte", base, 1, 1, Inline},
		{"255 chained", base, 255, 3, Inline},
		{"256 chained", base, 256, 2, Inline},
		{"257 chained", base, 257, 2, Chain},
		{"inline beats repack", base, 200, 10, Inline},

		// InlineMax 0 turns inlining off.
		{"off: 1 byte", noInline, 1, 1, Frame},
		{"off: 60", noInline, 60, 1, Frame},
		{"off: 256", noInline, 256, 1, Frame},
		{"off: 60 chained", noInline, 60, 2, Chain},
		{"off: repack", noInline, 9000, 5, Frag},

		// Single descriptor: leaves from its frame.
		{"1514 single", base, 1514, 1, Frame},
		{"4096 single", base, 4096, 1, Frame},
		{"single, no frags", noFrags, 3000, 1, Frame},

		// Multi-buffer, at or under MaxTxFrags: as it arrived.
		{"9000 in 3", base, 9000, 3, Chain},
		{"9000 in 4 = MaxTxFrags", base, 9000, 4, Chain},

		// Over MaxTxFrags: repacked only when that saves descriptors.
		{"9000 in 5 scattered 2K frames", base, 9000, 5, Frag}, // leaves as 3
		{"9000 in 5, no frag zone", noFrags, 9000, 5, Chain},   // FragBlocks false
		{"9000 in 5, 2K chunks", chunk2k, 9000, 5, Chain},      // Count = 5, no gain
		{"9000 in 6, 2K chunks", chunk2k, 9000, 6, Frag},       // 6 → 5
		{"20480 in 5 full chunks", base, 5 * 4096, 5, Chain},   // already fewest
		{"20481 in 5", base, 5*4096 + 1, 5, Chain},             // would need 6
		{"16384 in 5", base, 4 * 4096, 5, Frag},                // 5 → 4
		{"8193 in 5", base, 8193, 5, Frag},                     // 5 → 3
		{"65536 in 18, max descs", maxDescs, 65536, 18, Chain}, // n ≤ MaxTxFrags
		{"65536 in 19, max descs", maxDescs, 65536, 19, Frag},  // 19 → 16
		{"small chain, inline off, repacked", Policy{MaxTxFrags: 1, ChunkSize: 4096, FragBlocks: true}, 300, 2, Frag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Decide(tc.total, tc.n); got != tc.want {
				t.Errorf("%+v.Decide(%d, %d) = %v, want %v", tc.p, tc.total, tc.n, got, tc.want)
			}
		})
	}
}

// TestDecideInvariants checks the rules over a grid of sizes and counts:
// Frag only when it reduces descriptors and a frag zone exists, Frame only
// for single descriptors, Inline only within the limit.
func TestDecideInvariants(t *testing.T) {
	for _, p := range []Policy{
		{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 4096, FragBlocks: true},
		{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 2048, FragBlocks: true},
		{InlineMax: 0, MaxTxFrags: 2, ChunkSize: 4096, FragBlocks: true},
		{InlineMax: 128, MaxTxFrags: MaxDescs, ChunkSize: 4096, FragBlocks: false},
	} {
		for total := 1; total <= 20*4096; total += 97 {
			for n := 1; n <= MaxDescs+2; n++ {
				got := p.Decide(total, n)
				switch got {
				case Inline:
					if total > p.InlineMax {
						t.Fatalf("%+v: %d bytes inline", p, total)
					}
				case Frame:
					if n != 1 || total <= p.InlineMax {
						t.Fatalf("%+v: Decide(%d, %d) = frame", p, total, n)
					}
				case Frag:
					if !p.FragBlocks || n <= p.MaxTxFrags || Count(total, p.ChunkSize) >= n || total <= p.InlineMax {
						t.Fatalf("%+v: Decide(%d, %d) = frag", p, total, n)
					}
				case Chain:
					if n == 1 || total <= p.InlineMax ||
						(p.FragBlocks && n > p.MaxTxFrags && Count(total, p.ChunkSize) < n) {
						t.Fatalf("%+v: Decide(%d, %d) = chain", p, total, n)
					}
				default:
					t.Fatalf("Decide returned %v", got)
				}
			}
		}
	}
}

// TestDecideZeroLengthInlineOff: InlineMax 0 is documented to disable
// inlining, but an empty packet satisfies total <= 0.
func TestDecideZeroLengthInlineOff(t *testing.T) {
	p := Policy{InlineMax: 0, MaxTxFrags: 4, ChunkSize: 4096}
	if got := p.Decide(0, 1); got == Inline {
		t.Errorf("InlineMax 0 (off): Decide(0, 1) = %v", got)
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct{ total, chunk, want int }{
		{-1, 4096, 1},
		{0, 4096, 1},
		{1, 4096, 1},
		{4095, 4096, 1},
		{4096, 4096, 1},
		{4097, 4096, 2},
		{8192, 4096, 2},
		{8193, 4096, 3},
		{9000, 4096, 3},
		{9000, 2048, 5},
		{9000, 1800, 5},
		{9001, 1800, 6},
		{65536, 4096, 16},
		{MaxDescs * 4096, 4096, MaxDescs},
		{7, 1, 7},
	} {
		if got := Count(tc.total, tc.chunk); got != tc.want {
			t.Errorf("Count(%d, %d) = %d, want %d", tc.total, tc.chunk, got, tc.want)
		}
	}
}

func TestTotal(t *testing.T) {
	if got := Total(nil); got != 0 {
		t.Errorf("Total(nil) = %d", got)
	}
	descs := []xsk.Desc{{Len: 1800}, {Len: 0}, {Len: math.MaxUint32}, {Len: 7}}
	if got, want := Total(descs), 1800+math.MaxUint32+7; got != want {
		t.Errorf("Total = %d, want %d", got, want)
	}
}

// checkCut verifies the invariants of Cut's output for (addr, total, chunk).
func checkCut(t testing.TB, out []xsk.Desc, addr uint64, total, chunk int) {
	t.Helper()
	want := Count(total, chunk)
	if len(out) != want {
		t.Fatalf("Cut(%#x, %d, %d) wrote %d descriptors, want %d", addr, total, chunk, len(out), want)
	}
	next, sum := addr, 0
	for i, d := range out {
		if d.Addr != next {
			t.Fatalf("Cut(%#x, %d, %d): desc %d at %#x, want adjacent %#x", addr, total, chunk, i, d.Addr, next)
		}
		if int(d.Len) > chunk {
			t.Fatalf("Cut(%#x, %d, %d): desc %d has %d bytes > chunk", addr, total, chunk, i, d.Len)
		}
		if i < len(out)-1 {
			if d.Options != xsk.PktContd {
				t.Fatalf("Cut(%#x, %d, %d): desc %d options %#x, want PktContd", addr, total, chunk, i, d.Options)
			}
			if int(d.Len) != chunk {
				t.Fatalf("Cut(%#x, %d, %d): non-final desc %d has %d bytes, want a full chunk", addr, total, chunk, i, d.Len)
			}
		} else if d.Options != 0 {
			t.Fatalf("Cut(%#x, %d, %d): last desc options %#x, want 0", addr, total, chunk, d.Options)
		}
		next += uint64(d.Len)
		sum += int(d.Len)
	}
	if sum != max(total, 0) {
		t.Fatalf("Cut(%#x, %d, %d): lengths sum to %d", addr, total, chunk, sum)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		addr         uint64
		total, chunk int
		outLen       int
		want         int
	}{
		{0, 0, 4096, 1, 1},
		{100, 1, 4096, 1, 1},
		{0x10000, 60, 4096, 18, 1},
		{0x10000, 4096, 4096, 18, 1},
		{0x10000, 4097, 4096, 18, 2},
		{0x10040, 9000, 4096, 18, 3},
		{0x10040, 9000, 4096, 3, 3}, // exactly enough room
		{0x10040, 9000, 4096, 2, 0}, // one short
		{0x10040, 9000, 2048, 5, 5},
		{0x10040, 9000, 2048, 4, 0},
		{0, 1, 4096, 0, 0},
		{0, 0, 4096, 0, 0},
		{1 << 40, MaxDescs * 4096, 4096, MaxDescs, MaxDescs},
		{1 << 40, MaxDescs*4096 + 1, 4096, MaxDescs, 0},
	} {
		out := make([]xsk.Desc, tc.outLen)
		for i := range out {
			out[i] = xsk.Desc{Addr: 0xdead, Len: 0xbeef, Options: 0xff}
		}
		got := Cut(out, tc.addr, tc.total, tc.chunk)
		if got != tc.want {
			t.Errorf("Cut(out[%d], %#x, %d, %d) = %d, want %d", tc.outLen, tc.addr, tc.total, tc.chunk, got, tc.want)
			continue
		}
		if got == 0 {
			for i, d := range out {
				if d != (xsk.Desc{Addr: 0xdead, Len: 0xbeef, Options: 0xff}) {
					t.Errorf("Cut returned 0 but wrote out[%d] = %+v", i, d)
				}
			}
			continue
		}
		checkCut(t, out[:got], tc.addr, tc.total, tc.chunk)
		for i, d := range out[got:] {
			if d.Addr != 0xdead {
				t.Errorf("Cut(%d) wrote past its count at out[%d]", got, got+i)
			}
		}
	}
}

func TestCutRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	out := make([]xsk.Desc, MaxDescs)
	for range 20000 {
		chunk := []int{2048, 4096, 1 + rng.IntN(4096)}[rng.IntN(3)]
		total := rng.IntN(MaxDescs*chunk + chunk)
		addr := rng.Uint64N(1 << 47)
		n := Cut(out, addr, total, chunk)
		if Count(total, chunk) > len(out) {
			if n != 0 {
				t.Fatalf("Cut(%d, %d) into %d = %d, want 0", total, chunk, len(out), n)
			}
			continue
		}
		checkCut(t, out[:n], addr, total, chunk)
	}
}

// testMem returns a buffer of n bytes of a recognisable pattern whose
// capacity runs on into guard bytes: a slice expression that went by
// capacity instead of length would read them without panicking.
func testMem(n int) []byte {
	const guard = 4096
	buf := make([]byte, n+guard)
	for i := range buf[:n] {
		buf[i] = byte(i*131 + i>>8 + 1)
		if buf[i] == guardByte {
			buf[i] = 0
		}
	}
	for i := n; i < len(buf); i++ {
		buf[i] = guardByte
	}
	return buf[:n]
}

const guardByte = 0xEE

// refGather is the obvious Gather: bytes.Join of the in-bounds slices up to
// the first bad descriptor, truncated to room bytes.
func refGather(mem []byte, descs []xsk.Desc, room int) []byte {
	var parts [][]byte
	for _, d := range descs {
		end := d.Addr + uint64(d.Len)
		if end < d.Addr || end > uint64(len(mem)) {
			break
		}
		parts = append(parts, mem[d.Addr:end])
	}
	all := bytes.Join(parts, nil)
	return all[:min(len(all), room)]
}

func TestGather(t *testing.T) {
	mem := testMem(64 << 10)
	size := uint64(len(mem))
	for _, tc := range []struct {
		name  string
		descs []xsk.Desc
		room  int
		want  int
	}{
		{"none", nil, 100, 0},
		{"one", []xsk.Desc{{Addr: 10, Len: 20}}, 100, 20},
		{"three", []xsk.Desc{{Addr: 0, Len: 60}, {Addr: 4096, Len: 100}, {Addr: 2048, Len: 96}}, 256, 256},
		{"zero-length", []xsk.Desc{{Addr: 5, Len: 0}, {Addr: 9, Len: 3}, {Addr: 0, Len: 0}}, 10, 3},
		{"zero-length at end of mem", []xsk.Desc{{Addr: size, Len: 0}, {Addr: 1, Len: 2}}, 10, 2},
		{"last byte", []xsk.Desc{{Addr: size - 1, Len: 1}}, 10, 1},
		{"up to end", []xsk.Desc{{Addr: size - 100, Len: 100}}, 200, 100},
		{"one past end", []xsk.Desc{{Addr: 0, Len: 7}, {Addr: size - 100, Len: 101}, {Addr: 0, Len: 7}}, 200, 7},
		{"addr past end", []xsk.Desc{{Addr: 0, Len: 7}, {Addr: size, Len: 1}}, 200, 7},
		{"addr far past end, zero length", []xsk.Desc{{Addr: 0, Len: 7}, {Addr: size + 1, Len: 0}, {Addr: 0, Len: 7}}, 200, 7},
		{"addr+len overflows", []xsk.Desc{{Addr: 0, Len: 7}, {Addr: math.MaxUint64 - 10, Len: 100}}, 200, 7},
		{"addr+len wraps to 0", []xsk.Desc{{Addr: math.MaxUint64 - 99, Len: 100}}, 200, 0},
		{"max addr, max len", []xsk.Desc{{Addr: math.MaxUint64, Len: math.MaxUint32}}, 200, 0},
		{"unflattened addr", []xsk.Desc{{Addr: 1<<48 | 100, Len: 10}}, 200, 0},
		{"dst full", []xsk.Desc{{Addr: 0, Len: 100}, {Addr: 500, Len: 100}}, 150, 150},
		{"dst exactly full", []xsk.Desc{{Addr: 0, Len: 100}, {Addr: 500, Len: 100}, {Addr: 0, Len: 0}}, 200, 200},
		{"no dst", []xsk.Desc{{Addr: 0, Len: 100}}, 0, 0},
		{"overlapping", []xsk.Desc{{Addr: 0, Len: 100}, {Addr: 50, Len: 100}}, 200, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, tc.room)
			got := Gather(dst, mem, tc.descs)
			if got != tc.want {
				t.Fatalf("Gather = %d, want %d", got, tc.want)
			}
			if ref := refGather(mem, tc.descs, tc.room); !bytes.Equal(dst[:got], ref) {
				t.Fatalf("gathered bytes differ from the reference")
			}
			if bytes.IndexByte(dst[:got], guardByte) >= 0 {
				t.Fatalf("gathered guard bytes from past the end of mem")
			}
		})
	}
}

// randomLayout returns 1..MaxDescs descriptors of random lengths at random,
// possibly overlapping, places inside mem.
func randomLayout(rng *rand.Rand, memLen int, descs []xsk.Desc) []xsk.Desc {
	descs = descs[:0]
	for range 1 + rng.IntN(MaxDescs) {
		l := rng.IntN(4097)
		if rng.IntN(8) == 0 {
			l = 0
		}
		a := rng.IntN(memLen - l + 1)
		descs = append(descs, xsk.Desc{Addr: uint64(a), Len: uint32(l)})
	}
	return descs
}

func TestGatherRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mem := testMem(1 << 20)
	dst := make([]byte, MaxDescs*4096)
	var descs []xsk.Desc
	for range 5000 {
		descs = randomLayout(rng, len(mem), descs)
		var parts [][]byte
		for _, d := range descs {
			parts = append(parts, mem[d.Addr:d.Addr+uint64(d.Len)])
		}
		ref := bytes.Join(parts, nil)
		total := Total(descs)
		if len(ref) != total {
			t.Fatalf("Total = %d, reference %d", total, len(ref))
		}
		room := total
		if rng.IntN(4) == 0 { // a short destination
			room = rng.IntN(total + 1)
		}
		n := Gather(dst[:room], mem, descs)
		if n != room || !bytes.Equal(dst[:n], ref[:room]) {
			t.Fatalf("Gather of %v into %d bytes = %d, differs from the reference", descs, room, n)
		}
	}
}

// TestGatherOutOfBounds puts one bad descriptor (past the end of mem, or
// with addr+len overflowing) at a random place in a random layout: Gather
// must stop short there, without panicking or reading past mem's length.
func TestGatherOutOfBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := testMem(256 << 10)
	size := uint64(len(mem))
	dst := make([]byte, MaxDescs*4096+4096)
	var descs []xsk.Desc
	bad := []func() xsk.Desc{
		func() xsk.Desc { return xsk.Desc{Addr: size, Len: 1 + rng.Uint32N(4096)} },
		func() xsk.Desc { // straddles the end
			l := 2 + rng.Uint32N(4095)
			return xsk.Desc{Addr: size - uint64(rng.Uint32N(l-1)+1), Len: l}
		},
		func() xsk.Desc { return xsk.Desc{Addr: size + 1 + rng.Uint64N(1<<40), Len: rng.Uint32N(4097)} },
		func() xsk.Desc {
			return xsk.Desc{Addr: math.MaxUint64 - rng.Uint64N(4096), Len: 4097 + rng.Uint32N(1<<20)}
		},
		func() xsk.Desc { return xsk.Desc{Addr: rng.Uint64(), Len: rng.Uint32()} },
		func() xsk.Desc { return xsk.Desc{Addr: rng.Uint64N(size), Len: math.MaxUint32} },
	}
	for i := range 5000 {
		descs = randomLayout(rng, len(mem), descs)
		at := rng.IntN(len(descs) + 1)
		d := bad[i%len(bad)]()
		if d.Addr+uint64(d.Len) >= d.Addr && d.Addr+uint64(d.Len) <= size {
			continue // the random one happened to fit
		}
		descs = append(descs[:at], append([]xsk.Desc{d}, descs[at:]...)...)
		want := Total(descs[:at])
		clear(dst)
		n := Gather(dst, mem, descs)
		if n != want {
			t.Fatalf("bad desc %+v at %d of %d: Gather = %d, want the %d bytes before it", d, at, len(descs), n, want)
		}
		if !bytes.Equal(dst[:n], refGather(mem, descs, len(dst))) {
			t.Fatalf("bad desc %+v: bytes differ from the reference", d)
		}
		if bytes.IndexByte(dst[:n], guardByte) >= 0 {
			t.Fatalf("bad desc %+v: read past the end of mem", d)
		}
	}
}

// TestCutGatherRoundTrip copies a random layout into a packet buffer with
// Gather, describes it with Cut, and gathers it back through the cut
// descriptors.
func TestCutGatherRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	mem := testMem(1 << 20)
	region := make([]byte, 2*MaxDescs*4096)
	out := make([]xsk.Desc, MaxDescs)
	back := make([]byte, MaxDescs*4096)
	var descs []xsk.Desc
	for range 3000 {
		descs = randomLayout(rng, len(mem), descs)
		total := Total(descs)
		chunk := []int{2048, 4096}[rng.IntN(2)]
		addr := uint64(rng.IntN(len(region) - total + 1))
		if Gather(region[addr:addr+uint64(total)], mem, descs) != total {
			t.Fatal("short gather of an in-bounds layout")
		}
		n := Cut(out, addr, total, chunk)
		if Count(total, chunk) > len(out) {
			if n != 0 {
				t.Fatalf("Cut of %d bytes by %d = %d, want 0", total, chunk, n)
			}
			continue
		}
		checkCut(t, out[:n], addr, total, chunk)
		if got := Gather(back, region, out[:n]); got != total {
			t.Fatalf("gathered %d of %d bytes back", got, total)
		}
		if !bytes.Equal(back[:total], refGather(mem, descs, total)) {
			t.Fatal("round trip changed the bytes")
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	mem := testMem(64 << 10)
	descs := scattered9000()
	dst := make([]byte, 9000)
	out := make([]xsk.Desc, MaxDescs)
	p := Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 4096, FragBlocks: true}
	var sink int
	if a := testing.AllocsPerRun(100, func() {
		sink += int(p.Decide(9000, 5)) + Gather(dst, mem, descs) + Cut(out, 0, 9000, 4096) + Count(9000, 4096) + Total(descs)
	}); a != 0 {
		t.Errorf("%v allocs per run, want 0", a)
	}
	_ = sink
}

// scattered9000 is a 9000-byte packet received as 5 scattered 2 KiB frames
// (headroom 256, up to 1792 bytes each).
func scattered9000() []xsk.Desc {
	return []xsk.Desc{
		{Addr: 7*2048 + 256, Len: 1792, Options: xsk.PktContd},
		{Addr: 2*2048 + 256, Len: 1792, Options: xsk.PktContd},
		{Addr: 19*2048 + 256, Len: 1792, Options: xsk.PktContd},
		{Addr: 11*2048 + 256, Len: 1792, Options: xsk.PktContd},
		{Addr: 3*2048 + 256, Len: 9000 - 4*1792},
	}
}

var benchSink int

func BenchmarkDecide(b *testing.B) {
	p := Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 4096, FragBlocks: true}
	cases := [...]struct{ total, n int }{{60, 1}, {256, 1}, {1514, 1}, {9000, 3}, {9000, 5}, {300, 2}, {65536, 17}, {257, 1}}
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		for _, c := range cases {
			s += int(p.Decide(c.total, c.n))
		}
	}
	benchSink = s
}

func BenchmarkGather(b *testing.B) {
	mem := testMem(64 << 10)
	descs := scattered9000()
	dst := make([]byte, 9000)
	b.SetBytes(9000)
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		s += Gather(dst, mem, descs)
	}
	if s == 0 {
		b.Fatal("nothing gathered")
	}
	benchSink = s
}

func BenchmarkCut(b *testing.B) {
	out := make([]xsk.Desc, MaxDescs)
	b.ReportAllocs()
	s := 0
	for b.Loop() {
		s += Cut(out, 0x10040, 9000, 4096)
	}
	benchSink = s
}
