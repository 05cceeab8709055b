package modes

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
)

// CountingSink is Sink that also reads the payload of frames that carry
// the txonly generator's (gen.Parse): per flow it counts frames received,
// lost (sequence numbers skipped and never seen), reordered (arriving
// after a higher sequence number) and duplicated, and it keeps a histogram
// of latency, from the generator's TX stamp to the arrival time. The
// arrival time is the stamp the XDP program wrote when the frame arrived
// (fwd.Packet.Arrival, bpf_ktime_get_ns: CLOCK_MONOTONIC like gen.Now), so
// the frame's wait in the sink's RX ring is not latency; a frame without
// a plausible one (0, before the frame's TX stamp, or after the clock read
// at the start of the batch) takes that clock reading instead (counted apart: SinkReport.BatchClock).
//
// A flow's counts are kept per generator run, by the run id in the
// payload (gen.Payload.Run): a frame with a run id the flow has not seen
// starts a new epoch (counted in Restarts), sequence numbers from 0 again.
// The previous epoch stays open for frames of its run that arrive late,
// which count as reordered and are not lost; a third run closes it. A
// version 1 payload has no run id (0): its flow is one run.
//
// A frame's UDP checksum is verified (gen.ParseChecked; unless it is 0,
// none sent): a frame that fails it is corrupt or forged, its sequence
// number and stamp not to be believed, and is counted apart (BadChecksum),
// not as any flow's. A frame whose sequence number is more than
// seqJumpMax from its flow's highest, either way, is a jump (SeqJumps): it
// is received, and counts nothing lost, reordered or duplicated; if the
// flow's next frame follows it (within seqJumpMax), the flow goes on from
// there and the gap is not counted lost. So one forged frame moves no
// count but its own, and a generator's sequence that truly jumped (a
// sink that joined late, a v1 generator restarted) is followed after two
// frames.
//
// Frames without the payload are counted (Other) and dropped like the
// rest. Several workers may call Handle at once: each flow's state has a
// lock of its own (a flow arrives on one RX queue, so it is not
// contended), the histogram is atomic. Nothing is allocated per packet.
type CountingSink struct {
	flows     []flowState // gen.MaxFlows, indexed by flow id
	hist      Histogram
	other     atomic.Uint64
	badSum    atomic.Uint64 // the payload, with a UDP checksum that fails
	untracked atomic.Uint64 // flow ids ≥ gen.MaxFlows
	batchClk  atomic.Uint64 // latencies from the batch's clock, no stamp
	now       func() int64
}

// seqWindow is how far back (in sequence numbers) a flow remembers what
// it received: a frame later than that is counted as reordered, and
// cannot be told from a duplicate.
const seqWindow = 1024

// seqJumpMax is the farthest a frame's sequence number may be from its
// flow's highest and still count for the flow's run: a gap of more is a
// jump, not a loss (a loss burst of 2^20 frames of a flow is one second
// of a million packets a second). It bounds what one forged frame with a
// good checksum can add to lost.
const seqJumpMax = 1 << 20

type flowState struct {
	mu   sync.Mutex
	seen bool
	// cur is the newest run's epoch, prev the one before (if restarts >
	// 0), open for its late frames.
	cur, prev                 epoch
	received, reordered, dups uint64
	lostBefore, restarts      uint64 // lostBefore: what epochs before prev and cur lost
	// jumps counts frames more than seqJumpMax from their epoch's
	// highest; pend is the newest of cur's, if pending: the flow goes on
	// from it if the next frame follows it.
	jumps   uint64
	pend    uint32
	pending bool
}

// epoch is one generator run on a flow.
type epoch struct {
	run  uint32
	high int64 // highest sequence number received, unwrapped
	// base is the first sequence number the epoch expects: 0, or where
	// it was joined (a first frame beyond seqJumpMax, a jump).
	base int64
	// unique counts distinct sequence numbers received.
	unique uint64
	win    [seqWindow / 64]uint64
}

// NewSink returns a counting sink. now, if not nil, replaces gen.Now (for
// tests).
func NewSink(now func() int64) *CountingSink {
	if now == nil {
		now = gen.Now
	}
	return &CountingSink{flows: make([]flowState, gen.MaxFlows), now: now}
}

// Promiscuous is false: a sink counts what is addressed to its link.
func (*CountingSink) Promiscuous() bool { return false }

// Handle implements fwd.Handler.
func (s *CountingSink) Handle(pkts []fwd.Packet) {
	now := s.now() // one clock read per batch
	var other, bad, untracked, batchClk uint64
	var latSum int64
	for i := range pkts {
		pkts[i].Drop()
		p, check := gen.ParseChecked(pkts[i].Data)
		switch check {
		case gen.NotOurs:
			other++
			continue
		case gen.BadChecksum:
			bad++
			continue
		}
		if int(p.Flow) >= len(s.flows) {
			untracked++
			continue
		}
		s.flows[p.Flow].record(p.Seq, p.Run)
		tx := p.TXTime(now)
		at := pkts[i].Arrival
		if at < tx || at > now { // none, stale (older than the frame), or unknown clock
			at = now
			batchClk++
		}
		s.hist.add(at - tx)
		latSum += max(at-tx, 0)
	}
	if latSum != 0 {
		s.hist.sum.Add(latSum)
	}
	if batchClk > 0 {
		s.batchClk.Add(batchClk)
	}
	if other > 0 {
		s.other.Add(other)
	}
	if bad > 0 {
		s.badSum.Add(bad)
	}
	if untracked > 0 {
		s.untracked.Add(untracked)
	}
}

