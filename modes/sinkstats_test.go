package modes_test

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/modes"
)

// genFrames builds one frame per (flow, seq) pair of one run, stamped at
// stamp.
func genFrames(pairs [][2]int, stamp int64) []fwd.Packet { return genRunFrames(pairs, 1, stamp) }

func seqs(flow int, ss ...int) [][2]int {
	var out [][2]int
	for _, s := range ss {
		out = append(out, [2]int{flow, s})
	}
	return out
}

func span(flow, from, to int) [][2]int {
	var out [][2]int
	for s := from; s < to; s++ {
		out = append(out, [2]int{flow, s})
	}
	return out
}

// TestCountingSinkSequences: a generator's run with sequence numbers
// deliberately dropped, swapped and repeated gives exactly those counts.
func TestCountingSinkSequences(t *testing.T) {
	cat := func(xs ...[][2]int) [][2]int {
		var out [][2]int
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name                 string
		frames               [][2]int
		recv, lost, ro, dups uint64
	}{
		{"in-order", span(0, 0, 1000), 1000, 0, 0, 0},
		{"dropped-3", cat(span(0, 0, 10), span(0, 11, 20), span(0, 22, 23), span(0, 24, 30)), 26, 4, 0, 0},
		{"lost-head", span(0, 5, 10), 5, 5, 0, 0},
		{"swapped-pairs", seqs(0, 0, 2, 1, 4, 3, 5), 6, 0, 2, 0},
		{"late-one", cat(span(0, 0, 10), seqs(0, 100), span(0, 10, 100)), 101, 0, 90, 0},
		{"late-beyond-window", cat(span(0, 0, 1500), span(0, 1501, 4000), seqs(0, 1500)), 4000, 0, 1, 0},
		{"duplicates", seqs(0, 0, 1, 1, 2, 0, 3, 3), 7, 0, 0, 3},
		{"two-flows", cat(seqs(1, 0, 1, 3), seqs(2, 0, 2, 1, 1)), 7, 1, 1, 1},
		// A flow first seen beyond 2^20 was joined there: the head before
		// is not counted lost (it counted 2^32−1: any forged first frame
		// could); across the wrap, 1 is.
		{"wrap", seqs(0, 1<<32-2, 1<<32-1, 0, 2), 4, 1, 0, 0},
		{"head-lost-up-to-2^20", seqs(0, 1<<20, 1<<20+1), 2, 1 << 20, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := modes.NewSink(func() int64 { return 5000 })
			pkts := genFrames(tc.frames, 1000)
			for i := 0; i < len(pkts); i += 7 { // batches of 7
				s.Handle(pkts[i:min(i+7, len(pkts))])
			}
			for i := range pkts {
				if v, _ := pkts[i].Verdict(); v != fwd.VerdictDrop {
					t.Fatalf("packet %d: verdict %v, want drop", i, v)
				}
			}
			r := s.Report()
			if r.Received != tc.recv || r.Lost != tc.lost || r.Reordered != tc.ro || r.Dups != tc.dups {
				t.Fatalf("received %d lost %d reordered %d dups %d; want %d %d %d %d",
					r.Received, r.Lost, r.Reordered, r.Dups, tc.recv, tc.lost, tc.ro, tc.dups)
			}
			if r.Latency.Count != tc.recv || r.Latency.P50 != 4000 && (r.Latency.P50 < 4000 || r.Latency.P50 > 4500) {
				t.Fatalf("latency %+v: want %d samples of 4000 ns", r.Latency, tc.recv)
			}
		})
	}
}

// TestCountingSinkOther: frames without the payload are counted apart.
func TestCountingSinkOther(t *testing.T) {
	s := modes.NewSink(nil)
	pkts := genFrames(span(0, 0, 3), gen.Now())
	pkts[1].Data[42] ^= 0xff // no magic
	s.Handle(pkts)
	if r := s.Report(); r.Other != 1 || r.Received != 2 || r.Frames != 2 {
		t.Fatalf("other %d received %d frames %d; want 1, 2, 2", r.Other, r.Received, r.Frames)
	}
}

// TestHistogramPercentiles: percentiles land in the bucket of the value
// at their rank, within the bucket's 12.5 %.
func TestHistogramPercentiles(t *testing.T) {
	var h modes.Histogram
	for v := int64(1); v <= 100000; v++ {
		h.Add(v * 10) // 10 ns .. 1 ms, uniform
	}
	r := h.Report()
	for _, c := range []struct {
		name      string
		got, want int64
	}{{"p50", r.P50, 500000}, {"p99", r.P99, 990000}, {"p999", r.P999, 999000}, {"max", r.Max, 1000000}} {
		if c.got < c.want || float64(c.got) > float64(c.want)*1.125 {
			t.Errorf("%s = %d, want %d..+12.5%%", c.name, c.got, c.want)
		}
	}
	if r.Count != 100000 {
		t.Errorf("count %d", r.Count)
	}
}

