package fwd

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/rxring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

const (
	// pollTimeout bounds how long a stop request waits for an idle worker.
	pollTimeout = 20 * time.Millisecond
	// drainTimeout bounds how long a stopping worker waits for the kernel
	// to complete what it already submitted.
	drainTimeout = time.Second
)

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

// port is one socket: RX queue `queue` of link `link`. Every RX queue of
// every link has one, owned by worker queue % workers; the ports whose
// queue is below the worker count are also TX lanes: worker w transmits
// on queue w of each link, so every TX ring has a single producer.
type port struct {
	link, queue int
	sock        *xsk.Socket
	rx          *rxring.Ring // its fill and RX rings, with the owner's frame cache
	tx          *lane        // nil unless a TX lane
	stats       portStats
	owner       *worker
	// out are the handoff rings from this RX ring to each TX queue's
	// owner, by output link (merge.go); nil with one queue.
	out [][]*handoff
	// wm is the ordering watermark of this RX ring (merge.go): written by
	// the owner each round, read by every merging worker. blockedAt
	// (monotonic ns, 0: not blocked) is when the owner last found a
	// handoff ring out of it too full to read it.
	wm        atomic.Int64
	blockedAt atomic.Int64
	// stamps is the program's newest stamp per RX queue (nil unless the
	// program runs in native mode); seen, written by the owner once per
	// batch after its handoffs are published, is the stamp of the newest
	// packet it took from this ring. Equal, nothing older is in flight
	// (merge.go, caughtUp).
	stamps *xsk.LastStamps
	seen   atomic.Int64
	// With a Handler, the owner's counts for this TX ring in the current
	// batch, and whether it is on the batch's list (verdicts.go).
	bc      batchCounts
	touched bool
}

// frameCacheSize bounds a worker's private stock of free frames. Frames
// freed by the worker that transmits a flow are refilled into the fill ring
// of the worker that receives it, through the shared pool; a small cache
// sends them there after half its size, where a large one would hoard
// what another worker's fill ring starves for.
const frameCacheSize = 512

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

// worker owns the RX queues q, q+W, q+2W, … of every link (W workers) and
// TX queue q of every link.
type worker struct {
	q      int
	rx     []*port // the RX rings it reads, on every link
	tx     []*port // tx[o]: its TX lane on link o
	mem    []byte
	zone   *umem.Zone // RX frames
	frames *umem.Cache
	build  *inline.Builder
	meter  umem.PageMeter
	batch  uint32
	reaped []uint64   // completion scratch, batch long
	chain  []xsk.Desc // one packet's RX descriptors
	out    []xsk.Desc // one packet's TX descriptors
	pfds   []unix.PollFd
	// wake lets other workers rouse this one from poll(2) when they hand
	// it packets (handoff.go); written only while it sleeps.
	wake *waker

	// With several queues: the flow table and the ordering state (merge.go).
	flows *flowState
	now   int64
	cpu   int // pinned CPU, or -1
	order *ordering
	// holdDue (monotonic ns) is when the oldest packet held for ordering
	// may become sendable by the clock alone (merge.go).
	holdDue int64
	// lastStamp is the stamp of the newest packet of the current RX batch
	// (port.seen).
	lastStamp int64
	// draining: stopping; held packets go out without waiting for order.
	draining bool
	// csum: finish partial TCP/UDP checksums (--complete-checksums).
	csum bool
	// inlineMax is the forwarder's live inline limit.
	inlineMax *atomic.Int32
	// spin decides whether to poll the rings once they ran dry before
	// sleeping in poll(2) (spin.go); coalesce (ns) is how long at least.
	spin     spinner
	coalesce int64
	// deferred: the last round published TX descriptors and left their
	// kick to the next one (run).
	deferred bool
	// busyPoll: each empty round runs the RX links' NAPI (recvfrom).
	busyPoll bool
	// progress counts the loop's rounds for Forwarder.Stalled (health.go).
	progress workerProgress
	// tap hands packets to xdpfwd capture (capture.go).
	tap tapState

	// With a Handler (verdicts.go): the batch's packets and where their
	// descriptors are, per-lane counts, the lanes written this batch.
	handler Handler
	pkts    []Packet
	spans   []span
	descs   []xsk.Desc
	touched []*port
	// sleeps counts the times the worker slept (ppoll, or nanosleep with
	// a link down); polls the ppoll returns, pollTimeouts those with
	// nothing ready, pollEventfd those with the waker's eventfd ready.
	// Written only by the worker, once per sleep.
	sleeps, polls, pollTimeouts, pollEventfd atomic.Uint64
}

