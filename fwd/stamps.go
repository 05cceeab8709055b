package fwd

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// Arrival stamps and watermarks, what the merge (merge.go) orders by: the
// clock the XDP program stamps with, reading and clearing a packet's
// stamp, and each RX port's watermark, the bound below which it can
// produce no more packets.

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

// stampOf reads the arrival stamp in front of the packet at addr, a frame
// zone address; 0 when there is none that makes sense.
func (w *worker) stampOf(addr uint64) int64 {
	if addr < xsk.MetaStampOff || addr-xsk.MetaStampOff < w.rx.frameStart(addr) {
		return 0
	}
	ts := int64(binary.NativeEndian.Uint64(w.rx.mem[addr-xsk.MetaStampOff:]))
	if ts <= 0 || ts > w.flows.now+int64(time.Second) {
		return 0
	}
	return ts
}

// arrivalOf is the arrival stamp in front of the packet at addr, for a
// Handler (Packet.Arrival): stampOf's load without its check against the
// batch's clock, which only a batch with several queues reads (the
// program writes a stamp for every packet it redirects, so the bytes are
// this packet's unless the frame had no room for metadata).
func (w *worker) arrivalOf(addr uint64) int64 {
	if addr < xsk.MetaStampOff || addr-xsk.MetaStampOff < w.rx.frameStart(addr) {
		return 0
	}
	return max(int64(binary.NativeEndian.Uint64(w.rx.mem[addr-xsk.MetaStampOff:])), 0)
}

// takeStamp reads the stamp of a received packet and clears it: when the
// program could not write one (no room for metadata), the bytes in front
// of the next packet in this frame must not pass for its stamp.
func (w *worker) takeStamp(addr uint64) int64 {
	ts := w.stampOf(addr)
	if ts != 0 {
		binary.NativeEndian.PutUint64(w.rx.mem[addr-xsk.MetaStampOff:], 0)
		w.flows.lastStamp = ts
	}
	return ts
}

// publishWatermarks publishes, for each of the worker's RX rings, a lower
// bound on the stamps of the packets it has not yet handed off.
func (w *worker) publishWatermarks() {
	for _, p := range w.rx.ports {
		p.wm.Store(w.watermarkOf(p, w.flows.now))
	}
}

// watermarkOf is the owner's bound for its RX port p at now: the stamp of
// the next packet in the ring, else now less the slack of what may still
// be in flight.
func (w *worker) watermarkOf(p *port, now int64) int64 {
	// Head refuses an address outside the zone, as Next does.
	d, ok := p.rx.Head()
	if !ok {
		if p.caughtUp() {
			return now - int64(exactSlack)
		}
		return now - int64(watermarkSlack)
	}
	v := now - int64(watermarkSlack)
	if ts := w.stampOf(d.Addr); ts != 0 {
		v = min(v, ts)
	}
	return v
}

// caughtUp reports whether p's owner has taken, and handed off, the
// packet carrying the program's newest stamp for p's queue: then every
// older packet of the queue is handed off too (a queue's stamps only grow,
// and its ring is FIFO), and nothing stamped more than exactSlack before
// the caller's clock is in flight, if the caller read its clock first
// (the program marks the queue busy while it stamps: xsk.StampBusy, which
// no seen equals). Any worker may ask: seen is published after the
// handoffs.
func (p *port) caughtUp() bool {
	return p.stamps != nil && p.seen.Load() == p.stamps.Load(p.queue)
}

// watermark is RX port p's bound as seen from worker w: a port whose owner
// has handed off the queue's newest packet, or sleeps with its ring empty,
// holds nothing older than now, less the slack of what may be in flight.
// blocked reports a port that could not be read for blockedHold: the
// merge goes on without it.
func (p *port) watermark(w *worker, now int64) (wm int64, blocked bool) {
	wm = p.wm.Load()
	switch {
	case p.caughtUp():
		wm = max(wm, now-int64(exactSlack))
	case p.owner != w && p.owner.wake.idle.Load() && p.rx.Empty():
		wm = max(wm, now-int64(watermarkSlack))
	}
	at := p.blockedAt.Load()
	return wm, at != 0 && now-at > int64(blockedHold)
}
