package fwd

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/csum"
	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

const (
	// defaultSpin is how many empty rounds a worker spins before it sleeps
	// in poll(2) (--spin).
	defaultSpin = 64
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
	// fillShort counts fill-ring refills cut short because the frame zone
	// had nothing free: the kernel then drops at rx_fill_ring_empty.
	fillShort atomic.Uint64
	// rxInvalid counts RX descriptors outside the frame zone, or longer
	// than a frame: never followed, dropped.
	rxInvalid atomic.Uint64
	// txNoRoom counts packets dropped because no TX layout had room
	// (frag zone exhausted for a chain longer than the kernel takes).
	txNoRoom atomic.Uint64
	// handoffFull counts packets dropped because the handoff ring to the
	// worker owning their flow's TX queue was full.
	handoffFull atomic.Uint64
	// csumCompleted counts packets received with a partial TCP/UDP
	// checksum (left for offload) that were finished in software.
	csumCompleted atomic.Uint64
	// vlanRestored counts packets received whose offloaded VLAN tag was
	// put back into the frame (vlan.go).
	vlanRestored atomic.Uint64
}

type port struct {
	sock  *xsk.Socket
	tx    *txring.Ring
	stats portStats
	// quietUntil (monotonic ns): after a failed kick (link down), no more
	// kicks until then, and the worker sleeps instead of spinning.
	quietUntil int64
}

// frameCacheSize bounds a worker's private stock of free frames. Frames
// freed by the worker that transmits a flow are refilled into the fill ring
// of the worker that receives it, through the shared pool; a small cache
// sends them there after half its size, where a large one would hoard
// what another worker's fill ring starves for.
const frameCacheSize = 512

// kickBackoff is how long a worker leaves a TX ring alone after a kick
// failed: a down link would otherwise be kicked half a million times a
// second.
const kickBackoff = 5 * time.Millisecond

// kick wakes p's TX ring unless it is backing off after a failure.
func (p *port) kick() {
	if p.quietUntil != 0 {
		if monoNow() < p.quietUntil {
			return
		}
		p.quietUntil = 0
	}
	if p.tx.Kick(true) != nil {
		p.quietUntil = monoNow() + int64(kickBackoff)
	}
}

// batchCounts accumulates one batch's counters in plain memory; they are
// published with one atomic add each at the end of the batch.
type batchCounts struct {
	txPackets, txBytes, txDescs uint64
	paths                       [linearize.NumPaths]uint64
	fallbacks, invalid, noRoom  uint64
	handoffFull, csumCompleted  uint64
	hist                        [linearize.MaxDescs + 1]uint64
}

// worker owns queue q of both links.
type worker struct {
	q      int
	ports  [2]port
	mem    []byte
	zone   *umem.Zone // RX frames
	frames *umem.Cache
	build  *inline.Builder
	meter  umem.PageMeter
	batch  uint32
	reaped []uint64   // completion scratch, batch long
	chain  []xsk.Desc // one packet's RX descriptors
	out    []xsk.Desc // one packet's TX descriptors
	hot    []uint64   // frames to recycle to the fill ring at once
	pfds   [2]unix.PollFd

	// With several queues: the flow table and the ordering state (merge.go).
	flows *flowState
	now   int64
	cpu   int // pinned CPU, or -1
	order *ordering
	// draining: stopping; held packets go out without waiting for order.
	draining bool
	// csum: finish partial TCP/UDP checksums (--complete-checksums).
	csum bool
	// inlineMax is the forwarder's live inline limit.
	inlineMax *atomic.Int32
	// spin is how many empty rounds to spin before sleeping in poll(2).
	spin int
}