// TestCountingSinkAllocs: Handle allocates nothing.
func TestCountingSinkAllocs(t *testing.T) {
	s := modes.NewSink(nil)
	pkts := genFrames(span(3, 0, 64), gen.Now())
	if a := testing.AllocsPerRun(100, func() { s.Handle(pkts) }); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// TestCountingSinkArrival: latency runs to the XDP program's arrival stamp
// (fwd.Packet.Arrival) when it is plausible, else to the batch's clock
// (counted in BatchClock).
func TestCountingSinkArrival(t *testing.T) {
	const tx, now = 1000, 9000
	for _, tc := range []struct {
		name    string
		arrival int64
		want    int64 // latency
		batch   uint64
	}{
		{"stamped", 3000, 2000, 0},
		{"stamped-at-tx", tx, 0, 0},
		{"none", 0, now - tx, 1},
		{"stale", tx - 1, now - tx, 1},
		{"future", now + 1, now - tx, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := modes.NewSink(func() int64 { return now })
			pkts := genFrames(span(0, 0, 10), tx)
			for i := range pkts {
				pkts[i].Arrival = tc.arrival
			}
			s.Handle(pkts)
			r := s.Report()
			// Percentiles are bucket tops: within 12.5 % above the value.
			if r.Latency.Count != 10 || r.Latency.P50 < tc.want || float64(r.Latency.P50) > float64(tc.want)*1.125 || r.Latency.Max != tc.want {
				t.Errorf("latency %+v, want 10 samples of %d ns", r.Latency, tc.want)
			}
			if r.BatchClock != tc.batch*10 {
				t.Errorf("BatchClock %d, want %d", r.BatchClock, tc.batch*10)
			}
		})
	}
}

// TestCountingSinkConcurrentWorkers: four workers handle batches at once,
// each its own two flows (a flow arrives on one RX queue) while a reader
// takes reports: the shared histogram and counters hold every frame
// exactly, each flow in order with nothing lost (-race).
func TestCountingSinkConcurrentWorkers(t *testing.T) {
	const workers, flowsEach, perFlow = 4, 2, 4000
	s := modes.NewSink(func() int64 { return 5000 })
	batches := make([][]fwd.Packet, workers)
	for w := range batches {
		var pairs [][2]int
		for seq := range perFlow {
			for f := range flowsEach {
				pairs = append(pairs, [2]int{w*flowsEach + f, seq})
			}
		}
		pairs = append(pairs, seqs(w*flowsEach, perFlow-1)...) // one duplicate each, within the window
		batches[w] = genFrames(pairs, 1000)
	}
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				s.Report()
			}
		}
	})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			pkts := batches[w]
			for i := 0; i < len(pkts); i += 64 {
				s.Handle(pkts[i:min(i+64, len(pkts))])
			}
		})
	}
	wg.Wait()
	close(stop)
	reader.Wait()
	r := s.Report()
	want := uint64(workers*flowsEach*perFlow + workers)
	if r.Received != want || r.Dups != workers || r.Lost != 0 || r.Reordered != 0 || r.Latency.Count != want {
		t.Fatalf("received %d dups %d lost %d reordered %d latency samples %d; want %d, %d, 0, 0, %d",
			r.Received, r.Dups, r.Lost, r.Reordered, r.Latency.Count, want, workers, want)
	}
}