// record counts sequence number seq (the low 32 bits: unwrapped against the
// highest seen) of run.
func (f *flowState) record(seq, run uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.received++
	switch {
	case !f.seen:
		f.seen = true
		f.cur.start(run, seq, false)
	case run == f.cur.run:
		k := f.cur.record(seq)
		if k != jump {
			f.pending = false
			f.count(k)
			return
		}
		if d := int32(seq - f.pend); f.pending && d <= seqJumpMax && d >= -seqJumpMax {
			// The frame follows the last jump: the flow goes on from
			// there, the gap not lost.
			f.lostBefore += f.cur.lost()
			f.cur.start(run, f.pend, true)
			f.pending = false
			f.count(f.cur.record(seq))
			return
		}
		f.jumps++
		f.pend, f.pending = seq, true
	case f.restarts > 0 && run == f.prev.run:
		// The previous run's frame, after the next run's: late.
		switch f.prev.record(seq) {
		case dup:
			f.dups++
		case jump:
			f.jumps++
		default:
			f.reordered++
		}
	default:
		if f.restarts > 0 {
			f.lostBefore += f.prev.lost()
		}
		f.restarts++
		f.prev = f.cur
		f.cur.start(run, seq, false)
		f.pending = false
	}
}

func (f *flowState) count(k arrival) {
	switch k {
	case late:
		f.reordered++
	case dup:
		f.dups++
	}
}

// arrival is what a sequence number was to its epoch.
type arrival int

const (
	inOrder arrival = iota
	late            // after a higher one
	dup
	jump // more than seqJumpMax from the highest
)

// start begins an epoch at seq: its first expected sequence number is 0,
// unless seq is beyond seqJumpMax or the epoch is joined (after a jump),
// when it is seq: the numbers before are not the epoch's to count lost.
func (e *epoch) start(run, seq uint32, joined bool) {
	*e = epoch{run: run, high: int64(seq), unique: 1}
	if joined || seq > seqJumpMax {
		e.base = e.high
	}
	e.set(e.high)
}

func (e *epoch) record(seq uint32) arrival {
	d := int64(int32(seq - uint32(e.high)))
	if d > seqJumpMax || d < -seqJumpMax {
		return jump
	}
	s := e.high + d
	switch {
	case s > e.high:
		// Forget what the window slides past: every sequence number
		// from high+1 to s is unseen until it comes.
		if s-e.high >= seqWindow {
			clear(e.win[:])
		} else {
			for k := e.high + 1; k < s; k++ {
				e.clearBit(k)
			}
		}
		e.high = s
		e.set(s)
		e.unique++
		return inOrder
	case s < e.base:
		return late // before the epoch's first: not its to count
	case e.high-s >= seqWindow:
		e.unique++ // too late to tell from a duplicate
		return late
	case e.has(s):
		return dup
	default:
		e.set(s)
		e.unique++
		return late
	}
}

// lost is how many sequence numbers up to the highest this run never
// received.
func (e *epoch) lost() uint64 {
	if exp := uint64(e.high + 1 - e.base); exp > e.unique {
		return exp - e.unique
	}
	return 0
}

// lost is every epoch's.
func (f *flowState) lost() uint64 {
	n := f.lostBefore + f.cur.lost()
	if f.restarts > 0 {
		n += f.prev.lost()
	}
	return n
}

func (e *epoch) set(s int64)      { e.win[s/64%(seqWindow/64)] |= 1 << (s % 64) }
func (e *epoch) clearBit(s int64) { e.win[s/64%(seqWindow/64)] &^= 1 << (s % 64) }
func (e *epoch) has(s int64) bool { return e.win[s/64%(seqWindow/64)]&(1<<(s%64)) != 0 }

// FlowReport is one flow's counts.
type FlowReport struct {
	Flow      int    `json:"flow"`
	Received  uint64 `json:"received"`
	Lost      uint64 `json:"lost"` // sequence numbers up to the highest never received
	Reordered uint64 `json:"reordered"`
	Dups      uint64 `json:"duplicates"`
	Highest   int64  `json:"highest_seq"` // in the newest run
	// Restarts are generator runs after the first on this flow id: frames
	// with a run id (gen.Payload.Run) the flow had not had.
	Restarts uint64 `json:"restarts"`
	// SeqJumps are frames more than 2^20 from the flow's highest sequence
	// number (CountingSink): received, and not lost, reordered or
	// duplicated.
	SeqJumps uint64 `json:"seq_jumps"`
}