func newWorker(f *Forwarder, q int) (*worker, error) {
	wk, err := newWaker()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", q, err)
	}
	w := &worker{
		q:         q,
		mem:       f.region.Mem(),
		zone:      f.region.Frames,
		frames:    f.region.Frames.NewCache(frameCacheSize),
		build:     inline.NewBuilder(f.region, f.policy, 1024, packAlign(f.socks[0][q])),
		batch:     uint32(f.cfg.Batch),
		reaped:    make([]uint64, f.cfg.Batch),
		chain:     make([]xsk.Desc, 0, linearize.MaxDescs),
		out:       make([]xsk.Desc, linearize.MaxDescs),
		wake:      wk,
		cpu:       -1,
		csum:      f.cfg.CompleteChecksums,
		inlineMax: &f.inlineMax,
		spin:      newSpinner(f.cfg.Spin),
		coalesce:  int64(f.cfg.Coalesce),
		busyPoll:  f.cfg.BusyPoll > 0,
		handler:   f.handler,
	}
	w.touched = make([]*port, 0, len(f.links)+1)
	if w.handler != nil {
		w.pkts = make([]Packet, 0, f.cfg.RingSize)
		w.spans = make([]span, 0, f.cfg.RingSize)
		w.descs = make([]xsk.Desc, 0, f.cfg.RingSize)
	}
	if len(f.cfg.CPUs) > 0 {
		w.cpu = f.cfg.CPUs[q%len(f.cfg.CPUs)]
	}
	w.tx = make([]*port, len(f.ports))
	for i := range f.ports {
		w.tx[i] = f.ports[i][q]
		for qq := q; qq < len(f.ports[i]); qq += f.cfg.Queues {
			p := f.ports[i][qq]
			p.owner = w
			p.rx = rxring.New(p.sock, w.frames)
			w.rx = append(w.rx, p)
			w.pfds = append(w.pfds, unix.PollFd{Fd: int32(p.sock.FD()), Events: unix.POLLIN})
		}
	}
	w.pfds = append(w.pfds, unix.PollFd{Fd: int32(w.wake.fd), Events: unix.POLLIN})
	return w, nil
}

// packAlign is where copied packets start in a frag block (see
// inline.NewBuilder).
func packAlign(s *xsk.Socket) int {
	if s.ZeroCopy() {
		return umem.ChunkMax
	}
	return 64
}