// TestCountingSinkRuns: a flow's epochs follow the generator's run id, a
// fact in the payload, not a guess from sequence numbers: a frame late by
// more than the window at a low sequence number is reordered, a run after
// a short one is a restart (not duplicates), a run whose head is lost
// counts that head lost, and a late frame of the previous run after the
// next has started is credited to its run.
func TestCountingSinkRuns(t *testing.T) {
	type part struct {
		id     uint32
		frames [][2]int
	}
	cat := func(xs ...[][2]int) [][2]int {
		var out [][2]int
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name                           string
		parts                          []part
		recv, lost, ro, dups, restarts uint64
	}{
		{"late-low-seq-beyond-window", []part{{7, cat(span(0, 0, 5), span(0, 6, 2000))}, {7, seqs(0, 5)}}, 2000, 0, 1, 0, 0},
		{"restart-after-short-run", []part{{7, span(0, 0, 500)}, {8, span(0, 0, 500)}}, 1000, 0, 0, 0, 1},
		{"restart-head-lost", []part{{7, span(0, 0, 3000)}, {8, span(0, 1500, 2000)}}, 3500, 1500, 0, 0, 1},
		{"late-from-previous-run", []part{{7, cat(span(0, 0, 50), span(0, 51, 100))}, {8, span(0, 0, 10)}, {7, seqs(0, 50)}}, 110, 0, 1, 0, 1},
		{"same-run-restart-shape", []part{{7, cat(span(0, 0, 2000), span(0, 0, 10))}}, 2010, 0, 10, 0, 0},
		{"three-runs", []part{{1, span(0, 0, 100)}, {2, span(0, 0, 100)}, {3, cat(span(0, 0, 10), span(0, 20, 30))}}, 220, 10, 0, 0, 2},
		{"two-flows-own-runs", []part{{1, span(1, 0, 300)}, {2, span(2, 0, 300)}, {3, span(1, 0, 300)}}, 900, 0, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := modes.NewSink(func() int64 { return 5000 })
			for _, p := range tc.parts {
				pkts := genRunFrames(p.frames, p.id, 1000)
				for i := 0; i < len(pkts); i += 7 {
					s.Handle(pkts[i:min(i+7, len(pkts))])
				}
			}
			r := s.Report()
			var restarts uint64
			for _, f := range r.Flows {
				restarts += f.Restarts
			}
			if r.Received != tc.recv || r.Lost != tc.lost || r.Reordered != tc.ro || r.Dups != tc.dups || restarts != tc.restarts {
				t.Fatalf("received %d lost %d reordered %d dups %d restarts %d; want %d %d %d %d %d",
					r.Received, r.Lost, r.Reordered, r.Dups, restarts, tc.recv, tc.lost, tc.ro, tc.dups, tc.restarts)
			}
		})
	}
}

// genRunFrames is genFrames for run id.
func genRunFrames(pairs [][2]int, id uint32, stamp int64) []fwd.Packet {
	t := gen.Template{
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 1024, DstPort: 9, Run: id,
	}
	pkts := make([]fwd.Packet, len(pairs))
	for i, p := range pairs {
		b := make([]byte, 60)
		n, lay := t.Frame(b, 64, uint16(p[0]))
		gen.Stamp(b[:n], lay, uint32(p[1]), stamp)
		pkts[i] = fwd.Packet{Data: b[:n], Len: n}
	}
	return pkts
}

