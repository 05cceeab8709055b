package umem

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refPages counts the distinct 4 KiB and 2 MiB pages of one window of
// descriptors the obvious way.
func refPages(addrs []uint64, lens []uint32) (p4k, p2m int) {
	s4, s2 := map[uint64]bool{}, map[uint64]bool{}
	for i, a := range addrs {
		last := a + uint64(max(lens[i], 1)) - 1
		for p := a >> 12; p <= last>>12; p++ {
			s4[p] = true
		}
		for p := a >> 21; p <= last>>21; p++ {
			s2[p] = true
		}
	}
	return len(s4), len(s2)
}

func touchAll(m *PageMeter, addrs []uint64, lens []uint32) {
	for i, a := range addrs {
		m.Touch(a, lens[i])
	}
}

func TestPageMeter(t *testing.T) {
	const zone16M = 16 << 20
	for _, tc := range []struct {
		name          string
		desc          func(i int) (addr uint64, length uint32)
		want4k, want2 int
	}{
		// (a) Inline-like: 1000 × 256 B contiguous = 250 KiB.
		{"1000 inline slots from 0", func(i int) (uint64, uint32) { return uint64(i) * 256, 256 }, 63, 1},
		{"1000 inline slots from 2 MiB - 4 KiB", func(i int) (uint64, uint32) { return 2<<20 - 4096 + uint64(i)*256, 256 }, 63, 2},
		{"1000 short packets in inline slots", func(i int) (uint64, uint32) { return uint64(i) * 256, 60 }, 63, 1},
		// (b) Frames.
		{"1000 full 2 KiB frames, contiguous", func(i int) (uint64, uint32) { return uint64(i) * 2048, 2048 }, 500, 1},
		{"1000 frames every 16 KiB of a 16 MiB zone", func(i int) (uint64, uint32) { return uint64(i*8) * 2048 % zone16M, 1514 }, 1000, 8},
		{"1000 frames at an 8 KiB stride", func(i int) (uint64, uint32) { return uint64(i) * 8192, 1500 }, 1000, 4},
		{"1000 descriptors in one frame", func(i int) (uint64, uint32) { return 4096 + uint64(i%8)*100, 100 }, 1, 1},
		// (c) Crossing.
		{"1000 descriptors each crossing a 4 KiB boundary", func(i int) (uint64, uint32) { return uint64(i+1)*4096 - 10, 20 }, 1001, 2},
		{"1000 zero-length descriptors on one page", func(i int) (uint64, uint32) { return 8192 + uint64(i), 0 }, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs, lens := make([]uint64, meterWindow), make([]uint32, meterWindow)
			for i := range addrs {
				addrs[i], lens[i] = tc.desc(i)
			}
			if r4, r2 := refPages(addrs, lens); r4 != tc.want4k || r2 != tc.want2 {
				t.Fatalf("test case wrong: reference counts %d / %d", r4, r2)
			}
			var m PageMeter
			touchAll(&m, addrs, lens)
			p4k, p2m, w := m.PagesPer1K()
			if w != 1 || p4k != float64(tc.want4k) || p2m != float64(tc.want2) {
				t.Fatalf("PagesPer1K = %v 4K, %v 2M over %d windows, want %d, %d over 1", p4k, p2m, w, tc.want4k, tc.want2)
			}
			// A second, identical window averages to the same.
			touchAll(&m, addrs, lens)
			if p4k, p2m, w = m.PagesPer1K(); w != 2 || p4k != float64(tc.want4k) || p2m != float64(tc.want2) {
				t.Fatalf("second window: %v, %v over %d", p4k, p2m, w)
			}
			s4, s2, sw := m.Sums()
			if s4 != 2*uint64(tc.want4k) || s2 != 2*uint64(tc.want2) || sw != 2 {
				t.Fatalf("Sums = %d, %d, %d", s4, s2, sw)
			}
		})
	}
}

func TestPageMeterSpreadFrames(t *testing.T) {
	// (b) descriptors spread over the 2048-byte frames of a 16 MiB zone,
	// in a random order, against the reference count.
	rng := rand.New(rand.NewPCG(21, 22))
	const frames = 16 << 20 / 2048
	base := uint64(6 << 20) // the zone need not start at 0
	var m PageMeter
	var sum4, sum2 int
	addrs, lens := make([]uint64, 1000), make([]uint32, 1000)
	for range 20 {
		for i := range addrs {
			addrs[i] = base + uint64(rng.IntN(frames))*2048 + 256
			lens[i] = uint32(60 + rng.IntN(1792-60+1))
		}
		r4, r2 := refPages(addrs, lens)
		sum4, sum2 = sum4+r4, sum2+r2
		touchAll(&m, addrs, lens)
	}
	p4k, p2m, w := m.PagesPer1K()
	if w != 20 || p4k != float64(sum4)/20 || p2m != float64(sum2)/20 {
		t.Fatalf("PagesPer1K = %v, %v over %d; reference %v, %v", p4k, p2m, w, float64(sum4)/20, float64(sum2)/20)
	}
	// 1000 random frames of 8192 hit nearly 1000 distinct 4 KiB pages
	// of 4096, and all 8 huge pages.
	if p4k < 800 || p4k > 1000 || p2m != 8 {
		t.Fatalf("PagesPer1K = %v, %v: implausible for 1000 random frames of a 16 MiB zone", p4k, p2m)
	}
	t.Logf("random frames of a 16 MiB zone: %.1f 4 KiB pages, %.1f 2 MiB pages per 1000 descriptors", p4k, p2m)
}