func newWorker(f *Forwarder, q int) *worker {
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
		hot:       make([]uint64, 0, f.cfg.Batch),
		cpu:       -1,
		csum:      f.cfg.CompleteChecksums,
		inlineMax: &f.inlineMax,
		spin:      f.cfg.Spin,
	}
	if len(f.cfg.CPUs) > 0 {
		w.cpu = f.cfg.CPUs[q%len(f.cfg.CPUs)]
	}
	for i := range w.ports {
		s := f.socks[i][q]
		w.ports[i] = port{sock: s, tx: txring.New(s)}
		w.pfds[i] = unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN}
	}
	return w
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

	idle := 0
	for !stop.Load() {
		w.refill(0)
		w.refill(1)
		n := w.forwardAll(0, 1) + w.forwardAll(1, 0)
		held := 0
		if w.order != nil {
			var m int
			m, held = w.merge()
			n += m
		}
		w.reap(0)
		w.reap(1)
		w.frames.Publish()
		w.build.Publish()
		if n > 0 || held > 0 {
			// Packets held for ordering wait on another worker's
			// progress: keep looking, do not sleep.
			idle = 0
			if n == 0 {
				runtime.Gosched()
			}
			continue
		}
		if idle++; idle < w.spin {
			continue
		}
		idle = 0
		blocked := false
		for i := range w.ports {
			// A kick the kernel could not finish (copy mode sends a
			// bounded budget per call) is retried rather than waiting
			// for new traffic.
			if w.ports[i].tx.Pending() > 0 {
				w.ports[i].kick()
			}
			blocked = blocked || w.ports[i].quietUntil != 0
		}
		if w.order != nil {
			w.order.idle.Store(true)
		}
		if blocked {
			// A link is down: its TX ring is full and the other RX
			// ring keeps poll(2) from sleeping. Wait for it instead.
			time.Sleep(kickBackoff)
		} else {
			unix.Poll(w.pfds[:], int(pollTimeout/time.Millisecond))
		}
		if w.order != nil {
			w.order.idle.Store(false)
		}
	}
	w.drain()
}

// forwardAll forwards what the RX ring of link i holds, a batch at a time,
// up to maxBatches, before the worker turns to what other workers handed
// it: a flow whose packets arrived on two RX queues then keeps the order
// in which the two workers read them, as long as a burst fits the budget.
func (w *worker) forwardAll(i, o int) int {
	total := 0
	for range maxBatches {
		n := w.forward(i, o)
		total += n
		if n < int(w.batch)/2 {
			break
		}
	}
	return total
}

// maxBatches bounds forwardAll, so one busy link cannot starve the other.
const maxBatches = 8

