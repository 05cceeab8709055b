package fwd

import (
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/rxring"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// The RX side of a worker: the RX rings it reads and the frames they
// lend.
//
// Concurrency: a port's socket, RX ring, fill ring and counts (stats) are
// written only by its owner, the worker that reads it; stats readers load
// the counts' atomics from any goroutine, and other workers read the
// port's ordering fields (portOrder) and ask whether its ring is empty
// (rxring.Ring.Empty: a load of the kernel's producer index). The
// rxSide itself is its worker's alone.

// port is one socket: RX queue `queue` of link `link`. Every RX queue of
// every link has one, owned by worker queue % workers. The ports whose
// queue is below the worker count also carry a TX lane (tx): worker w
// transmits on queue w of each link, so every TX ring has a single
// producer; with a Handler every port carries one, for reflections.
type port struct {
	link, queue int
	dom         int // the UMEM domain of its socket (domain.go)
	// csum: partial TCP/UDP checksums of its packets are finished
	// (Plan.Checksums).
	csum bool
	sock *xsk.Socket
	rx   *rxring.Ring // its fill and RX rings, with the owner's frame cache
	// lend is the fewest frames its fill ring lends (Plan.socketRings,
	// for the mode the socket bound in): a copy-mode TX lane's a few
	// batches in a flood; every other socket's its whole fill ring.
	// brace is what it lends otherwise, and before its worker parks: the
	// frames the UMEM sets aside for it.
	lend, brace uint32
	tx          *lane     // nil unless a TX lane (lane.go)
	stats       portStats // counters.go
	owner       *worker
	// cold: its socket passed nothing for a while, and the owner's
	// sleep waits on it through an epoll (waitset.go); the owner's
	// rounds read it less often (rxSide.roundPorts). The owner's.
	cold bool
	portOrder
}

// portOrder is what the merge of every worker reads of an RX port
// (merge.go).
//
// Concurrency: out's producer side, wm, blockedAt and seen are written
// only by the port's owner; every merging worker loads wm, blockedAt and
// seen, and stamps (written by the XDP program).
type portOrder struct {
	// out are the handoff rings from this RX ring to each TX queue's
	// owner, by output link; nil with one queue.
	out [][]*handoff
	// wm is the ordering watermark of this RX ring, written each round.
	// blockedAt (monotonic ns, 0: not blocked) is when the owner last
	// found a handoff ring out of it too full to read it.
	wm        atomic.Int64
	blockedAt atomic.Int64
	// stamps is the program's newest stamp per RX queue (nil unless the
	// program runs in native mode); seen, written once per batch after
	// its handoffs are published, is the stamp of the newest packet the
	// owner took from this ring. Equal, nothing older is in flight
	// (caughtUp).
	stamps *xsk.LastStamps
	seen   atomic.Int64
}

// frameCacheSize bounds a worker's private stock of free frames. Frames
// freed by the worker that transmits a flow are refilled into the fill ring
// of the worker that receives it, through the shared pool; a small cache
// sends them there after half its size, where a large one would hoard
// what another worker's fill ring starves for.
const frameCacheSize = 512

// rxSide is a worker's RX side: the ports it reads (on every link), the
// memory they receive into (every domain's: umem.NewSpace), the batch
// bound and one packet's RX scratch (collect's). The frames they lend
// are the worker's caches of each domain (workerDomain).
type rxSide struct {
	ports     []*port
	mem       []byte
	frameSize uint64
	batch     uint32
	chain     []xsk.Desc // cross-connect's scratch for one packet's RX descriptors
	// from are the links whose RX rings gave packets this round (the
	// worker's reply window).
	from LinkSet
	// hot are the ports not cold, built from ports at the wait set's
	// move gen (hotGen); turn counts the rounds since one read them all.
	hot    []*port
	hotGen uint64
	turn   int
}

// coldEvery: a round in this many reads the cold ports too (roundPorts).
// In a flood, where the worker never sleeps, a cold port's first packet
// waits that many rounds at most.
const coldEvery = 8

// roundPorts are the ports a round reads: all of them in the first round
// after a sleep (allNext) and every coldEvery-th, else the hot ones
// (gen is the wait set's: its moves rebuild the list). A cold port is
// quiet: reading its rings in every empty round of a spin made a round's
// cost grow with the links of a switch. With ordering (several workers)
// every round reads every port: the merge waits on each port's watermark.
func (r *rxSide) roundPorts(gen uint64, ordered bool) []*port {
	if r.turn++; ordered || r.turn >= coldEvery {
		r.turn = 0
		return r.ports
	}
	if r.hotGen != gen || r.hot == nil {
		r.hotGen = gen
		r.hot = r.hot[:0]
		for _, p := range r.ports {
			if !p.cold {
				r.hot = append(r.hot, p)
			}
		}
	}
	return r.hot
}

// allNext makes the next round read every port: the sleep that ended may
// have been ended by a cold one.
func (r *rxSide) allNext() { r.turn = coldEvery }

func newRXSide(mem []byte, frameSize, batch int) rxSide {
	return rxSide{
		mem:       mem,
		frameSize: uint64(frameSize),
		batch:     uint32(batch),
		chain:     make([]xsk.Desc, 0, linearize.MaxDescs),
	}
}

// add makes w, whose RX side this is, the owner of port p: its RX ring
// lends frames from w's cache of p's domain, p.brace, or down to p.lend
// in a flood.
func (r *rxSide) add(p *port, w *worker) {
	p.owner = w
	p.rx = rxring.New(p.sock, w.umems.dom[p.dom].frames)
	p.rx.SetLend(p.lend, p.brace)
	r.ports = append(r.ports, p)
}

// brace tops every fill ring up to what the UMEM sets aside for it: the
// worker is about to park (a link change, a handover's freeze), and the
// kernel goes on receiving while it refills nothing.
func (r *rxSide) brace() {
	for _, p := range r.ports {
		p.rx.Brace(p.brace)
	}
}

// frameStart is the start of the RX frame addr lies in. Every domain's
// frames are aligned to their size (a region starts on a huge page, its
// frames zone on a frame), so no domain need be looked up.
func (r *rxSide) frameStart(addr uint64) uint64 { return addr &^ (r.frameSize - 1) }

// refill tops up the fill rings of ports, a batch at a time.
func refill(ports []*port, batch uint32) {
	for _, p := range ports {
		p.rx.Refill(batch)
	}
}