func (w *worker) run(stop *atomic.Bool) {
	// One OS thread per worker: its rings are touched from one CPU at a
	// time, and poll(2) blocks only this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if w.cpu >= 0 {
		var set unix.CPUSet
		set.Set(w.cpu)
		// Best effort: a CPU outside the process's cpuset is refused,
		// and the worker runs unpinned (New checked the list).
		unix.SchedSetaffinity(0, &set)
	}

	// Timed sleeps (a held packet's turn) should end on time, not up to
	// the default 50 µs timer slack later.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)

	idle := 0
	spinning := false
	var dry int64 // when the rings ran dry (monotonic ns), with coalesce
	for !stop.Load() {
		w.progress.rounds.Add(1)
		n, held := w.round()
		if n > 0 {
			if spinning {
				w.spin.caught()
			}
			idle, spinning = 0, false
			w.kickOrDefer()
			continue
		}
		if held > 0 {
			// Packets held for ordering wait on the watermark slack (a
			// time: spin through a short wait, sleep through a longer
			// one, never past the turn) or on another worker's progress.
			// That worker may share this CPU, so never spin for it: a
			// short sleep gives it the CPU (it wakes us if it hands us
			// more).
			switch due := time.Duration(w.holdDue - w.clock()); {
			case due > holdSpin:
				w.sleep(min(due, holdPoll))
			case due <= 0:
				w.sleep(holdYield)
			default:
				w.flush()
			}
			continue
		}
		if w.busyPoll {
			for _, p := range w.rx {
				p.sock.WakeRX()
			}
		}
		// Spin while spin says spinning pays, and until coalesce has
		// passed since the rings ran dry: what comes meanwhile costs no
		// wake-up. What the last round published is kicked first.
		if idle++; idle == 1 {
			spinning = w.spin.start()
			if w.coalesce > 0 {
				dry = monoNow()
			}
		}
		if spinning && w.spin.more(idle) || w.coalesce > 0 && monoNow()-dry < w.coalesce {
			w.flush()
			continue
		}
		if spinning {
			w.spin.missed()
		}
		idle, spinning = 0, false
		w.sleep(pollTimeout)
	}
	w.drain()
}

// kickOrDefer ends a round that moved packets. When it left every RX ring
// empty, the next round most likely finds nothing, and the worker then
// spins (kicking first) or sleeps in poll(2), which kicks the TX rings
// itself: so the kick waits one round, and a sleep saves a sendto.
// Otherwise, or when the round before deferred already, it kicks now.
func (w *worker) kickOrDefer() {
	if !w.deferred && !w.rxPending() {
		w.deferred = true
		return
	}
	w.flush()
}

// flush kicks every TX ring of the worker's that has published
// descriptors owed a kick.
func (w *worker) flush() {
	w.deferred = false
	for _, p := range w.rx {
		if p.tx != nil && p.tx.owed() {
			p.tx.flush()
		}
	}
}

// round is one pass over the worker's rings: refill, forward, merge, reap.
// It returns the packets it moved and the descriptors it holds for order.
func (w *worker) round() (n, held int) {
	for _, p := range w.rx {
		w.refill(p)
	}
	for _, p := range w.rx {
		n += w.forwardAll(p)
	}
	if w.order != nil {
		var m int
		m, held = w.merge()
		n += m
	}
	w.reapAll()
	w.frames.Publish()
	w.build.Publish()
	return n, held
}

// holdPoll bounds a sleep while packets are held for ordering: a worker
// whose watermark we wait on does not wake us when it advances. A wait
// shorter than holdSpin is spun through: a sleep would overshoot it. A
// wait on another worker sleeps holdYield, so that a worker sharing the
// CPU runs.
const (
	holdPoll  = 100 * time.Microsecond
	holdSpin  = 10 * time.Microsecond
	holdYield = 20 * time.Microsecond
)