// forward moves up to one batch of packets from in's RX ring towards link
// o, each by the path linearize picks: small packets are copied into an
// inline slot and their frame goes straight back to the fill ring; larger
// ones leave from the frame they arrived in; multi-buffer packets leave as
// their chain or, when it has too many pieces, repacked into a frag block.
// With several queues, each packet goes to the TX queue its flow is bound
// to: directly when this worker owns it, else through a handoff ring to
// the worker that does. It peeks no more than out's TX ring can take, so a
// full TX ring pushes back into the RX ring (and the kernel's rx_ring_full
// counter) instead of dropping in user space.
func (w *worker) forward(i, o int) int {
	in, out := &w.ports[i], &w.ports[o]
	room := out.tx.Free(w.batch)
	if room < linearize.MaxDescs {
		out.kick()
		if room == 0 {
			return 0
		}
	}
	merging := w.order.merging() // one mode read per batch
	if merging {
		// Every packet goes through a handoff ring: take no more than
		// the fullest can hold, so a slow owner pushes back into the RX
		// ring (counted by the kernel) instead of dropping here.
		for _, h := range w.order.out[o] {
			room = min(room, h.room())
		}
		if room < linearize.MaxDescs {
			return 0
		}
	}
	rx := &in.sock.RX
	n, idx := rx.Peek(min(room, w.batch))
	if n == 0 {
		return 0
	}
	// Leave a multi-buffer packet whose tail is not in this batch.
	for n > 0 && rx.Desc(idx+n-1).Options&xsk.PktContd != 0 {
		n--
		rx.Cancel(1)
	}
	if n == 0 {
		return 0
	}
	w.build.Policy.InlineMax = int(w.inlineMax.Load())
	got, tidx := out.tx.Reserve(n) // every path needs at most as many descriptors as it arrived with
	var c batchCounts
	var rxBytes uint64
	t := tidx
	packets := 0
	if w.flows != nil {
		w.now = monoNow() // one clock read per batch
	}
	for k := uint32(0); k < n; {
		// Collect one packet: descriptors up to one without PktContd.
		w.chain = w.chain[:0]
		for ; k < n; k++ {
			d := rx.Desc(idx + k)
			d.Addr = xsk.Flat(d.Addr)
			w.chain = append(w.chain, d)
			if d.Options&xsk.PktContd == 0 || len(w.chain) == cap(w.chain) {
				k++
				break
			}
		}
		packets++
		total := 0
		valid := true
		for _, d := range w.chain {
			total += int(d.Len)
			// Never follow a descriptor outside the frame zone or past
			// the end of its frame.
			if !w.zone.Contains(d.Addr) || d.Addr+uint64(d.Len) > w.zone.UnitAddr(d.Addr)+uint64(w.zone.UnitSize()) {
				valid = false
			}
		}
		rxBytes += uint64(total)
		if !valid {
			c.invalid++
			w.recycleChain()
			continue
		}
		if w.restoreVLAN(&w.chain[0]) {
			total += vlanTagLen
			in.stats.vlanRestored.Add(1) // tagged packets only; uncontended
		}
		if w.csum && len(w.chain) == 1 {
			d := w.chain[0]
			if csum.Complete(w.mem[d.Addr:d.Addr+uint64(d.Len)]) == csum.Completed {
				c.csumCompleted++
			}
		}
		tq, slot := w.q, xps.NoSlot
		var stamp int64
		if w.flows != nil {
			d := w.chain[0]
			tq, slot = w.flows.pick(w.mem[d.Addr:d.Addr+uint64(d.Len)], w.q, w.now)
			stamp = w.stampOf(d.Addr)
		}
		nd := w.build1(total, &c)
		if nd == 0 {
			continue
		}
		if w.flows != nil {
			w.flows.sent(w.out[:nd], tq, slot)
		}
		if tq == w.q && !merging {
			for j, d := range w.out[:nd] {
				out.tx.Set(t+uint32(j), d.Addr, d.Len, d.Options)
			}
			t += uint32(nd)
			c.txPackets++
			c.txBytes += uint64(total)
			c.txDescs += uint64(nd)
			continue
		}
		if !w.order.push(o, tq, w.out[:nd], stamp) {
			c.handoffFull++
			w.flows.completed(w.out[:nd], tq)
			w.release(w.out[:nd])
		}
	}
	rx.Release(n)
	out.tx.Cancel(got - (t - tidx))
	out.tx.Submit()
	w.recycleHot(in)
	if w.order != nil {
		w.order.publish(o)
	}

	in.stats.rxPackets.Add(uint64(packets))
	in.stats.rxBytes.Add(rxBytes)
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
	if c.invalid != 0 {
		in.stats.rxInvalid.Add(c.invalid)
	}
	if c.csumCompleted != 0 {
		in.stats.csumCompleted.Add(c.csumCompleted)
	}
	if c.noRoom != 0 {
		s.txNoRoom.Add(c.noRoom)
	}
	if c.handoffFull != 0 {
		s.handoffFull.Add(c.handoffFull)
	}
	return packets
}

// build1 lays out the packet in w.chain as TX descriptors in w.out and
// returns how many (0: dropped, counted). Frames that leave as they came
// move to the kernel's TX side; frames whose data was copied are queued to
// go back to the fill ring at once.
func (w *worker) build1(total int, c *batchCounts) int {
	path := w.build.Policy.Decide(total, len(w.chain))
	nd := 0
	switch path {
	case linearize.Inline:
		var addr uint64
		var ok bool
		if len(w.chain) == 1 {
			d := w.chain[0]
			addr, ok = w.build.Inline(w.mem[d.Addr : d.Addr+uint64(d.Len)])
		} else {
			addr, _, ok = w.build.InlineGather(w.chain)
		}
		if ok {
			w.out[0] = xsk.Desc{Addr: addr, Len: uint32(total)}
			nd = 1
		} else {
			c.fallbacks++
			path = linearize.Frame
			if len(w.chain) > 1 {
				path = linearize.Chain
			}
		}
	case linearize.Frag:
		if nd = w.build.Repack(w.chain, w.out); nd == 0 {
			path = linearize.Chain
		} else if w.csum {
			// Repacked: the packet is contiguous now, so it can be finished.
			a := w.out[0].Addr
			if csum.Complete(w.mem[a:a+uint64(total)]) == csum.Completed {
				c.csumCompleted++
			}
		}
	}
	if nd > 0 {
		w.recycleChain()
	} else {
		// Frame or Chain: the packet leaves from its own frames.
		if len(w.chain) > linearize.MaxDescs || len(w.chain) == cap(w.chain) && w.chain[len(w.chain)-1].Options&xsk.PktContd != 0 {
			// A chain longer than any kernel takes, and no frag block
			// to repack it into.
			c.noRoom++
			w.recycleChain()
			return 0
		}
		for j, d := range w.chain {
			w.zone.Move(d.Addr, umem.KernelRX, umem.KernelTX)
			w.out[j] = xsk.Desc{Addr: d.Addr, Len: d.Len, Options: d.Options & xsk.PktContd}
		}
		nd = len(w.chain)
	}
	for _, d := range w.out[:nd] {
		w.meter.Touch(d.Addr, d.Len)
	}
	c.paths[path]++
	c.hist[min(nd, linearize.MaxDescs)]++
	return nd
}

