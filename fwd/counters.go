package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/linearize"
)

// The counters of the engine, and how a batch adds to them.
//
// Concurrency: a socket's counters (portStats) are written only by the
// worker that reads the socket (receive side) or transmits on it (its TX
// lane), once per batch with one atomic add each from plain per-batch
// counts (batchCounts); readers (LinkStats, QueueStats, the metrics) load
// them from any goroutine. A worker's loop counters (loopStats) are
// written only by the worker.

// count is one of a socket's scalar counters: an index into portStats.n
// and batchCounts.n. The drops counted in user space follow cDrops, one
// per dropReason (abandon.go names them). A new counter is a constant
// here and the LinkStats field it shows in (linkCounts); a new drop, a
// reason and its name (abandon.go).
type count uint8

const (
	cRXPackets count = iota
	cRXBytes
	// cRXBatches counts the batches read from the RX ring (forward calls
	// that found packets); portStats.batchHist sorts them by packets per
	// batch (batchBucket). Fill-ring wake-ups and refills cut short are
	// counted by rxring, TX kicks by txring.
	cRXBatches
	cTXPackets
	cTXBytes
	cTXDescs
	// cInlineFallbacks: small packets that found the inline zone empty
	// and left from their frame instead.
	cInlineFallbacks
	// cCsumCompleted: packets received with a partial TCP/UDP checksum
	// (left for offload) that were finished in software.
	cCsumCompleted
	// cVLANRestored: packets received whose offloaded VLAN tag was put
	// back into the frame (vlan.go).
	cVLANRestored
	// cOrderTimeouts: packets sent before their turn because they were
	// held for ordering longer than maxHold (merge.go): not drops.
	cOrderTimeouts
	// cBadCompletions: completion-ring addresses that are no UMEM unit,
	// never followed; reported with the RX ring's invalid descriptors
	// (rx_bad_descs).
	cBadCompletions
	// cCrossInline, cCrossFrame and cCrossFrag count the packets copied
	// into another UMEM domain on their way out (domain.go), by the TX
	// path the copy took (a chain of frames counts as frames);
	// cCrossBytes their bytes. Counted on the link they leave by.
	cCrossInline
	cCrossFrame
	cCrossFrag
	cCrossBytes
	// cDrops + r counts the packets abandoned for dropReason r.
	cDrops
	numCounts = cDrops + count(numDropReasons)
)

// linkCounts says where LinkStats shows each counter below cDrops; the
// drops show in LinkStats.Drops by their reason's name, cBadCompletions in
// Drops[DropRXBadDesc] (nil here).
var linkCounts = [cDrops]func(*LinkStats) *uint64{
	cRXPackets:       func(l *LinkStats) *uint64 { return &l.RXPackets },
	cRXBytes:         func(l *LinkStats) *uint64 { return &l.RXBytes },
	cRXBatches:       func(l *LinkStats) *uint64 { return &l.RXBatches },
	cTXPackets:       func(l *LinkStats) *uint64 { return &l.TXPackets },
	cTXBytes:         func(l *LinkStats) *uint64 { return &l.TXBytes },
	cTXDescs:         func(l *LinkStats) *uint64 { return &l.TXDescriptors },
	cInlineFallbacks: func(l *LinkStats) *uint64 { return &l.InlineFallbacks },
	cCsumCompleted:   func(l *LinkStats) *uint64 { return &l.ChecksumsCompleted },
	cVLANRestored:    func(l *LinkStats) *uint64 { return &l.VLANRestored },
	cOrderTimeouts:   func(l *LinkStats) *uint64 { return &l.OrderHoldTimeouts },
	cCrossInline:     func(l *LinkStats) *uint64 { return &l.DomainCopiesInline },
	cCrossFrame:      func(l *LinkStats) *uint64 { return &l.DomainCopiesFrame },
	cCrossFrag:       func(l *LinkStats) *uint64 { return &l.DomainCopiesFrag },
	cCrossBytes:      func(l *LinkStats) *uint64 { return &l.DomainCopyBytes },
}

// ringCounts are the LinkStats fields the rings count (txring's kicks,
// rxring's fill wake-ups and lend): summed over queues with linkCounts.
// RXLend is a gauge: a removed link's is not kept (removedTotals.add).
var ringCounts = [...]func(*LinkStats) *uint64{
	func(l *LinkStats) *uint64 { return &l.TXKicks },
	func(l *LinkStats) *uint64 { return &l.KickErrors },
	func(l *LinkStats) *uint64 { return &l.FillWakeups },
	func(l *LinkStats) *uint64 { return &l.RXLend },
	func(l *LinkStats) *uint64 { return &l.RXLendGrowths },
}

// portStats are one socket's counters: n by count, and the histograms.
type portStats struct {
	n [numCounts]atomic.Uint64
	// txPaths counts packets sent per linearize.Path.
	txPaths [linearize.NumPaths]atomic.Uint64
	// descHist[k] counts packets that left as k descriptors (k ≤ 18).
	descHist [linearize.MaxDescs + 1]atomic.Uint64
	// batchHist counts the RX batches by packets per batch (cRXBatches).
	batchHist [numBatchBuckets]atomic.Uint64
}

// load reads counter c.
func (s *portStats) load(c count) uint64 { return s.n[c].Load() }

// batchCounts accumulates one batch's counters in plain memory, for one
// socket; publish adds them with one atomic add each.
type batchCounts struct {
	n     [numCounts]uint64
	paths [linearize.NumPaths]uint64
	hist  [linearize.MaxDescs + 1]uint64
}

// publish adds what c counted to s, one atomic add per counter that
// moved.
func publish(s *portStats, c *batchCounts) {
	for i, v := range c.n {
		if v != 0 {
			s.n[i].Add(v)
		}
	}
	for p, v := range c.paths {
		if v != 0 {
			s.txPaths[p].Add(v)
		}
	}
	for k, v := range c.hist {
		if v != 0 {
			s.descHist[k].Add(v)
		}
	}
}

// publishRX ends a batch read from in: its packets, bytes and size, and
// what the batch counted on the receive side (c).
func publishRX(in *port, c *batchCounts, packets int, rxBytes uint64) {
	c.n[cRXPackets] += uint64(packets)
	c.n[cRXBytes] += rxBytes
	c.n[cRXBatches]++
	in.stats.batchHist[batchBucket(packets)].Add(1)
	publish(&in.stats, c)
}

// loopStats are a worker's loop counters: sleeps counts the times it
// slept (ppoll, or nanosleep with a link down); polls the ppoll returns,
// pollTimeouts those with nothing ready, pollEventfd those with the
// waker's eventfd ready; progress the loop's rounds for
// Forwarder.Stalled (health.go). Written only by the worker, once per
// sleep or round.
type loopStats struct {
	sleeps, polls, pollTimeouts, pollEventfd atomic.Uint64
	// replyCaught counts dry spells ended within the reply window (a
	// wake-up saved); replyWindow is the window now (ns, spin.go).
	replyCaught atomic.Uint64
	replyWindow atomic.Int64
	// cadenceCaught counts new work that came while the worker polled
	// the window it was due in (a wake-up saved: spin.go's cadence).
	cadenceCaught atomic.Uint64
	// stoodIn counts the merges another worker ran in this one's place
	// while it slept (standin.go); written by that worker, under the
	// lease.
	stoodIn atomic.Uint64

	progress workerProgress
}