// FuzzCountingSinkRuns: any interleaving of generator runs on one flow,
// each frame of the newest run or of the one before it, gives the counts
// of an exact model that remembers every sequence number of every run.
// A frame's sequence number is one of four places (0, 2^30, 2^31−1 — a
// forged frame's high+2^31−1 — and 3·2^30, each more than 2^20 from the
// others) plus up to 1023, under the window; a frame may be corrupted
// (counted apart, nothing else) or sent without a checksum (counted as
// any). The model: a run's frames count into its segment, the part of
// its sequence the flow is in, a map of what it received from base to
// high; a frame more than 2^20 from the segment's high is a jump, and a
// jump frame that follows the last (within 2^20) starts a new segment at
// that one, the old one keeping what it lost.
func FuzzCountingSinkRuns(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 2, 2, 0, 1, 5, 0, 1})
	f.Add([]byte{0, 9, 0, 3, 0, 3, 2, 7, 3, 0, 1, 2, 0, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		const jumpMax = 1 << 20
		places := [4]uint32{0, 1 << 30, 1<<31 - 1, 3 << 30}
		type segment struct {
			seen       map[int64]bool
			base, high int64
			distinct   int
		}
		type model struct {
			seg     *segment
			lost    uint64 // of segments before seg
			pend    uint32
			pending bool
		}
		newSeg := func(seq uint32, joined bool) *segment {
			g := &segment{seen: map[int64]bool{int64(seq): true}, high: int64(seq), distinct: 1}
			if joined || seq > jumpMax {
				g.base = g.high
			}
			return g
		}
		const (
			inOrder = iota
			late
			dup
			jump
		)
		// record is a segment's count of seq: its place, unwrapped against
		// the high.
		record := func(g *segment, seq uint32) int {
			d := int64(int32(seq - uint32(g.high)))
			if d > jumpMax || d < -jumpMax {
				return jump
			}
			s := g.high + d
			switch {
			case s > g.high:
				g.high = s
				g.seen[s] = true
				g.distinct++
				return inOrder
			case s < g.base:
				return late
			case g.seen[s]:
				return dup
			}
			g.seen[s] = true
			g.distinct++
			return late
		}
		segLost := func(g *segment) uint64 { return uint64(g.high + 1 - g.base - int64(g.distinct)) }
		var runs []*model
		var recv, ro, dups, bad, jumps uint64
		var pkts []fwd.Packet
		for i := 0; i+1 < len(data); i += 2 {
			c := data[i]
			seq := places[c>>4&3] + (uint32(data[i+1]) | uint32(c>>2&3)<<8)
			r := len(runs) - 1
			newRun := r < 0 || c&2 != 0
			switch {
			case newRun:
				r++
			case c&1 != 0 && r > 0:
				r-- // the previous run's frame, late
			}
			pkt := genRunFrames([][2]int{{0, int(seq)}}, uint32(r+1), 1000)[0]
			switch {
			case c&0x40 != 0:
				pkt = corrupt(pkt)
			case c&0x80 != 0:
				pkt = zeroSum(pkt)
			}
			pkts = append(pkts, pkt)
			if c&0x40 != 0 {
				bad++
				continue
			}
			recv++
			if newRun {
				runs = append(runs, &model{seg: newSeg(seq, false)})
				continue
			}
			m := runs[r]
			k := record(m.seg, seq)
			switch {
			case r < len(runs)-1: // the previous run's: late, no new segment
				if k == jump {
					jumps++
				} else if k == inOrder {
					k = late
				}
			case k != jump:
				m.pending = false
			case m.pending && int32(seq-m.pend) <= jumpMax && int32(seq-m.pend) >= -jumpMax:
				m.lost += segLost(m.seg)
				m.seg = newSeg(m.pend, true)
				m.pending = false
				k = record(m.seg, seq)
			default:
				jumps++
				m.pend, m.pending = seq, true
			}
			switch k {
			case late:
				ro++
			case dup:
				dups++
			}
		}
		var lost uint64
		for _, m := range runs {
			lost += m.lost + segLost(m.seg)
		}
		s := modes.NewSink(func() int64 { return 5000 })
		for i := range pkts {
			s.Handle(pkts[i : i+1])
		}
		r := s.Report()
		var restarts uint64
		for _, fl := range r.Flows {
			restarts += fl.Restarts
		}
		wantRestarts := uint64(max(len(runs)-1, 0))
		if r.Received != recv || r.Lost != lost || r.Reordered != ro || r.Dups != dups || restarts != wantRestarts ||
			r.BadChecksum != bad || r.SeqJumps != jumps {
			t.Fatalf("received %d lost %d reordered %d dups %d restarts %d bad checksum %d seq jumps %d; model %d %d %d %d %d %d %d",
				r.Received, r.Lost, r.Reordered, r.Dups, restarts, r.BadChecksum, r.SeqJumps, recv, lost, ro, dups, wantRestarts, bad, jumps)
		}
	})
}

// corrupt flips bits of a frame's payload (its TX stamp), leaving the
// UDP checksum as it was: what a bad link or a forger without the sum
// delivers.
func corrupt(p fwd.Packet) fwd.Packet {
	p.Data[14+20+8+10] ^= 0x5a
	return p
}

// zeroSum clears a frame's UDP checksum: none sent, which a sink takes
// as it is.
func zeroSum(p fwd.Packet) fwd.Packet {
	p.Data[14+20+6], p.Data[14+20+7] = 0, 0
	return p
}