// release gives back TX descriptors that will not be sent.
func (w *worker) release(descs []xsk.Desc) {
	for _, d := range descs {
		w.freeTX(d.Addr)
	}
}

// freeTX returns a TX address to the zone it came from: frames to the
// worker's cache, inline slots and frag references to the builder. It
// reports false for an address that is no UMEM unit (never followed).
func (w *worker) freeTX(addr uint64) bool {
	if w.zone.Contains(addr) {
		w.frames.Free(addr, umem.KernelTX)
		return true
	}
	return w.build.Release(addr)
}

// recycleChain queues the frames of w.chain for the fill ring: their data
// was copied (or the packet dropped), so they go back while still hot.
func (w *worker) recycleChain() {
	for _, d := range w.chain {
		if !w.zone.Contains(d.Addr) {
			continue // invalid: not ours to recycle
		}
		w.hot = append(w.hot, w.zone.UnitAddr(d.Addr))
	}
}

// recycleHot puts the queued frames straight back on p's fill ring; those
// that do not fit go to the worker's cache.
func (w *worker) recycleHot(p *port) {
	if len(w.hot) == 0 {
		return
	}
	fill := &p.sock.Fill
	n, idx := fill.Reserve(uint32(len(w.hot)))
	for k, a := range w.hot {
		if uint32(k) < n {
			// Still the kernel's RX side: from RX ring to fill ring.
			w.zone.Move(a, umem.KernelRX, umem.KernelRX)
			fill.SetAddr(idx+uint32(k), a)
		} else {
			w.frames.Free(a, umem.KernelRX)
		}
	}
	if n > 0 {
		fill.Submit(n)
	}
	w.hot = w.hot[:0]
}

// reap returns what port i's kernel finished transmitting: frames to the
// worker's cache, inline slots and frag references to the builder.
func (w *worker) reap(i int) {
	p := &w.ports[i]
	for {
		n := p.tx.Reap(w.reaped)
		if w.flows != nil {
			w.flows.completedAddrs(w.reaped[:n], w.q)
		}
		for _, a := range w.reaped[:n] {
			if !w.freeTX(a) {
				p.stats.rxInvalid.Add(1) // not a UMEM address: never followed
			}
		}
		if n < len(w.reaped) {
			return
		}
	}
}

// refill tops up port i's fill ring, a batch at a time.
func (w *worker) refill(i int) {
	p := &w.ports[i]
	fill := &p.sock.Fill
	if fill.Free(w.batch) < w.batch {
		return
	}
	n, idx := fill.Reserve(fill.Free(fill.Size()))
	k := uint32(0)
	for ; k < n; k++ {
		addr, ok := w.frames.Alloc(umem.KernelRX)
		if !ok {
			p.stats.fillShort.Add(1)
			break
		}
		fill.SetAddr(idx+k, addr)
	}
	fill.Cancel(n - k)
	if k > 0 {
		fill.Submit(k)
	}
	if fill.NeedsWakeup() {
		p.sock.WakeRX()
	}
}

// drain forwards what is already in the RX rings and waits, up to
// drainTimeout, for the kernel to complete every TX descriptor.
func (w *worker) drain() {
	w.draining = true
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) {
		n := w.forward(0, 1) + w.forward(1, 0)
		held := 0
		if w.order != nil {
			var m int
			m, held = w.merge()
			n += m
		}
		w.reap(0)
		w.reap(1)
		if n == 0 && held == 0 && w.ports[0].tx.InFlight() == 0 && w.ports[1].tx.InFlight() == 0 {
			break
		}
		for i := range w.ports {
			if w.ports[i].tx.InFlight() > 0 {
				w.ports[i].kick()
			}
		}
		time.Sleep(time.Millisecond)
	}
	w.build.Close()
}