// SinkReport is what a counting sink saw.
type SinkReport struct {
	// Frames carried the generator's payload (Received + untracked);
	// Other did not.
	Frames uint64 `json:"frames"`
	Other  uint64 `json:"other"`
	// BadChecksum frames carried the payload with a UDP checksum that
	// fails (or cut short of their UDP length): not counted in Frames or
	// any flow.
	BadChecksum uint64 `json:"bad_checksum"`
	Untracked   uint64 `json:"untracked_flow_ids"`
	Received    uint64 `json:"received"`
	Lost        uint64 `json:"lost"`
	Reordered   uint64 `json:"reordered"`
	Dups        uint64 `json:"duplicates"`
	SeqJumps    uint64 `json:"seq_jumps"`
	// BatchClock counts the latencies measured to the clock read at the
	// start of a batch, for frames without the XDP program's arrival
	// stamp: those include the wait in the RX ring.
	BatchClock uint64 `json:"latency_batch_clock"`
	// Latency in ns: percentiles are the upper bound of the histogram
	// bucket they fall in (within 12.5 %).
	Latency LatencyReport `json:"latency_ns"`
	Flows   []FlowReport  `json:"flows,omitempty"`
}

// LatencyReport summarizes a histogram.
type LatencyReport struct {
	Count   uint64   `json:"count"`
	P50     int64    `json:"p50"`
	P99     int64    `json:"p99"`
	P999    int64    `json:"p999"`
	Max     int64    `json:"max"`
	Sum     int64    `json:"sum"` // of every value
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Report reads the counts, from any goroutine; flows lists every flow seen.
func (s *CountingSink) Report() SinkReport {
	r := SinkReport{Other: s.other.Load(), BadChecksum: s.badSum.Load(), Untracked: s.untracked.Load(), BatchClock: s.batchClk.Load()}
	for i := range s.flows {
		f := &s.flows[i]
		f.mu.Lock()
		if f.seen {
			fr := FlowReport{Flow: i, Received: f.received, Lost: f.lost(), Reordered: f.reordered,
				Dups: f.dups, Highest: f.cur.high, Restarts: f.restarts, SeqJumps: f.jumps}
			r.Flows = append(r.Flows, fr)
			r.Received += fr.Received
			r.Lost += fr.Lost
			r.Reordered += fr.Reordered
			r.Dups += fr.Dups
			r.SeqJumps += fr.SeqJumps
		}
		f.mu.Unlock()
	}
	r.Frames = r.Received + r.Untracked
	r.Latency = s.hist.Report()
	return r
}

// Histogram is a log-linear latency histogram (HDR-style: 8 linear
// sub-buckets per power of two, so a bucket is within 12.5 % of its
// values) over int64 ns, safe for concurrent Add.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Int64
	sum    atomic.Int64 // of the values counted, for a Prometheus histogram's _sum
}

const (
	histSub     = 8 // sub-buckets per power of two
	histLinear  = 2 * histSub
	histBuckets = histLinear + (64-5)*histSub
)

// bucketOf is v's bucket: values below 16 have one each.
func bucketOf(v int64) int {
	if v < histLinear {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 1 // ≥ 4
	sub := int(uint64(v)>>(e-3)) & (histSub - 1)
	return histLinear + (e-4)*histSub + sub
}

// bucketTop is the largest value in bucket i.
func bucketTop(i int) int64 {
	if i < histLinear {
		return int64(i)
	}
	e := (i-histLinear)/histSub + 4
	sub := (i - histLinear) % histSub
	return int64((uint64(histSub+sub+1) << (e - 3)) - 1)
}

// Add counts one value (a negative one as 0).
func (h *Histogram) Add(v int64) {
	h.add(v)
	h.sum.Add(max(v, 0))
}

// add is Add but for the sum, which the caller adds (once per batch).
func (h *Histogram) add(v int64) {
	h.counts[bucketOf(v)].Add(1)
	for m := h.max.Load(); v > m && !h.max.CompareAndSwap(m, v); m = h.max.Load() {
	}
}

// Bucket is one histogram bucket: Count values ≤ UpTo (and above the
// previous bucket's).
type Bucket struct {
	UpTo  int64  `json:"le"`
	Count uint64 `json:"count"`
}

// Report gives the count, percentiles and the non-empty buckets.
func (h *Histogram) Report() LatencyReport {
	var r LatencyReport
	var c [histBuckets]uint64
	for i := range c {
		c[i] = h.counts[i].Load()
		r.Count += c[i]
		if c[i] > 0 {
			r.Buckets = append(r.Buckets, Bucket{UpTo: bucketTop(i), Count: c[i]})
		}
	}
	r.Max, r.Sum = h.max.Load(), h.sum.Load()
	if r.Count == 0 {
		return r
	}
	pct := func(q float64) int64 {
		rank := max(uint64(math.Ceil(q*float64(r.Count))), 1) // 1-based
		var acc uint64
		for i, n := range c {
			if acc += n; acc >= rank {
				return min(bucketTop(i), r.Max)
			}
		}
		return r.Max
	}
	r.P50, r.P99, r.P999 = pct(0.50), pct(0.99), pct(0.999)
	return r
}