// TestCountingSinkForged: one forged or corrupt frame far ahead of a
// flow's sequence (high+2^31−1) must not count 2^31 frames lost, nor turn
// the rest of the run into reordered frames: a corrupt one fails the UDP
// checksum and is counted apart (BadChecksum), a forged one (good
// checksum) is a seq jump. A sequence that truly jumps, the next frames
// following, goes on from there; a far frame of the previous run is a
// jump too.
func TestCountingSinkForged(t *testing.T) {
	const far = 1<<31 - 1
	cat := func(xs ...[][2]int) [][2]int {
		var out [][2]int
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	run := func(pairs [][2]int, id uint32) func() []fwd.Packet {
		return func() []fwd.Packet { return genRunFrames(pairs, id, 1000) }
	}
	for _, tc := range []struct {
		name                        string
		pkts                        func() []fwd.Packet
		recv, lost, ro, dups, other uint64
		bad, jumps                  uint64
	}{
		{"forged-far-ahead", run(cat(span(0, 0, 100), seqs(0, 99+far), span(0, 100, 200)), 7), 201, 0, 0, 0, 0, 0, 1},
		{"corrupt-far-ahead", func() []fwd.Packet {
			p := run(cat(span(0, 0, 100), seqs(0, 99+far), span(0, 100, 200)), 7)()
			p[100] = corrupt(p[100])
			return p
		}, 200, 0, 0, 0, 0, 1, 0},
		{"corrupt-in-sequence", func() []fwd.Packet {
			p := run(span(0, 0, 200), 7)()
			p[50] = corrupt(p[50]) // its seq is lost: it never arrived whole
			return p
		}, 199, 1, 0, 0, 0, 1, 0},
		{"zero-checksum-taken", func() []fwd.Packet {
			p := run(span(0, 0, 10), 7)()
			p[3] = zeroSum(corrupt(p[3]))
			return p
		}, 10, 0, 0, 0, 0, 0, 0},
		{"forged-far-behind", run(cat(span(0, 0, 100), seqs(0, 1<<32-(1<<21)), span(0, 100, 200)), 7), 201, 0, 0, 0, 0, 0, 1},
		// Within 2^20: believed, its gap lost; the bound on a forged frame.
		{"forged-just-within", run(cat(span(0, 0, 100), seqs(0, 99+1<<20), span(0, 100, 200)), 7), 201, 1<<20 - 101, 100, 0, 0, 0, 0},
		{"two-forged-apart", run(cat(span(0, 0, 100), seqs(0, 99+far), span(0, 100, 150), seqs(0, 99+far+1), span(0, 150, 200)), 7), 202, 0, 0, 0, 0, 0, 2},
		{"true-jump-goes-on", run(cat(span(0, 0, 100), span(0, 1<<24, 1<<24+100)), 7), 200, 0, 0, 0, 0, 0, 1},
		{"true-jump-then-loss", run(cat(span(0, 0, 100), span(0, 1<<24, 1<<24+50), span(0, 1<<24+60, 1<<24+100)), 7), 190, 10, 0, 0, 0, 0, 1},
		{"previous-run-far", func() []fwd.Packet {
			return append(append(run(span(0, 0, 100), 7)(), run(span(0, 0, 10), 8)()...), run(seqs(0, 99+far), 7)()...)
		}, 111, 0, 0, 0, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := modes.NewSink(func() int64 { return 5000 })
			pkts := tc.pkts()
			for i := 0; i < len(pkts); i += 7 {
				s.Handle(pkts[i:min(i+7, len(pkts))])
			}
			r := s.Report()
			if r.Received != tc.recv || r.Lost != tc.lost || r.Reordered != tc.ro || r.Dups != tc.dups || r.Other != tc.other ||
				r.BadChecksum != tc.bad || r.SeqJumps != tc.jumps {
				t.Fatalf("received %d lost %d reordered %d dups %d other %d bad checksum %d seq jumps %d; want %d %d %d %d %d %d %d",
					r.Received, r.Lost, r.Reordered, r.Dups, r.Other, r.BadChecksum, r.SeqJumps,
					tc.recv, tc.lost, tc.ro, tc.dups, tc.other, tc.bad, tc.jumps)
			}
			if r.Latency.Count != r.Received {
				t.Fatalf("%d latency samples for %d frames received", r.Latency.Count, r.Received)
			}
		})
	}
}

// BenchmarkCountingSink: one 64-frame batch (8 flows, in order) through
// the counting sink per op, 64 and 1518-byte frames; each op first
// restamps the batch with the next sequence numbers (gen.Stamp, a few ns
// a frame), so the sink sees a run, not duplicates. ns/pkt is per frame.
func BenchmarkCountingSink(b *testing.B) {
	for _, size := range []int{64, 1518} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			tpl := gen.Template{
				SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
				SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"),
				SrcPort: 1024, DstPort: 9, Run: 7,
			}
			const batch, flows = 64, 8
			pkts := make([]fwd.Packet, batch)
			lays := make([]gen.Layout, batch)
			for i := range pkts {
				buf := make([]byte, size)
				n, lay := tpl.Frame(buf, size, uint16(i%flows))
				pkts[i] = fwd.Packet{Data: buf[:n], Len: n}
				lays[i] = lay
			}
			s := modes.NewSink(func() int64 { return 5000 })
			var seq uint32
			b.ReportAllocs()
			for b.Loop() {
				for i := range pkts {
					gen.Stamp(pkts[i].Data, lays[i], seq+uint32(i/flows), 1000)
				}
				seq += batch / flows
				s.Handle(pkts)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pkt")
			if r := s.Report(); r.Lost != 0 || r.Reordered != 0 || r.Dups != 0 {
				b.Fatalf("lost %d reordered %d dups %d: the benchmark's run is not in order", r.Lost, r.Reordered, r.Dups)
			}
		})
	}
}
