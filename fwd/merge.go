package fwd

import (
	"math"
	"time"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Ordering across RX queues.
//
// Binding a flow to one TX queue keeps it on one queue, but with several
// RX queues its packets can reach xdpfwd through two workers, which read
// their rings independently: a packet read late by one worker would leave
// after a newer one read early by the other. The XDP program stamps every
// packet with its arrival time (bpf_ktime_get_ns, in metadata in front of
// the packet), so the worker owning a TX queue can put back the arrival
// order: every worker passes the packets bound for TX queue q through a
// handoff ring to q's owner (its own included), one ring per (RX ring,
// owner), each in arrival order; the owner merges the rings by stamp and
// sends a packet only once no RX ring can still produce an older one. Each
// worker publishes, per RX ring it reads, a watermark: a lower bound on the
// stamps it has not yet handed off (the stamp of the next unread packet in
// the ring, or "now" when the ring is empty). A packet waits, in its ring,
// for the time the slowest worker takes to read up to it, and at most
// maxHold.
//
// --xps cpu keeps every packet on the worker that read it, as the seed's
// kernel did, and does none of this: it is the baseline.
//
// The parts: this file is a worker's side (push what it hands off,
// merge what it was handed); stamps.go the stamps and watermarks the
// merge orders by; handoff.go the ring and the waker; standin.go a
// producer merging in a sleeping owner's place; handoffs.go their
// wiring (New, AddLink, RemoveLink, Close) and sizing.
//
// # Memory ordering
//
// Every rule the ordering relies on, in one place (sync/atomic is
// sequentially consistent, at least the release/acquire each needs):
//
//   - a handoff ring: the producer writes entries, then stores tail; the
//     consumer loads tail, reads entries, then stores head (handoff.go).
//     A packet's entries are published together.
//   - a port's seen: stored by its owner once per batch after the
//     batch's handoffs are published (publishHandoffs), so a merging
//     worker that loads seen equal to the program's newest stamp knows
//     every older packet is in a ring (caughtUp);
//   - a port's wm: stored by its owner every round, after its handoffs
//     (publishWatermarks); blockedAt, stored when a handoff ring out of
//     it was found too full to read it (room, pipeline.go);
//   - sleeping: the sleeper stores sleeping (and idle) before its last
//     look at the rings; a producer publishes, then loads sleeping (wake).
//     One of the two sees the other, so no handoff waits out a poll
//     timeout (worker.sleep);
//   - idle: stored only by its owner around ppoll, so while it holds the
//     owner has no packet in its hands and its watermark is "now";
//   - lease: the owner frees it before ppoll and takes it back after; a
//     producer that finds its owner asleep may take it and run the
//     owner's merge in its place, then frees it (standin.go), so each TX
//     ring and everything the merge writes keep one writer at a time.

// watermarkSlack covers the time between the XDP program stamping a packet
// and the packet becoming visible in the RX ring: the rest of the driver's
// NAPI batch, since redirects are flushed at its end. It bounds an empty
// ring's watermark when the program's newest stamp for the queue says a
// packet is in flight, or cannot say (generic mode).
const watermarkSlack = 50 * time.Microsecond

// exactSlack bounds an empty ring's watermark when its owner has taken the
// packet carrying the program's newest stamp for the queue (caughtUp):
// the program marks the queue busy before its clock read
// (xsk.StampBusy), so a packet stamped before the reader's clock and not
// yet seen is one whose mark was still draining from the stamping CPU's
// store buffer when the reader looked. Every round trip through a
// forwarder with several queues waits this long once per direction, so
// it is the smallest bound that holds, not a comfortable one.
const exactSlack = 1 * time.Microsecond

// Two bounds keep a held packet from waiting forever, each counted
// (order_hold_timeouts) when it sends a packet before its turn:
//
//   - blockedHold: an RX ring that cannot be read because a handoff ring
//     out of it is full (its owner's TX queue stalled, or the owner
//     overloaded) stops counting for the merge after this long, so one
//     stalled TX queue does not freeze every queue of the link;
//   - maxHold: no packet waits in a handoff ring longer, whatever holds it
//     back. It is generous because a worker descheduled on a loaded
//     machine comes back by itself, and sending early would reorder.
const (
	blockedHold = 2 * time.Millisecond
	maxHold     = 50 * time.Millisecond
)

// ordering is one worker's side of the handoffs: the rings handed to it,
// and every RX ring whose watermark bounds what it may send.
type ordering struct {
	modeOf func() xps.Mode
	// clock reads the monotonic clock (ns) of the stamps: monoNow, or a
	// test's fake. Read through flowOrder.clock, once per batch (either
	// path) and once per merge round.
	clock func() int64
	in    [][]*handoff // in[o]: from every RX port that may send to link o
	src   [][]*port    // src[o]: the RX ports that may send to link o
}

// merging reports whether packets go through the handoff rings and the
// merge; off with one queue and in cpu mode.
func (ord *ordering) merging() bool {
	return ord != nil && ord.modeOf() != xps.ModeCPU
}

// outOf lists the handoff rings out of RX port p towards link o, by TX
// queue.
func (ord *ordering) outOf(p *port, o int) []*handoff { return p.out[o] }

// push queues descs (one packet received on p) for the owner of TX queue
// tq of link o.
func (ord *ordering) push(p *port, tq, o int, descs []xsk.Desc, stamp, now int64) bool {
	h := p.out[o][tq]
	if h.room() < uint32(len(descs)) {
		return false
	}
	for _, d := range descs {
		h.put(handoffEntry{desc: d, stamp: stamp, queued: now})
	}
	return true
}

// publish makes what was pushed from p visible to the owners, and sees
// that an owner that sleeps sends it (handoff.deliver).
func (ord *ordering) publish(p *port) {
	ord.publishTails(p)
	ord.wakeOwners(p)
}

func (ord *ordering) publishTails(p *port) {
	for _, hs := range p.out {
		for _, h := range hs {
			h.announce = h.publish() || h.announce
		}
	}
}

func (ord *ordering) wakeOwners(p *port) {
	for _, hs := range p.out {
		for _, h := range hs {
			if h.announce {
				h.announce = false
				h.deliver()
			}
		}
	}
}

// publishHandoffs ends an RX batch of in: the handoffs first, then what
// they bound (the newest stamp taken, the ring's watermark), then the
// wake-ups, so that an owner woken for a packet finds the watermark that
// lets it go.
func (w *worker) publishHandoffs(in *port) {
	if w.flows.order == nil {
		return
	}
	w.flows.order.publishTails(in)
	if w.flows.lastStamp != 0 {
		in.seen.Store(w.flows.lastStamp)
	}
	in.wm.Store(w.watermarkOf(in, w.flows.now))
	w.flows.order.wakeOwners(in)
}

// pending reports whether a handoff ring holds entries this worker has not
// looked at yet; for the check before sleeping.
func (ord *ordering) pending() bool {
	for o := range ord.in {
		for _, h := range ord.in[o] {
			if h.fresh() {
				return true
			}
		}
	}
	return false
}

// merge sends, for every link, the handed-over packets whose turn has come,
// oldest first. It returns how many it sent and how many descriptors it
// holds back for later.
func (w *worker) merge() (sent, held int) {
	if w.tap.point != nil {
		// A batch of its own: a handed-off packet is recorded when it
		// is sent or dropped here (capture.go).
		w.tap.set = w.tap.point.Begin()
		defer w.tapEnd()
	}
	w.flows.now = w.flows.clock()
	// Every round, whether or not anything arrived: a worker waiting on
	// another's watermark must see it advance even when that worker's
	// rings are empty and it is itself busy waiting.
	w.publishWatermarks()
	w.flows.holdDue = math.MaxInt64
	for o := range w.lanes.tx {
		s, h := w.mergeLink(o)
		sent += s
		held += h
	}
	return sent, held
}

func (w *worker) mergeLink(o int) (sent, held int) {
	return w.mergeRings(o, w.flows.order.in[o], w.flows.order.src[o])
}

// mergeRings sends, towards link o, what rings hold whose turn has come
// by the watermarks of the ports src; with src nil, everything there is.
func (w *worker) mergeRings(o int, rings []*handoff, src []*port) (sent, held int) {
	ord := w.flows.order
	// bound: what may be sent in order; strict also counts blocked ports,
	// so a packet sent past it is counted.
	bound, strict := int64(math.MaxInt64), int64(math.MaxInt64)
	// turn: how long after its stamp a packet may go if the rings stay
	// quiet.
	turn := int64(exactSlack)
	if ord.merging() && !w.flows.draining {
		for _, p := range src {
			if p.stamps == nil {
				turn = int64(watermarkSlack)
			}
			wm, blocked := p.watermark(w, w.flows.now)
			strict = min(strict, wm)
			if !blocked {
				bound = min(bound, wm)
			}
		}
	}
	late := w.flows.now - int64(maxHold)
	for _, h := range rings {
		h.sync()
	}
	out := w.lanes.tx[o]
	for {
		best, bestTS, oldest := -1, int64(math.MaxInt64), int64(math.MaxInt64)
		for q, h := range rings {
			if n, idx := h.peek(1); n > 0 {
				e := h.at(idx)
				if e.stamp < bestTS {
					best, bestTS = q, e.stamp
				}
				oldest = min(oldest, e.queued)
			}
		}
		if best < 0 {
			break
		}
		if bestTS > bound && oldest > late {
			// An idle RX ring's watermark trails the clock by the slack:
			// this packet's turn comes then at the latest, unless a
			// ring has older packets.
			w.flows.holdDue = min(w.flows.holdDue, bestTS+turn, oldest+int64(maxHold))
			break
		}
		h := rings[best]
		n, idx := h.peek(linearize.MaxDescs)
		k := uint32(1)
		for k <= n && h.at(idx+k-1).desc.Options&xsk.PktContd != 0 {
			k++
		}
		if k > n {
			break // a packet not yet whole: next round
		}
		if out.free(k) < k {
			if w.verdicts.handler == nil || !out.down() {
				break // TX full: next round
			}
			// A Handler's link that is down: drop (tx_full) rather
			// than let its handoff rings fill and stop every link.
			w.lanes.touch(out)
			w.abandon(lost{why: dropTXFull, at: atHandoff, h: h, idx: idx, k: k, link: o, queue: w.q}, &out.bc)
			continue
		}
		if bestTS > strict {
			// Counted when sent: a packet behind a full TX ring waits
			// several rounds.
			out.bc.n[cOrderTimeouts]++
		}
		var ds [linearize.MaxDescs]xsk.Desc
		total := 0
		for j := range k {
			ds[j] = h.at(idx + j).desc
			total += int(ds[j].Len)
		}
		h.release(k)
		w.put(out, ds[:k], total) // free said there is room
		sent++
	}
	// The lane's counts, and what was put submitted: kicked as the round
	// ends (txLanes.endRound).
	w.lanes.publishTouched()
	for _, h := range rings {
		n, _ := h.peek(^uint32(0))
		held += int(n)
	}
	return sent, held
}
