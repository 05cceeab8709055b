package modes_test

import (
	"net"
	"net/netip"
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
		{"wrap", seqs(0, 1<<32-2, 1<<32-1, 0, 2), 4, 1<<32 - 2 + 1, 0, 0}, // the head before 2^32-2 is lost too
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
// each frame of the newest run or of the one before it, sequence numbers
// under the window, gives the counts of an exact model that remembers
// every sequence number of every run.
func FuzzCountingSinkRuns(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 2, 2, 0, 1, 5, 0, 1})
	f.Add([]byte{0, 9, 0, 3, 0, 3, 2, 7, 3, 0, 1, 2, 0, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		type model struct {
			seen     map[int]bool
			high     int
			distinct int
		}
		var runs []*model
		var recv, ro, dups uint64
		var frames [][3]int // flow 0, seq, run id
		for i := 0; i+1 < len(data); i += 2 {
			seq := int(data[i+1]) | int(data[i]>>2&3)<<8 // 0..1023
			r := len(runs) - 1
			switch {
			case r < 0 || data[i]&2 != 0:
				runs = append(runs, &model{seen: map[int]bool{}, high: -1})
				r = len(runs) - 1
			case data[i]&1 != 0 && r > 0:
				r-- // the previous run's frame, late
			}
			m := runs[r]
			recv++
			first := m.high < 0
			switch {
			case m.seen[seq]:
				dups++
			case !first && (r < len(runs)-1 || seq < m.high):
				ro++
			}
			if !m.seen[seq] {
				m.seen[seq] = true
				m.distinct++
			}
			m.high = max(m.high, seq)
			frames = append(frames, [3]int{0, seq, r + 1})
		}
		var lost uint64
		for _, m := range runs {
			lost += uint64(m.high + 1 - m.distinct)
		}
		s := modes.NewSink(func() int64 { return 5000 })
		for _, fr := range frames {
			s.Handle(genRunFrames([][2]int{{fr[0], fr[1]}}, uint32(fr[2]), 1000))
		}
		r := s.Report()
		var restarts uint64
		for _, fl := range r.Flows {
			restarts += fl.Restarts
		}
		wantRestarts := uint64(max(len(runs)-1, 0))
		if r.Received != recv || r.Lost != lost || r.Reordered != ro || r.Dups != dups || restarts != wantRestarts {
			t.Fatalf("received %d lost %d reordered %d dups %d restarts %d; model %d %d %d %d %d",
				r.Received, r.Lost, r.Reordered, r.Dups, restarts, recv, lost, ro, dups, wantRestarts)
		}
	})
}
