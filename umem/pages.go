package umem

import "sync/atomic"

// PageMeter measures how many distinct UMEM pages a stream of TX
// descriptors touches per 1,000 descriptors, at 4 KiB and 2 MiB
// granularity: the user-space picture of the IOTLB pressure measured on
// netdev in "[RFC net] tcp: Fix performance regression for
// request-response workloads" (2022: 13 % of a request/response workload
// for a second mapped page) and "Re: [PATCH RFC 0/7] add socket to netdev
// page frag recycling support" (2021). One worker writes it; any goroutine
// may read it.
type PageMeter struct {
	n      int
	set4k  pageSet
	set2m  pageSet
	window atomic.Uint64 // windows completed
	sum4k  atomic.Uint64 // distinct 4 KiB pages, summed over windows
	sum2m  atomic.Uint64
}

// meterWindow is the number of descriptors per measurement window.
const meterWindow = 1000

// Touch records one descriptor.
func (m *PageMeter) Touch(addr uint64, length uint32) {
	last := addr + uint64(max(length, 1)) - 1
	m.set4k.add(addr >> 12)
	m.set2m.add(addr >> 21)
	if last>>12 != addr>>12 {
		m.set4k.add(last >> 12)
		m.set2m.add(last >> 21)
	}
	if m.n++; m.n == meterWindow {
		m.sum4k.Add(uint64(m.set4k.count))
		m.sum2m.Add(uint64(m.set2m.count))
		m.window.Add(1)
		m.set4k.reset()
		m.set2m.reset()
		m.n = 0
	}
}

// PagesPer1K returns the mean distinct pages per 1,000 descriptors over
// the completed windows, at 4 KiB and 2 MiB granularity, and the number of
// windows it is averaged over.
func (m *PageMeter) PagesPer1K() (p4k, p2m float64, windows uint64) {
	w := m.window.Load()
	if w == 0 {
		return 0, 0, 0
	}
	return float64(m.sum4k.Load()) / float64(w), float64(m.sum2m.Load()) / float64(w), w
}

// Sums returns the raw sums, for adding meters together.
func (m *PageMeter) Sums() (sum4k, sum2m, windows uint64) {
	return m.sum4k.Load(), m.sum2m.Load(), m.window.Load()
}

// pageSet is an allocation-free set of page numbers, cleared in O(1) by
// bumping a generation. It holds at most 2 pages per descriptor of one
// window, so 4096 slots keep it at most half full.
type pageSet struct {
	keys  [4096]uint64
	gens  [4096]uint32
	gen   uint32
	count int
}

func (s *pageSet) add(page uint64) {
	if s.gen == 0 {
		s.gen = 1
	}
	h := (page * 0x9E3779B97F4A7C15) >> 52 // top 12 bits: 4096 slots
	for {
		switch {
		case s.gens[h] != s.gen:
			s.gens[h], s.keys[h] = s.gen, page
			s.count++
			return
		case s.keys[h] == page:
			return
		}
		h = (h + 1) & 4095
	}
}

func (s *pageSet) reset() {
	s.count = 0
	if s.gen++; s.gen == 0 {
		// Wrapped: stale stamps would look current again.
		s.gens = [len(s.gens)]uint32{}
		s.gen = 1
	}
}