func TestPageMeterCrossing(t *testing.T) {
	// (c) one descriptor across a 4 KiB boundary counts both pages; one
	// across a 2 MiB boundary counts both huge pages too.
	for _, tc := range []struct {
		addr          uint64
		len           uint32
		want4k, want2 uint64
	}{
		{4096 - 1, 2, 2, 1},
		{4096 - 1, 1, 1, 1},
		{4096, 4096, 1, 1},
		{4096, 4097, 2, 1},
		{2<<20 - 100, 200, 2, 2},
		{2<<20 - 100, 100, 1, 1},
		{2 << 20, 0, 1, 1},
		{math.MaxUint64 - 4095, 4096, 1, 1},
	} {
		var m PageMeter
		m.Touch(tc.addr, tc.len)
		for range meterWindow - 1 {
			m.Touch(tc.addr, tc.len) // the same pages again
		}
		s4, s2, w := m.Sums()
		if w != 1 || s4 != tc.want4k || s2 != tc.want2 {
			t.Errorf("Touch(%#x, %d): %d 4K pages, %d 2M pages over %d windows, want %d, %d", tc.addr, tc.len, s4, s2, w, tc.want4k, tc.want2)
		}
	}
}

func TestPageMeterWindows(t *testing.T) {
	var m PageMeter
	if p4k, p2m, w := m.PagesPer1K(); p4k != 0 || p2m != 0 || w != 0 {
		t.Fatalf("empty meter: %v, %v, %d", p4k, p2m, w)
	}
	for i := range meterWindow - 1 {
		m.Touch(uint64(i)*4096, 64)
	}
	if _, _, w := m.PagesPer1K(); w != 0 {
		t.Fatalf("%d windows after 999 descriptors", w)
	}
	m.Touch(999*4096, 64)
	// Then a window on one page: the sets must have been cleared.
	for range meterWindow {
		m.Touch(0, 64)
	}
	s4, s2, w := m.Sums()
	if w != 2 || s4 != 1000+1 || s2 != 2+1 {
		t.Fatalf("Sums = %d, %d, %d; want 1001, 3, 2", s4, s2, w)
	}
}

// TestPageMeterRandom compares the meter with the reference over many
// windows of random descriptors, including windows that fill the page set.
func TestPageMeterRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	var m PageMeter
	addrs, lens := make([]uint64, meterWindow), make([]uint32, meterWindow)
	var want4, want2 uint64
	for win := range 300 {
		span := []uint64{1 << 16, 1 << 22, 1 << 30, 1 << 47}[win%4]
		for i := range addrs {
			addrs[i] = rng.Uint64N(span)
			lens[i] = rng.Uint32N(4097)
		}
		r4, r2 := refPages(addrs, lens)
		want4, want2 = want4+uint64(r4), want2+uint64(r2)
		touchAll(&m, addrs, lens)
		s4, s2, w := m.Sums()
		if s4 != want4 || s2 != want2 || w != uint64(win+1) {
			t.Fatalf("window %d (span %#x): sums %d, %d; reference %d, %d", win, span, s4, s2, want4, want2)
		}
	}
}

// TestPageSetGenerationWrap: the set clears itself by bumping a 32-bit
// generation; when it wraps, entries written 2^32 windows earlier look
// current again. Simulated by forcing the generation.
func TestPageSetGenerationWrap(t *testing.T) {
	var s pageSet
	s.add(5) // generation 1
	s.gen = math.MaxUint32
	s.reset() // wraps to 0; add makes it 1 again
	s.add(5)
	if s.count != 1 {
		t.Fatalf("count = %d after adding one page to an empty set", s.count)
	}
}

func TestPageMeterZeroAllocs(t *testing.T) {
	var m PageMeter
	i := uint64(0)
	if a := testing.AllocsPerRun(5000, func() {
		m.Touch(i*2048, 1514)
		i++
	}); a != 0 {
		t.Errorf("%v allocs per Touch", a)
	}
}

func BenchmarkPageMeterTouch(b *testing.B) {
	m := new(PageMeter)
	rng := rand.New(rand.NewPCG(1, 1))
	addrs := make([]uint64, 4096)
	for i := range addrs {
		addrs[i] = uint64(rng.IntN(8192)) * 2048
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Touch(addrs[i&4095], 1514)
		i++
	}
}
