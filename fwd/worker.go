package fwd

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

const (
	// spinRounds is how many empty rounds a worker spins before it sleeps
	// in poll(2): long enough to catch the next burst, short enough not
	// to take a core from the softirq work that feeds it on a small box.
	spinRounds = 64
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
}

type port struct {
	sock  *xsk.Socket
	tx    *txring.Ring
	stats portStats
}

// batchCounts accumulates one batch's counters in plain memory; they are
// published with one atomic add each at the end of the batch.
type batchCounts struct {
	txPackets, txBytes, txDescs uint64
	paths                       [linearize.NumPaths]uint64
	fallbacks, invalid, noRoom  uint64
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
}

func newWorker(f *Forwarder, q int) *worker {
	w := &worker{
		q:      q,
		mem:    f.region.Mem(),
		zone:   f.region.Frames,
		frames: f.region.Frames.NewCache(int(4 * f.cfg.RingSize)),
		build:  inline.NewBuilder(f.region, f.policy, 1024, packAlign(f.socks[0][q])),
		batch:  uint32(f.cfg.Batch),
		reaped: make([]uint64, f.cfg.Batch),
		chain:  make([]xsk.Desc, 0, linearize.MaxDescs),
		out:    make([]xsk.Desc, linearize.MaxDescs),
		hot:    make([]uint64, 0, f.cfg.Batch),
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

	idle := 0
	for !stop.Load() {
		w.refill(0)
		w.refill(1)
		n := w.forward(0, 1) + w.forward(1, 0)
		w.reap(0)
		w.reap(1)
		w.frames.Publish()
		w.build.Publish()
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle < spinRounds {
			continue
		}
		idle = 0
		for i := range w.ports {
			// A kick the kernel could not finish (copy mode sends a
			// bounded budget per call) is retried rather than waiting
			// for new traffic.
			if w.ports[i].tx.Pending() > 0 {
				w.ports[i].tx.Kick(true)
			}
		}
		unix.Poll(w.pfds[:], int(pollTimeout/time.Millisecond))
	}
	w.drain()
}

// forward moves up to one batch of packets from in's RX ring to out's TX
// ring, each by the path linearize picks: small packets are copied into an
// inline slot and their frame goes straight back to the fill ring; larger
// ones leave from the frame they arrived in; multi-buffer packets leave as
// their chain or, when it has too many pieces, repacked into a frag block.
// It peeks no more than out's TX ring can take, so a full TX ring pushes
// back into the RX ring (and the kernel's rx_ring_full counter) instead of
// dropping in user space.
func (w *worker) forward(i, o int) int {
	in, out := &w.ports[i], &w.ports[o]
	room := out.tx.Free(w.batch)
	if room < linearize.MaxDescs {
		out.tx.Kick(true)
		if room == 0 {
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
	got, tidx := out.tx.Reserve(n) // every path needs at most as many descriptors as it arrived with
	var c batchCounts
	var rxBytes uint64
	t := tidx
	packets := 0
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
		t += w.place(out, t, total, &c)
	}
	rx.Release(n)
	out.tx.Cancel(got - (t - tidx))
	out.tx.Submit()
	w.recycleHot(in)

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
	if c.fallbacks != 0 {
		s.inlineFallbacks.Add(c.fallbacks)
	}
	if c.invalid != 0 {
		in.stats.rxInvalid.Add(c.invalid)
	}
	if c.noRoom != 0 {
		s.txNoRoom.Add(c.noRoom)
	}
	return packets
}

// place writes the TX descriptors for the packet in w.chain at slot t of
// out's ring and returns how many it used.
func (w *worker) place(out *port, t uint32, total int, c *batchCounts) uint32 {
	path := w.build.Policy.Decide(total, len(w.chain))
	var nd int
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
		if !ok {
			c.fallbacks++
			path = linearize.Frame
			if len(w.chain) > 1 {
				path = linearize.Chain
			}
			return w.placeAs(out, t, path, total, c)
		}
		out.tx.Set(t, addr, uint32(total), 0)
		w.meter.Touch(addr, uint32(total))
		w.recycleChain()
		nd = 1
	case linearize.Frag:
		nd = w.build.Repack(w.chain, w.out)
		if nd == 0 {
			return w.placeAs(out, t, linearize.Chain, total, c)
		}
		for j, d := range w.out[:nd] {
			out.tx.Set(t+uint32(j), d.Addr, d.Len, d.Options)
			w.meter.Touch(d.Addr, d.Len)
		}
		w.recycleChain()
	default:
		return w.placeAs(out, t, path, total, c)
	}
	c.count(path, total, nd, &out.stats)
	return uint32(nd)
}

// placeAs sends the packet in w.chain from its own frames (Frame or Chain).
func (w *worker) placeAs(out *port, t uint32, path linearize.Path, total int, c *batchCounts) uint32 {
	if len(w.chain) > linearize.MaxDescs || len(w.chain) == cap(w.chain) && w.chain[len(w.chain)-1].Options&xsk.PktContd != 0 {
		// A chain longer than any kernel takes, and no frag block to
		// repack it into.
		c.noRoom++
		w.recycleChain()
		return 0
	}
	for j, d := range w.chain {
		w.zone.Move(d.Addr, umem.KernelRX, umem.KernelTX)
		out.tx.Set(t+uint32(j), d.Addr, d.Len, d.Options&xsk.PktContd)
		w.meter.Touch(d.Addr, d.Len)
	}
	c.count(path, total, len(w.chain), &out.stats)
	return uint32(len(w.chain))
}

func (c *batchCounts) count(p linearize.Path, total, descs int, s *portStats) {
	c.txPackets++
	c.txBytes += uint64(total)
	c.txDescs += uint64(descs)
	c.paths[p]++
	s.descHist[min(descs, linearize.MaxDescs)].Add(1)
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
		for _, a := range w.reaped[:n] {
			if w.zone.Contains(a) {
				w.frames.Free(a, umem.KernelTX)
			} else if !w.build.Release(a) {
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
	deadline := time.Now().Add(drainTimeout)
	for time.Now().Before(deadline) {
		n := w.forward(0, 1) + w.forward(1, 0)
		w.reap(0)
		w.reap(1)
		if n == 0 && w.ports[0].tx.InFlight() == 0 && w.ports[1].tx.InFlight() == 0 {
			break
		}
		for i := range w.ports {
			if w.ports[i].tx.InFlight() > 0 {
				w.ports[i].tx.Kick(true)
			}
		}
		time.Sleep(time.Millisecond)
	}
	w.build.Close()
}
