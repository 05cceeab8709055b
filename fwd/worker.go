package fwd

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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
	// fillShort counts fill-ring refills cut short because the frame zone
	// had nothing free: the kernel then drops at rx_fill_ring_empty.
	fillShort atomic.Uint64
	_         [24]byte // keep workers' counters on separate cache lines
}

type port struct {
	sock  *xsk.Socket
	tx    *txring.Ring
	stats portStats
}

// worker owns queue q of both links.
type worker struct {
	q      int
	ports  [2]port
	frames *umem.Cache
	zone   *umem.Zone
	batch  uint32
	reaped []uint64 // completion scratch, batch long
	pfds   [2]unix.PollFd
}

func newWorker(f *Forwarder, q int) *worker {
	w := &worker{
		q:      q,
		zone:   f.region.Frames,
		frames: f.region.Frames.NewCache(int(2 * f.cfg.RingSize)),
		batch:  uint32(f.cfg.Batch),
		reaped: make([]uint64, f.cfg.Batch),
	}
	for i := range w.ports {
		s := f.socks[i][q]
		w.ports[i] = port{sock: s, tx: txring.New(s)}
		w.pfds[i] = unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN}
	}
	return w
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

// forward moves up to one batch from in's RX ring to out's TX ring. A frame
// leaves from the buffer it arrived in: the descriptor is copied, the
// packet is not. It takes no more than out's TX ring can hold, so a full
// TX ring pushes back into the RX ring (and the kernel's rx_ring_full
// counter) instead of dropping in user space.
func (w *worker) forward(i, o int) int {
	in, out := &w.ports[i], &w.ports[o]
	room := out.tx.Free(w.batch)
	if room == 0 {
		out.tx.Kick(true)
		return 0
	}
	n, idx := in.sock.RX.Peek(min(room, w.batch))
	if n == 0 {
		return 0
	}
	_, tidx := out.tx.Reserve(n) // room >= n: always all of them
	var bytes uint64
	for k := range n {
		d := in.sock.RX.Desc(idx + k)
		addr := xsk.Flat(d.Addr)
		w.zone.Move(addr, umem.KernelRX, umem.KernelTX)
		out.tx.Set(tidx+k, addr, d.Len, 0)
		bytes += uint64(d.Len)
	}
	// Release RX only after reading every descriptor; submit TX after
	// writing every descriptor.
	in.sock.RX.Release(n)
	out.tx.Submit()
	in.stats.rxPackets.Add(uint64(n))
	in.stats.rxBytes.Add(bytes)
	out.stats.txPackets.Add(uint64(n))
	out.stats.txBytes.Add(bytes)
	return int(n)
}

// reap returns the frames port i's kernel finished transmitting to the
// worker's cache.
func (w *worker) reap(i int) {
	p := &w.ports[i]
	for {
		n := p.tx.Reap(w.reaped)
		for _, a := range w.reaped[:n] {
			w.frames.Free(a, umem.KernelTX)
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
			return
		}
		for i := range w.ports {
			if w.ports[i].tx.InFlight() > 0 {
				w.ports[i].tx.Kick(true)
			}
		}
		time.Sleep(time.Millisecond)
	}
}