// sleep waits in ppoll(2) for an RX ring, a handoff from another worker
// or the timeout. The poll kicks the TX rings; what exceeds what one poll
// surely sends is kicked first (lane.beforeSleep). A down link makes it kick explicitly and sleep the backoff instead (its
// RX ring would keep poll from sleeping).
func (w *worker) sleep(timeout time.Duration) {
	blocked := false
	for _, p := range w.rx {
		blocked = blocked || p.tx != nil && p.tx.down()
	}
	w.deferred = false
	for _, p := range w.rx {
		if p.tx != nil {
			p.tx.beforeSleep(blocked)
		}
	}
	if blocked {
		timeout = kickBackoff
	}
	// Announce the sleep before the last look at the handoff rings: a
	// producer publishes, then reads the flag (handoff.go), so one of the
	// two sees the other.
	w.wake.idle.Store(true)
	w.wake.sleeping.Store(true)
	if w.order != nil && w.order.pending() {
		w.wake.sleeping.Store(false)
		w.wake.idle.Store(false)
		w.flush()
		return
	}
	ts := unix.NsecToTimespec(int64(timeout))
	w.sleeps.Add(1)
	if blocked {
		time.Sleep(timeout)
	} else {
		n, err := unix.Ppoll(w.pfds, &ts, nil)
		// The poll passed over every socket (even one a signal ended):
		// what was owed left.
		if err == nil || err == unix.EINTR {
			for _, p := range w.rx {
				if p.tx != nil {
					p.tx.polled()
				}
			}
		}
		w.polls.Add(1)
		if n == 0 {
			w.pollTimeouts.Add(1)
		} else if w.pfds[len(w.pfds)-1].Revents != 0 {
			w.pollEventfd.Add(1)
		}
	}
	w.wake.sleeping.Store(false)
	w.wake.idle.Store(false)
	if w.pfds[len(w.pfds)-1].Revents != 0 {
		w.wake.drain()
	}
}

// forwardAll forwards what RX ring p holds, a batch at a time, up to
// maxBatches, before the worker turns to what other workers handed it: a
// flow whose packets arrived on two RX queues then keeps the order in
// which the two workers read them, as long as a burst fits the budget.
func (w *worker) forwardAll(p *port) int {
	total := 0
	for range maxBatches {
		n := w.forward(p)
		total += n
		if n < int(w.batch)/2 {
			break
		}
	}
	return total
}

// maxBatches bounds forwardAll, so one busy link cannot starve the other.
const maxBatches = 8

// publishRX adds one batch's receive-side counts to in's counters, one
// atomic add each.
func (w *worker) publishRX(in *port, c *batchCounts, packets int, rxBytes uint64) {
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

// publishTX adds one batch's transmit-side counts to out's counters.
func (w *worker) publishTX(out *port, c *batchCounts) {
	s := &out.stats
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

// reapAll reaps every TX ring the worker produces: its TX lanes, and with
// a Handler the RX sockets it reflects on.
func (w *worker) reapAll() {
	for _, p := range w.rx {
		if p.tx != nil {
			w.reap(p)
		}
	}
}

// inFlight is what the kernel has not completed of the worker's TX rings.
func (w *worker) inFlight() uint64 {
	var n uint64
	for _, p := range w.rx {
		if p.tx != nil {
			n += p.tx.inFlight()
		}
	}
	return n
}

// reap returns what the kernel finished transmitting on p: frames to the
// worker's cache, inline slots and frag references to the builder.
func (w *worker) reap(p *port) {
	for {
		n := p.tx.reap(w.reaped)
		if w.flows != nil {
			w.flows.completedAddrs(w.reaped[:n], w.q)
		}
		for _, a := range w.reaped[:n] {
			if !w.freeTX(a) {
				p.stats.badCompletions.Add(1) // not a UMEM address: never followed
			}
		}
		if n < len(w.reaped) {
			return
		}
	}
}

// refill tops up p's fill ring, a batch at a time.
func (w *worker) refill(p *port) { p.rx.Refill(w.batch) }

// drain forwards what is already in the RX rings, sends everything held
// for ordering, and waits, up to drainTimeout, for the kernel to complete
// every TX descriptor.
func (w *worker) drain() {
	w.draining = true
	deadline := time.Now().Add(drainTimeout)
	for {
		n := 0
		for _, p := range w.rx {
			n += w.forward(p)
		}
		held := 0
		if w.order != nil {
			var m int
			m, held = w.merge()
			n += m
		}
		w.reapAll()
		if n == 0 && held == 0 && w.inFlight() == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range w.rx {
			if p.tx != nil && p.tx.inFlight() > 0 {
				p.tx.kick()
			}
		}
		time.Sleep(time.Millisecond)
	}
}
