package fwd

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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
// handoff ring to q's owner (its own included), one ring per (RX link,
// worker), each in arrival order; the owner merges the rings by stamp and
// sends a packet only once no worker can still produce an older one. Each
// worker publishes, per RX link, a watermark: a lower bound on the stamps
// it has not yet handed off (the stamp of the next unread packet in its RX
// ring, or "now" when the ring is empty). A packet waits, in its ring, for
// at most the time the slowest worker takes to read up to it.
//
// --xps cpu keeps every packet on the worker that read it, as the seed's
// kernel did, and does none of this: it is the baseline.

// watermarkSlack covers the time between the XDP program stamping a packet
// and the packet becoming visible in the RX ring.
const watermarkSlack = 50 * time.Microsecond

type ordering struct {
	self    int
	workers []*worker
	modeOf  func() xps.Mode
	out     [2][]*handoff // out[o][q]: to worker q, bound for link o
	in      [2][]*handoff // in[o][q]: from worker q, bound for link o
	wm      [2]atomic.Int64
	idle    atomic.Bool
}

// merging reports whether packets go through the handoff rings and the
// merge; off with one queue and in cpu mode.
func (ord *ordering) merging() bool {
	return ord != nil && ord.modeOf() != xps.ModeCPU
}

// push queues descs (one packet) for the owner of TX queue tq on link o.
func (ord *ordering) push(o, tq int, descs []xsk.Desc, stamp int64) bool {
	h := ord.out[o][tq]
	if h.room() < uint32(len(descs)) {
		return false
	}
	for _, d := range descs {
		h.put(handoffEntry{desc: d, stamp: stamp})
	}
	return true
}

// publish makes what was pushed for link o visible to the owners.
func (ord *ordering) publish(o int) {
	for _, h := range ord.out[o] {
		h.publish()
	}
}

// setupOrdering builds the handoff rings between every pair of workers
// (and from each worker to itself).
func setupOrdering(f *Forwarder, ringSize int) {
	n := len(f.workers)
	for q, w := range f.workers {
		w.order = &ordering{self: q, workers: f.workers, modeOf: f.flows.table.Mode}
		for o := range 2 {
			w.order.out[o] = make([]*handoff, n)
			w.order.in[o] = make([]*handoff, n)
		}
	}
	for q, w := range f.workers {
		for o := range 2 {
			for tq := range n {
				h := newHandoff(ringSize)
				w.order.out[o][tq] = h
				f.workers[tq].order.in[o][q] = h
			}
		}
	}
}

// clock: bpf_ktime_get_ns is CLOCK_MONOTONIC, which is also what Go's
// monotonic clock reads (through the vDSO); one reading at start ties the
// two together so the hot path need not make a syscall.
var (
	clockBase   = time.Now()
	clockBaseNS = func() int64 {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return ts.Nano()
	}()
)

func monoNow() int64 { return clockBaseNS + int64(time.Since(clockBase)) }

// stampOf reads the arrival stamp in front of the packet at addr; 0 when
// there is none that makes sense.
func (w *worker) stampOf(addr uint64) int64 {
	if addr < xsk.MetaStampOff || addr-xsk.MetaStampOff < w.zone.UnitAddr(addr) {
		return 0
	}
	ts := int64(binary.NativeEndian.Uint64(w.mem[addr-xsk.MetaStampOff:]))
	if ts <= 0 || ts > w.now+int64(time.Second) {
		return 0
	}
	return ts
}

// publishWatermark publishes, for RX link i, a lower bound on the stamps
// of the packets this worker has not yet handed off.
func (w *worker) publishWatermark(i int) {
	wm := w.now - int64(watermarkSlack)
	if d, ok := w.ports[i].sock.RX.Next(); ok {
		if ts := w.stampOf(xsk.Flat(d.Addr)); ts != 0 {
			wm = min(wm, ts)
		}
	}
	w.order.wm[i].Store(wm)
}

// watermark is worker x's bound for RX link i, as seen from another
// worker: an idle worker with an empty ring holds nothing older than now.
func (x *worker) watermark(i int, now int64) int64 {
	wm := x.order.wm[i].Load()
	if x.order.idle.Load() && x.ports[i].sock.RX.Empty() {
		wm = max(wm, now-int64(watermarkSlack))
	}
	return wm
}

// merge sends, for both links, the handed-over packets whose turn has come,
// oldest first. It returns how many it sent and how many descriptors it
// holds back for later.
func (w *worker) merge() (sent, held int) {
	w.now = monoNow()
	// Every round, whether or not anything arrived: a worker waiting on
	// another's watermark must see it advance even when that worker's
	// rings are empty and it is itself busy waiting.
	w.publishWatermark(0)
	w.publishWatermark(1)
	for o := range w.ports {
		s, h := w.mergeLink(o)
		sent += s
		held += h
	}
	return sent, held
}

func (w *worker) mergeLink(o int) (sent, held int) {
	ord := w.order
	i := 1 - o
	bound := int64(math.MaxInt64)
	if ord.merging() && !w.draining {
		for _, x := range ord.workers {
			if x == w {
				bound = min(bound, ord.wm[i].Load())
			} else {
				bound = min(bound, x.watermark(i, w.now))
			}
		}
	}
	out := &w.ports[o]
	var pk, by, ds uint64
	for {
		best, bestTS := -1, int64(math.MaxInt64)
		for q, h := range ord.in[o] {
			if n, idx := h.peek(1); n > 0 {
				if ts := h.at(idx).stamp; ts < bestTS {
					best, bestTS = q, ts
				}
			}
		}
		if best < 0 || bestTS > bound {
			break
		}
		h := ord.in[o][best]
		n, idx := h.peek(linearize.MaxDescs)
		k := uint32(1)
		for k <= n && h.at(idx+k-1).desc.Options&xsk.PktContd != 0 {
			k++
		}
		if k > n || out.tx.Free(k) < k {
			break // TX full (or a packet not yet whole): next round
		}
		_, t := out.tx.Reserve(k)
		for j := range k {
			e := h.at(idx + j)
			out.tx.Set(t+j, e.desc.Addr, e.desc.Len, e.desc.Options)
			by += uint64(e.desc.Len)
		}
		h.release(k)
		pk++
		ds += uint64(k)
	}
	if pk > 0 {
		out.tx.Submit()
		out.stats.txPackets.Add(pk)
		out.stats.txBytes.Add(by)
		out.stats.txDescs.Add(ds)
	}
	for _, h := range ord.in[o] {
		n, _ := h.peek(^uint32(0))
		held += int(n)
	}
	return int(pk), held
}

// dropHandoffs releases what is left in the rings handed to this worker;
// for Close, once every worker has stopped.
func (w *worker) dropHandoffs() {
	if w.order == nil {
		return
	}
	for o := range w.order.in {
		for _, h := range w.order.in[o] {
			n, idx := h.peek(^uint32(0))
			for j := range n {
				e := h.at(idx + j)
				w.flows.done(e.desc.Addr, w.q)
				w.freeTX(e.desc.Addr)
			}
			h.release(n)
		}
	}
}
