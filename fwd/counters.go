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

// portStats are one socket's counters. Only its worker writes them, once
// per batch; readers sum them at any time.
type portStats struct {
	rxPackets atomic.Uint64
	rxBytes   atomic.Uint64
	txPackets atomic.Uint64
	txBytes   atomic.Uint64
	txDescs   atomic.Uint64
	// txPaths counts packets sent per linearize.Path.
	txPaths [linearize.NumPaths]atomic.Uint64
	// descHist[k] counts packets that left as k descriptors (k ≤ 18).
	descHist [linearize.MaxDescs + 1]atomic.Uint64
	// inlineFallbacks: small packets that found the inline zone empty
	// and left from their frame instead.
	inlineFallbacks atomic.Uint64
	// badCompletions counts completion-ring addresses that are no UMEM
	// unit: never followed. Reported with the RX ring's invalid
	// descriptors (rxring.Ring.Invalid).
	badCompletions atomic.Uint64
	// txNoRoom counts packets dropped because no TX layout had room
	// (frag zone exhausted for a chain longer than the kernel takes).
	txNoRoom atomic.Uint64
	// orderTimeouts counts packets sent before their turn because they
	// were held for ordering longer than maxHold (merge.go): not drops.
	orderTimeouts atomic.Uint64
	// handlerDrops counts packets received here that the Handler dropped
	// (or left without a verdict).
	handlerDrops atomic.Uint64
	// txFull counts packets a Handler sent to this TX queue while it had
	// no room (its link down): dropped rather than stall every link.
	txFull atomic.Uint64
	// stopDropped counts packets handed to this TX lane that were still
	// waiting when the forwarder closed.
	stopDropped atomic.Uint64
	// handoffFull counts packets dropped because the handoff ring to the
	// worker owning their flow's TX queue was full.
	handoffFull atomic.Uint64
	// csumCompleted counts packets received with a partial TCP/UDP
	// checksum (left for offload) that were finished in software.
	csumCompleted atomic.Uint64
	// vlanRestored counts packets received whose offloaded VLAN tag was
	// put back into the frame (vlan.go).
	vlanRestored atomic.Uint64
	// rxTruncated counts packets received shorter than their IP header
	// says (truncated.go): dropped.
	rxTruncated atomic.Uint64
	// rxBatches counts the batches read from this RX ring (forward calls
	// that found packets), batchHist those batches by packets per batch
	// (batchBucket). Fill-ring wake-ups and refills cut short are counted
	// by rxring, TX kicks by txring.
	rxBatches atomic.Uint64
	batchHist [numBatchBuckets]atomic.Uint64
}

// batchCounts accumulates one batch's counters in plain memory; they are
// published with one atomic add each at the end of the batch.
type batchCounts struct {
	txPackets, txBytes, txDescs uint64
	paths                       [linearize.NumPaths]uint64
	fallbacks, noRoom           uint64
	handlerDrops                uint64
	vlanRestored                uint64
	truncated                   uint64
	txFull                      uint64
	handoffFull, csumCompleted  uint64
	atStop                      uint64 // dropped_at_stop (dropHandoffs)
	hist                        [linearize.MaxDescs + 1]uint64
}

// loopStats are a worker's loop counters: sleeps counts the times it
// slept (ppoll, or nanosleep with a link down); polls the ppoll returns,
// pollTimeouts those with nothing ready, pollEventfd those with the
// waker's eventfd ready; progress the loop's rounds for
// Forwarder.Stalled (health.go). Written only by the worker, once per
// sleep or round.
type loopStats struct {
	sleeps, polls, pollTimeouts, pollEventfd atomic.Uint64
	progress                                 workerProgress
}

// publishRX adds one batch's receive-side counts to in's counters, one
// atomic add each.
func publishRX(in *port, c *batchCounts, packets int, rxBytes uint64) {
	in.stats.rxPackets.Add(uint64(packets))
	in.stats.rxBytes.Add(rxBytes)
	in.stats.rxBatches.Add(1)
	in.stats.batchHist[batchBucket(packets)].Add(1)
	if c.csumCompleted != 0 {
		in.stats.csumCompleted.Add(c.csumCompleted)
	}
	if c.handlerDrops != 0 {
		in.stats.handlerDrops.Add(c.handlerDrops)
	}
	if c.vlanRestored != 0 {
		in.stats.vlanRestored.Add(c.vlanRestored)
	}
	if c.truncated != 0 {
		in.stats.rxTruncated.Add(c.truncated)
	}
}

// publishTX adds one batch's transmit-side counts to s, a lane's socket's
// counters.
func publishTX(s *portStats, c *batchCounts) {
	s.txPackets.Add(c.txPackets)
	s.txBytes.Add(c.txBytes)
	s.txDescs.Add(c.txDescs)
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
	if c.fallbacks != 0 {
		s.inlineFallbacks.Add(c.fallbacks)
	}
	if c.noRoom != 0 {
		s.txNoRoom.Add(c.noRoom)
	}
	if c.handoffFull != 0 {
		s.handoffFull.Add(c.handoffFull)
	}
	if c.txFull != 0 {
		s.txFull.Add(c.txFull)
	}
	if c.atStop != 0 {
		s.stopDropped.Add(c.atStop)
	}
}
