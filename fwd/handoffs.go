package fwd

import (
	"math/bits"
	"slices"
	"unsafe"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// The wiring of the handoff rings (merge.go), the forwarder's part: New
// joins every RX port to every TX queue's owner (setupOrdering), AddLink
// and RemoveLink rewire them while the workers are parked (orderLink,
// unorderLink), Close drops what is left (dropHandoffs), and the plan
// sizes them within a bound (handoffRingSize).

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
		w.flows.order = &ordering{modeOf: f.flows.table.Mode, clock: clock, in: make([][]*handoff, n), src: make([][]*port, n)}
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
		hs[tq] = newHandoffTo(size, w)
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
		ord := w.flows.order
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
	if f.workers[0].flows.order == nil {
		return nil
	}
	size := f.plan.AddedHandoffSize
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
	if f.workers[0].flows.order == nil {
		return nil
	}
	others := 0
	live := f.linksBut(i)
	for _, o := range live {
		others += len(f.ports[o])
	}
	rings := (ports*(len(live)+1) + others) * len(f.workers)
	need := rings * f.plan.AddedHandoffSize * int(unsafe.Sizeof(handoffEntry{}))
	if f.handoffBytes+need > handoffBudget {
		return inputErr("%d more handoff rings of %d entries would take the ordering's to %d MiB, beyond the %d MiB bound; use fewer workers (--queues) or fewer RX queues (ethtool -L)",
			rings, f.plan.AddedHandoffSize, (f.handoffBytes+need)>>20, handoffBudget>>20)
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
	if f.workers[0].flows.order == nil {
		return
	}
	for _, w := range f.workers {
		ord := w.flows.order
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
//
// It makes a few tries without waiting for completions (not settle): the
// lane may be the removed link's, whose kernel may never complete.
func (w *worker) flushRings(o int, rings []*handoff) {
	out := w.lanes.tx[o]
	for range maxBatches {
		if _, held := w.mergeRings(o, rings, nil); held == 0 || out == nil {
			break
		}
		out.kick()
		w.reap(out)
	}
	w.dropRings(o, rings)
}

// dropHandoffs releases what is left in the rings handed to this worker,
// counted as dropped at stop on its TX lane; for Close, once every worker
// has stopped and the forwarder has sent what it could (finish).
func (w *worker) dropHandoffs() {
	if w.flows.order == nil {
		return
	}
	if w.tap.point != nil {
		// The worker is gone: this is its point's only writer now.
		w.tap.set = w.tap.point.Begin()
		defer w.tapEnd()
	}
	for o := range w.flows.order.in {
		w.dropRings(o, w.flows.order.in[o])
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
	if o < len(w.lanes.tx) && w.lanes.tx[o] != nil {
		publish(w.lanes.tx[o].stats, &c)
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
