package fwd

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/capture"
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

// watermarkSlack covers the time between the XDP program stamping a packet
// and the packet becoming visible in the RX ring: the rest of the driver's
// NAPI batch, since redirects are flushed at its end. It bounds an empty
// ring's watermark when the program's newest stamp for the queue says a
// packet is in flight, or cannot say (generic mode).
const watermarkSlack = 50 * time.Microsecond

// exactSlack bounds an empty ring's watermark when its owner has taken the
// packet carrying the program's newest stamp for the queue (caughtUp):
// only a packet between the program's clock read and its store of the
// stamp, a few instructions (and an interrupt taken there), is unseen.
const exactSlack = 10 * time.Microsecond

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
	// test's fake. Read through worker.clock, once per batch (either
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

// publish makes what was pushed from p visible to the owners, and wakes an
// owner that sleeps.
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
				h.to.wake()
			}
		}
	}
}

// publishHandoffs ends an RX batch of in: the handoffs first, then what
// they bound (the newest stamp taken, the ring's watermark), then the
// wake-ups, so that an owner woken for a packet finds the watermark that
// lets it go.
func (w *worker) publishHandoffs(in *port) {
	if w.order == nil {
		return
	}
	w.order.publishTails(in)
	if w.lastStamp != 0 {
		in.seen.Store(w.lastStamp)
	}
	in.wm.Store(w.watermarkOf(in, w.now))
	w.order.wakeOwners(in)
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

// setupOrdering builds one handoff ring from every RX port to every worker
// (itself included) for every link the port's packets may leave by: each
// ring then carries packets in the order one RX ring delivered them, which
// is what the merge relies on. Without a Handler a port's packets leave by
// the other link only; with one, by any.
func setupOrdering(f *Forwarder, ringSize int) {
	n := len(f.links)
	clock := f.clock // the environment's (New), else the stamps'
	if clock == nil {
		clock = monoNow
	}
	for _, w := range f.workers {
		w.order = &ordering{modeOf: f.flows.table.Mode, clock: clock, in: make([][]*handoff, n), src: make([][]*port, n)}
	}
	for i := range f.ports {
		for _, p := range f.ports[i] {
			p.out = make([][]*handoff, n)
			for o := range n {
				if f.handler == nil && o == i {
					continue
				}
				f.connect(p, o, f.handoffsTo(ringSize))
			}
		}
	}
}

// handoffsTo makes a handoff ring of size entries to each worker, by TX
// queue.
func (f *Forwarder) handoffsTo(size int) []*handoff {
	hs := make([]*handoff, len(f.workers))
	for tq, w := range f.workers {
		hs[tq] = newHandoff(size, w.wake)
		f.handoffBytes += size * int(unsafe.Sizeof(handoffEntry{}))
	}
	return hs
}

// connect makes hs, one ring to each worker, carry p's packets bound for
// link o: the producer's side on p, the consumers' in each worker's
// ordering, and p among the ports whose watermarks bound the merge of o.
func (f *Forwarder) connect(p *port, o int, hs []*handoff) {
	for len(p.out) <= o {
		p.out = append(p.out, nil)
	}
	p.out[o] = hs
	for tq, w := range f.workers {
		ord := w.order
		for len(ord.in) <= o {
			ord.in = append(ord.in, nil)
			ord.src = append(ord.src, nil)
		}
		hs[tq].from = p
		ord.in[o] = append(ord.in[o], hs[tq])
		ord.src[o] = append(ord.src[o], p)
	}
}

// addedLink is the handoff rings AddLink makes for link i, before it
// parks the workers: from each of the link's ports to every link
// (itself included), and from every other port to it.
type addedLink struct {
	ports  []*port
	outs   [][]int        // outs[j]: the links ports[j]'s rings go to
	from   [][][]*handoff // from[j][k]: ports[j]'s rings to outs[j][k]
	others []*port        // every other link's ports
	to     [][]*handoff   // to[j]: others[j]'s rings to link i
}

// linksBut is every link the forwarder has but i (a removed link's hole
// is not one).
func (f *Forwarder) linksBut(i int) []int {
	var live []int
	for o := range f.links {
		if o != i && f.links[o].name != "" && f.ports[o] != nil {
			live = append(live, o)
		}
	}
	return live
}

// newHandoffs makes the rings of link i's ports (nil with one worker).
func (f *Forwarder) newHandoffs(i int, ports []*port) *addedLink {
	if f.workers[0].order == nil {
		return nil
	}
	size := f.cfg.AddedHandoffSize
	live := f.linksBut(i)
	a := &addedLink{ports: ports}
	for range ports {
		outs := append(slices.Clone(live), i)
		var from [][]*handoff
		for range outs {
			from = append(from, f.handoffsTo(size))
		}
		a.outs, a.from = append(a.outs, outs), append(a.from, from)
	}
	for _, o := range live {
		for _, p := range f.ports[o] {
			a.others = append(a.others, p)
			a.to = append(a.to, f.handoffsTo(size))
		}
	}
	return a
}

// handoffRoom refuses a link of ports RX queues whose handoff rings would
// take the forwarder's beyond handoffBudget.
func (f *Forwarder) handoffRoom(i, ports int) error {
	if f.workers[0].order == nil {
		return nil
	}
	others := 0
	live := f.linksBut(i)
	for _, o := range live {
		others += len(f.ports[o])
	}
	rings := (ports*(len(live)+1) + others) * len(f.workers)
	need := rings * f.cfg.AddedHandoffSize * int(unsafe.Sizeof(handoffEntry{}))
	if f.handoffBytes+need > handoffBudget {
		return inputErr("%d more handoff rings of %d entries would take the ordering's to %d MiB, beyond the %d MiB bound; use fewer workers (--queues) or fewer RX queues (ethtool -L)",
			rings, f.cfg.AddedHandoffSize, (f.handoffBytes+need)>>20, handoffBudget>>20)
	}
	return nil
}

// orderLink wires a's rings in: link i's ports hand off to every link,
// every other port to link i. The workers are parked.
func (f *Forwarder) orderLink(i int, a *addedLink) {
	if a == nil {
		return
	}
	for j, p := range a.ports {
		for k, o := range a.outs[j] {
			f.connect(p, o, a.from[j][k])
		}
	}
	for j, p := range a.others {
		f.connect(p, i, a.to[j])
	}
}

// unorderLink takes link i out of the ordering, once no worker sends to
// it and its RX rings are forwarded: what its ports handed off, and what
// was handed off towards it, is sent now, oldest first (i is going, so
// nothing newer of its flows can come), and what finds no room is
// dropped, counted; then the rings go. The workers are parked.
func (f *Forwarder) unorderLink(i int) {
	if f.workers[0].order == nil {
		return
	}
	for _, w := range f.workers {
		ord := w.order
		for o := range ord.in {
			var mine, rest []*handoff
			for _, h := range ord.in[o] {
				if o == i || h.from.link == i {
					mine = append(mine, h)
					f.handoffBytes -= len(h.ents) * int(unsafe.Sizeof(handoffEntry{}))
				} else {
					rest = append(rest, h)
				}
			}
			if len(mine) == 0 {
				continue
			}
			w.flushRings(o, mine)
			ord.in[o] = rest
			ord.src[o] = removeLinkOf(ord.src[o], i, func(p *port) int { return p.link })
			if o == i {
				ord.src[o] = nil
			}
		}
	}
	for _, ports := range f.ports {
		for _, p := range ports {
			if p.link != i && i < len(p.out) {
				p.out[i] = nil
			}
		}
	}
}

// flushRings sends what rings hold for link o, oldest first and without
// waiting on any watermark, for a few rounds of the lane's completions;
// what is left is dropped (dropped_at_stop).
func (w *worker) flushRings(o int, rings []*handoff) {
	out := w.tx[o]
	for range maxBatches {
		if _, held := w.mergeRings(o, rings, nil); held == 0 || out == nil {
			break
		}
		out.kick()
		w.reap(out)
	}
	w.dropRings(o, rings)
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

// stampOf reads the arrival stamp in front of the packet at addr, a frame
// zone address; 0 when there is none that makes sense.
func (w *worker) stampOf(addr uint64) int64 {
	if addr < xsk.MetaStampOff || addr-xsk.MetaStampOff < w.frameStart(addr) {
		return 0
	}
	ts := int64(binary.NativeEndian.Uint64(w.mem[addr-xsk.MetaStampOff:]))
	if ts <= 0 || ts > w.now+int64(time.Second) {
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
	if addr < xsk.MetaStampOff || addr-xsk.MetaStampOff < w.frameStart(addr) {
		return 0
	}
	return max(int64(binary.NativeEndian.Uint64(w.mem[addr-xsk.MetaStampOff:])), 0)
}

// takeStamp reads the stamp of a received packet and clears it: when the
// program could not write one (no room for metadata), the bytes in front
// of the next packet in this frame must not pass for its stamp.
func (w *worker) takeStamp(addr uint64) int64 {
	ts := w.stampOf(addr)
	if ts != 0 {
		binary.NativeEndian.PutUint64(w.mem[addr-xsk.MetaStampOff:], 0)
		w.lastStamp = ts
	}
	return ts
}

// publishWatermarks publishes, for each of the worker's RX rings, a lower
// bound on the stamps of the packets it has not yet handed off.
func (w *worker) publishWatermarks() {
	for _, p := range w.rx {
		p.wm.Store(w.watermarkOf(p, w.now))
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
// and its ring is FIFO), and nothing older than exactSlack is in flight.
// Any worker may ask: seen is published after the handoffs.
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
	w.now = w.clock()
	// Every round, whether or not anything arrived: a worker waiting on
	// another's watermark must see it advance even when that worker's
	// rings are empty and it is itself busy waiting.
	w.publishWatermarks()
	w.holdDue = math.MaxInt64
	for o := range w.tx {
		s, h := w.mergeLink(o)
		sent += s
		held += h
	}
	return sent, held
}

func (w *worker) mergeLink(o int) (sent, held int) {
	return w.mergeRings(o, w.order.in[o], w.order.src[o])
}

// mergeRings sends, towards link o, what rings hold whose turn has come
// by the watermarks of the ports src; with src nil, everything there is.
func (w *worker) mergeRings(o int, rings []*handoff, src []*port) (sent, held int) {
	ord := w.order
	// bound: what may be sent in order; strict also counts blocked ports,
	// so a packet sent past it is counted.
	bound, strict := int64(math.MaxInt64), int64(math.MaxInt64)
	// turn: how long after its stamp a packet may go if the rings stay
	// quiet.
	turn := int64(exactSlack)
	if ord.merging() && !w.draining {
		for _, p := range src {
			if p.stamps == nil {
				turn = int64(watermarkSlack)
			}
			wm, blocked := p.watermark(w, w.now)
			strict = min(strict, wm)
			if !blocked {
				bound = min(bound, wm)
			}
		}
	}
	late := w.now - int64(maxHold)
	for _, h := range rings {
		h.sync()
	}
	out := w.tx[o]
	var c batchCounts
	var timeouts uint64
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
			w.holdDue = min(w.holdDue, bestTS+turn, oldest+int64(maxHold))
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
			if w.handler == nil || !out.down() {
				break // TX full: next round
			}
			// A Handler's link that is down: drop (tx_full) rather
			// than let its handoff rings fill and stop every link.
			w.abandon(lost{why: dropTXFull, at: atHandoff, h: h, idx: idx, k: k, link: o, queue: w.q}, &c)
			continue
		}
		if bestTS > strict {
			timeouts++ // counted when sent: a packet behind a full TX ring waits several rounds
		}
		var ds [linearize.MaxDescs]xsk.Desc
		for j := range k {
			ds[j] = h.at(idx + j).desc
			c.n[cTXBytes] += uint64(ds[j].Len)
		}
		out.put(ds[:k]) // free said there is room
		if w.tap.set != nil {
			w.tapHanded(o, capture.TX, 0, h, idx, k)
		}
		h.release(k)
		c.n[cTXPackets]++
		c.n[cTXDescs] += uint64(k)
	}
	if c.n[cTXPackets] > 0 {
		out.publish() // kicked by run: kickOrDefer
	}
	c.n[cOrderTimeouts] = timeouts
	if c.n[cTXPackets]|c.n[cDrops+count(dropTXFull)]|timeouts != 0 {
		publish(out.stats, &c)
	}
	for _, h := range rings {
		n, _ := h.peek(^uint32(0))
		held += int(n)
	}
	return int(c.n[cTXPackets]), held
}

// dropHandoffs releases what is left in the rings handed to this worker,
// counted as dropped at stop on its TX lane; for Close, once every worker
// has stopped and the forwarder has sent what it could (finish).
func (w *worker) dropHandoffs() {
	if w.order == nil {
		return
	}
	if w.tap.point != nil {
		// The worker is gone: this is its point's only writer now.
		w.tap.set = w.tap.point.Begin()
		defer w.tapEnd()
	}
	for o := range w.order.in {
		w.dropRings(o, w.order.in[o])
	}
}

// dropRings releases what rings hold for link o, counted as dropped at
// stop on the worker's TX lane of o.
func (w *worker) dropRings(o int, rings []*handoff) {
	var c batchCounts
	for _, h := range rings {
		// peek re-reads the tail only when what it saw is used up:
		// entries published after the last look must go too.
		h.sync()
		n, idx := h.peek(^uint32(0))
		first := uint32(0) // of the packet the entries belong to
		for j := range n {
			if j+1 == n || h.at(idx+j).desc.Options&xsk.PktContd == 0 {
				// A packet's last entry (or the last there is:
				// packets are published whole).
				w.abandon(lost{why: dropAtStop, at: atHandoff, h: h, idx: idx + first, k: j - first + 1, link: o, queue: w.q}, &c)
				first = j + 1
			}
		}
	}
	if o < len(w.tx) && w.tx[o] != nil {
		publish(w.tx[o].stats, &c)
	}
}

// The handoff rings number one per (RX socket, output link, worker):
// links² × RX queues × workers with a Handler. Their entries take at most
// handoffBudget bytes in all; rings shrink towards handoffMinRing entries
// to stay within it, and a shape that needs more even then is refused.
const (
	handoffBudget = 64 << 20
	// handoffMinRing holds a packet of linearize.MaxDescs descriptors
	// with room to spare: a smaller ring could never take one.
	handoffMinRing = 32
)

// handoffRingSize is the entries of each handoff ring (0: none, one
// worker), or an InputError for a shape whose rings exceed handoffBudget.
func handoffRingSize(c *Plan, links []linkInfo) (int, error) {
	if c.Queues <= 1 {
		return 0, nil
	}
	n := len(links)
	size := int(c.RingSize) * 2
	if n > 2 {
		// Rings multiply by the links; a handoff ring's size must stay a
		// power of two (it indexes by mask).
		size = max(256, 1<<(bits.Len(uint(size/n))-1))
	}
	outs, sockets := n-1, 0 // output links per RX socket (setupOrdering)
	if c.Handler != nil {
		outs = n
	}
	for _, l := range links {
		sockets += l.rxQueues
	}
	rings := sockets * outs * c.Queues
	entry := int(unsafe.Sizeof(handoffEntry{}))
	for size > handoffMinRing && rings*size*entry > handoffBudget {
		size /= 2
	}
	if need := rings * size * entry; need > handoffBudget {
		return 0, inputErr("%d links of %d RX sockets in all, %d workers: %d handoff rings of %d entries need %d MiB, beyond the %d MiB bound; use fewer workers (--queues) or fewer RX queues (ethtool -L)",
			n, sockets, c.Queues, rings, size, need>>20, handoffBudget>>20)
	}
	return size, nil
}

// addedHandoffSize is Plan.AddedHandoffSize: the ring size of the shape
// with every link MaxLinks allows, the links to come of one RX queue per
// worker; the smallest ring when even that shape exceeds the bound
// (AddLink then refuses a link the bound cannot take).
func addedHandoffSize(p *Plan, links []linkInfo) int {
	spare := p.MaxLinks - len(links)
	if p.HandoffSize == 0 || spare <= 0 {
		return p.HandoffSize
	}
	all := slices.Clone(links)
	for range spare {
		all = append(all, linkInfo{rxQueues: p.Queues, txQueues: p.Queues})
	}
	size, err := handoffRingSize(p, all)
	if err != nil {
		return handoffMinRing
	}
	return min(size, p.HandoffSize)
}
