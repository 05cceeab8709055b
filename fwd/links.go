package fwd

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Links attached and detached while forwarding (AddLink, RemoveLink), in
// the modes with a Handler, in copy mode. The rule is one for every link:
// any may be added, removed, or deleted by the kernel (the monitor removes
// it), those given to New as those added, the first and the last too; a
// link whose queue count changes is removed and added back on its new
// queues. Nothing a link does ends Run. Without a Handler (xconnect) and
// in zero-copy mode the links are those given, and Run ends when one goes
// (ErrLinkGone, ErrQueuesChanged): the daemon builds the forwarder again.
//
// The UMEM is registered once, sized at start for Plan.MaxLinks links
// (reserveLinks): an added link's fill rings are stocked from frames set
// aside for it. A link's index is its place in Links; a removed link
// leaves a hole (Links reports ""), and the next AddLink takes the lowest
// hole, so indices of the other links never change and every index fits
// a LinkSet. The hole is reused only once no worker reads or sends on the
// old link and the Handler was told (LinkObserver), so nothing stale (an
// FDB entry) points at the new one.
//
// A change is made with every worker parked at a round boundary
// (parked): the caller asks each worker to stop, wakes it and waits; a
// worker checks one atomic flag per round, so forwarding pays nothing per
// packet. While they are parked the caller is, for each of them, the
// worker: it hands them the new link's ports and lanes, wires the handoff
// rings of the ordering across RX queues (merge.go) to and from the link,
// or takes them apart, since with several workers those rings join every
// worker to every other.
//
// Concurrency: linkOps.mu serialises AddLink, RemoveLink and the monitor's
// removals, and Run's finish. The forwarder's per-link slices (links,
// socks, ports, progs, health, promisc) are written under teardown.mu held
// exclusively, so stats readers see a link whole or not at all; what a
// worker owns (rx, tx, own, waits, live, its ordering) is written only by
// the worker, or by the caller while the worker is parked or not running
// (linkChanges).

// LinkObserver is what a Handler may implement to hear of the links added
// and removed while it runs: LinkAdded(i) before any packet from or to
// link i, LinkRemoved(i) once no worker reads or sends on it any more,
// before index i may be given to another link (modes.Switch flushes the
// link's FDB entries).
type LinkObserver interface {
	LinkAdded(i int)
	LinkRemoved(i int)
}

// LinkNameObserver is what a LinkObserver may also implement to hear an
// added link's name with its index, for state it was given by name
// (modes.Switch's port security): LinkAddedAs(i, name) is called in place
// of LinkAdded(i), before any packet from or to the link.
type LinkNameObserver interface {
	LinkAddedAs(i int, name string)
}

// linkRemoveDrain bounds how long the workers wait, while a link is
// removed, for the kernel to complete what the link's TX rings hold (a
// link that is down or deleted never does: what is left is taken back
// from the ring).
const linkRemoveDrain = 50 * time.Millisecond

// linkChanges is a worker's part that takes link changes.
type linkChanges struct {
	pending atomic.Bool // park is set
	mu      sync.Mutex
	running bool     // run's loop takes requests; else the caller holds mu
	park    *parking // the caller's request to hold the worker
	// live is the set of links the worker may send to (a Handler's
	// verdicts naming another are dropped, handler_drops).
	live LinkSet
}

// parking holds a worker: it closes parked when it stops at a round
// boundary and goes on when resume is closed.
type parking struct{ parked, resume chan struct{} }

// park stops w at its next round boundary and returns once it has, with
// the function that lets it go on. A worker that is not running is held
// by its mutex instead: it cannot start (setRunning) until resumed.
func (w *worker) park() (resume func()) {
	c := &w.chg
	c.mu.Lock()
	if !c.running {
		return c.mu.Unlock
	}
	p := &parking{parked: make(chan struct{}), resume: make(chan struct{})}
	c.park = p
	c.pending.Store(true)
	c.mu.Unlock()
	w.wake.wake()
	<-p.parked
	return func() { close(p.resume) }
}

// takeChanges holds the worker while a caller changes its links; the
// worker's loop calls it at a round boundary when pending is set.
func (w *worker) takeChanges() {
	c := &w.chg
	c.mu.Lock()
	p := c.park
	c.park = nil
	c.pending.Store(false)
	c.mu.Unlock()
	if p != nil {
		w.rx.brace()
		close(p.parked)
		<-p.resume
	}
}

// setRunning records whether run's loop takes requests; when it stops, a
// request made meanwhile is taken at once.
func (w *worker) setRunning(on bool) {
	c := &w.chg
	c.mu.Lock()
	c.running = on
	c.mu.Unlock()
	if !on && c.pending.Load() {
		w.takeChanges()
	}
}

// parked runs fn while every worker is parked.
func (f *Forwarder) parked(fn func()) {
	resume := make([]func(), 0, len(f.workers))
	for _, w := range f.workers {
		resume = append(resume, w.park())
	}
	defer func() {
		for _, r := range resume {
			r()
		}
	}()
	fn()
}

// adopt makes the worker read ports (those of a new link it owns) and
// send on lane, link's TX queue w.q; their fill rings go full before the
// caller points the program at them.
func (w *worker) adopt(link int, ports []*port, l *lane) {
	for len(w.lanes.tx) <= link {
		w.lanes.tx = append(w.lanes.tx, nil)
	}
	w.lanes.tx[link] = l
	for _, p := range ports {
		w.rx.add(p, w)
		if p.tx != nil {
			w.lanes.own = append(w.lanes.own, p.tx)
		}
		p.rx.Refill(w.rx.batch)
	}
	w.umems.publish()
	w.chg.live = w.chg.live.Add(link)
	w.lanes.txAll = append(w.lanes.txAll, l)
	w.pollSet()
}

// unlive stops the worker sending to link: Handler verdicts naming it are
// dropped from now on.
func (w *worker) unlive(link int) { w.chg.live &^= LinkSet(0).Add(link) }

// forwardLink forwards what the worker's RX rings of link hold: what
// arrived before the program let go of the sockets.
func (w *worker) forwardLink(link int) {
	for range maxBatches {
		n := 0
		for _, p := range w.rx.ports {
			if p.link == link {
				n += w.forward(p)
			}
		}
		if n == 0 {
			return
		}
	}
}

// dropped is what the workers give back of a removed link: the frames the
// kernel still held on its sockets (rx: umem.KernelRX, tx:
// umem.KernelTX), for the caller to free once the sockets are closed, and
// the TX descriptors neither completed nor on a ring (stranded).
type dropped struct {
	rx, tx   []uint64
	stranded int
}

// dropLink stops the worker using link once nothing is sent to it any
// more and nothing is held for it: what its TX rings hold is given time
// to complete (until deadline), and the frames the kernel still holds on
// its sockets are listed in d. The caller unregistered the sockets first.
func (w *worker) dropLink(link int, deadline time.Time, d *dropped) {
	var lanes []*lane
	for _, l := range w.lanes.own {
		if l.link == link {
			lanes = append(lanes, l)
		}
	}
	w.settle(lanes, nil, deadline, 100*time.Microsecond)
	for _, l := range lanes {
		unsent := len(d.tx)
		d.tx = l.unsent(d.tx)
		if w.flows.table != nil {
			// Off the flow table's count of what is in flight on the
			// queue, as a completion would take them.
			w.flows.table.completedAddrs(d.tx[unsent:], l.queue)
		}
		// Taken by the kernel, never completed: lost with the socket.
		d.stranded += int(l.inFlight()) - (len(d.tx) - unsent)
	}
	for _, p := range w.rx.ports {
		if p.link == link {
			d.rx = p.rx.Lent(d.rx)
		}
	}
	w.rx.ports = removeLinkOf(w.rx.ports, link, func(p *port) int { return p.link })
	w.lanes.own = removeLinkOf(w.lanes.own, link, func(l *lane) int { return l.link })
	if link < len(w.lanes.tx) {
		w.lanes.tx[link] = nil
	}
	w.lanes.txAll = removeLinkOf(w.lanes.txAll, link, func(l *lane) int { return l.link })
	w.reapAll()
	w.umems.publish()
	w.pollSet()
}

// removeLinkOf returns s without the elements of link.
func removeLinkOf[T any](s []T, link int, of func(T) int) []T {
	out := s[:0]
	for _, x := range s {
		if of(x) != link {
			out = append(out, x)
		}
	}
	clear(s[len(out):])
	return out
}

// pollSet rebuilds what the worker's sleep waits on (waitSet), and
// whether an RX socket is in memory, with no fd to wait on.
func (w *worker) pollSet() {
	w.memRX = false
	for _, p := range w.rx.ports {
		w.memRX = w.memRX || p.sock.FD() < 0
	}
	w.waits.build(w.rx.ports, w.wake.fd)
}

// changeable says why links cannot be added or removed now, if so.
func (f *Forwarder) changeable(op, name string) error {
	if err := f.linksFixed(); err != nil {
		return fmt.Errorf("link %s %s: %w", op, name, err)
	}
	return nil
}

// linksFixed says why no link may be added or removed now, if so; every
// reason wraps linkop.ErrUnsupported.
func (f *Forwarder) linksFixed() error {
	switch {
	case f.handler == nil:
		return &InputError{fmt.Errorf("without a Handler (xconnect) the links are the two given: %w", linkop.ErrUnsupported)}
	case f.doms[len(f.doms)-1].zeroCopy:
		// The kernel binds a socket sharing a zero-copy UMEM in zero-copy
		// mode too (xp_assign_dev_shared), which a veth cannot take; and
		// a driver holds frames the rings do not show, which closing one
		// socket would lose. With links to come (MaxLinks) they get a
		// copy-mode UMEM of their own (domain.go).
		return fmt.Errorf("the only UMEM is registered in zero-copy mode, and the kernel binds every socket sharing it in zero-copy mode too, which a veth cannot take (--max-links above the links given keeps them zero-copy and sets a copy-mode UMEM aside for links added while running): %w", linkop.ErrUnsupported)
	}
	f.life.mu.Lock()
	closed := f.life.closed
	f.life.mu.Unlock()
	if closed || f.stop.Load() {
		return fmt.Errorf("the forwarder is stopping: %w", linkop.ErrUnsupported)
	}
	return nil
}

// linkFixed says why link i may not be removed (nor added back on new
// queues) now, if so: links fixed, or a link bound in zero-copy mode,
// whose driver holds frames the rings do not show, which closing its
// sockets would lose. Every reason wraps linkop.ErrUnsupported.
func (f *Forwarder) linkFixed(i int) error {
	if err := f.linksFixed(); err != nil {
		return err
	}
	if d := f.doms[f.links[i].dom]; d.zeroCopy {
		return fmt.Errorf("it is bound in zero-copy mode (UMEM domain %s), where its driver holds frames the rings do not show, which removing it would lose; links in copy mode come and go: %w", d.Name, linkop.ErrUnsupported)
	}
	return nil
}

// indexOf is the index of the link named name, or -1.
func (f *Forwarder) indexOf(name string) int {
	for i, l := range f.links {
		if l.name == name {
			return i
		}
	}
	return -1
}

// AddLink attaches link name while the forwarder runs (or before Run):
// its program, a socket on every RX queue sharing the UMEM, its fill rings
// stocked from the frames set aside for it (Config.MaxLinks), its ports
// handed to the workers as at start. It takes the lowest free index (a
// removed link's, else the next): Links()[i] == name. Errors wrap
// linkop.ErrExists (it is forwarded already), ErrUnknownLink and
// linkop.ErrNoSuchLink (there is no such link) or linkop.ErrUnsupported
// (xconnect, zero-copy); MaxLinks reached, a link with fewer queues than
// the workers, or handoff rings beyond their bound, is an InputError.
func (f *Forwarder) AddLink(name string) error {
	f.linkOps.mu.Lock()
	defer f.linkOps.mu.Unlock()
	return f.addLink(name)
}

// addLink is AddLink with linkOps.mu held.
func (f *Forwarder) addLink(name string) error {
	i, l, err := f.admitLink(name)
	if err != nil {
		return err
	}
	ports, err := f.buildLink(i, l)
	if err != nil {
		return fmt.Errorf("link add %s: %w", name, err)
	}
	f.handLink(i, ports)
	if err := f.register(i); err != nil {
		f.removeLink(i, false)
		return fmt.Errorf("link add %s: %w", name, err)
	}
	f.progs[i].Commit()
	delete(f.linkOps.vanished, name)
	f.watchChanged()
	f.plan.Logger.Info("link added", "link", name, "index", i, "rx_queues", l.rxQueues, "xdp_mode", f.progs[i].Mode())
	return nil
}

// admitLink is the index link name takes (the lowest free) and what it
// is, or why the forwarder refuses it; it changes nothing.
func (f *Forwarder) admitLink(name string) (int, linkInfo, error) {
	if err := f.changeable("add", name); err != nil {
		return 0, linkInfo{}, err
	}
	if f.indexOf(name) >= 0 {
		return 0, linkInfo{}, fmt.Errorf("link add %s: %w", name, linkop.ErrExists)
	}
	i := f.indexOf("")
	if i < 0 {
		i = len(f.links)
	}
	if i >= f.plan.MaxLinks {
		return 0, linkInfo{}, &InputError{linkop.Mark(fmt.Errorf("link add %s: the forwarder holds %d links at most, all taken (--max-links)", name, f.plan.MaxLinks), linkop.ErrFull)}
	}
	found, err := lookupLinks(f.env, []string{name})
	if err != nil {
		if errors.Is(err, ErrUnknownLink) {
			return 0, linkInfo{}, fmt.Errorf("link add %s: %w (%w)", name, err, linkop.ErrNoSuchLink)
		}
		return 0, linkInfo{}, fmt.Errorf("link add %s: %w", name, err)
	}
	l := found[0]
	if l.rxQueues < f.plan.Queues || l.txQueues < f.plan.Queues {
		return 0, linkInfo{}, inputErr("link add %s: %d RX and %d TX queues, fewer than the %d workers", name, l.rxQueues, l.txQueues, f.plan.Queues)
	}
	if l.mtu+maxFrameOverhead > f.plan.FrameSize && !f.plan.MultiBuffer {
		return 0, linkInfo{}, &InputError{linkop.Mark(fmt.Errorf("link add %s: MTU %d does not fit a %d-byte frame (restart with a larger --frame-size or --multi-buffer)", name, l.mtu, f.plan.FrameSize), linkop.ErrMTU)}
	}
	l.dom = f.plan.domainOf(name)
	return i, l, nil
}

// buildLink makes link l's entries at index i, its program, sockets,
// promiscuity and ports, under the readers' lock: a reader sees the link
// without ports (zero counts) until a worker has them. On an error
// everything it made is undone.
func (f *Forwarder) buildLink(i int, l linkInfo) (_ []*port, err error) {
	f.teardown.mu.Lock()
	defer f.teardown.mu.Unlock()
	for len(f.links) <= i {
		f.links = append(f.links, linkInfo{})
		f.socks = append(f.socks, nil)
		f.ports = append(f.ports, nil)
		f.progs = append(f.progs, nil)
		f.health = append(f.health, linkHealth{})
		if f.plan.Promiscuous {
			f.promisc = append(f.promisc, nil)
		}
	}
	f.links[i] = l
	defer func() {
		if err != nil {
			f.unbuildLink(i)
		}
	}()
	if err := f.attach(i); err != nil {
		return nil, err
	}
	if err := f.openLink(i, xsk.ZeroCopyOff, f.plan.AddedRingSize); err != nil {
		if errors.Is(err, xsk.ErrZeroCopyUnsupported) {
			err = &InputError{err}
		}
		return nil, err
	}
	if f.plan.Promiscuous {
		m, err := f.env.Promiscuous(l.info())
		if err != nil {
			return nil, err
		}
		f.promisc[i] = m
	}
	ports := f.newPorts(i)
	if err := f.handoffRoom(i, len(ports)); err != nil {
		return nil, err
	}
	return ports, nil
}

// unbuildLink undoes buildLink at index i, under the readers' lock.
func (f *Forwarder) unbuildLink(i int) {
	for _, s := range f.socks[i] {
		if s != nil {
			s.Close()
		}
	}
	if f.progs[i] != nil {
		f.progs[i].Close()
	}
	if f.plan.Promiscuous && f.promisc[i] != nil {
		f.promisc[i].Close()
	}
	f.links[i], f.socks[i], f.ports[i], f.progs[i] = linkInfo{}, nil, nil, nil
	if f.plan.Promiscuous {
		f.promisc[i] = nil
	}
}

// handLink hands link i's ports to the workers: the Handler hears of the
// link first, captures know it before a worker takes its first packet
// (capture.Hub.SetLinks), and worker q reads RX queues q, q+W, … and
// sends on TX queue q, as at start (newWorker), adopting them at a round's
// boundary with the link's handoff rings.
func (f *Forwarder) handLink(i int, ports []*port) {
	if o, ok := f.handler.(LinkNameObserver); ok {
		o.LinkAddedAs(i, f.links[i].name)
	} else if o, ok := f.handler.(LinkObserver); ok {
		o.LinkAdded(i)
	}
	W := len(f.workers)
	for _, p := range ports {
		f.env.Notify(p.sock, f.workers[p.queue%W].wake.wake)
	}
	rings := f.newHandoffs(i, ports)
	f.capture.SetLinks(f.Links())
	f.parked(func() {
		for q, w := range f.workers {
			var own []*port
			for _, p := range ports {
				if p.queue%W == q {
					own = append(own, p)
				}
			}
			w.adopt(i, own, ports[q].tx)
		}
		f.orderLink(i, rings)
	})
	f.teardown.mu.Lock()
	f.ports[i] = ports
	f.teardown.mu.Unlock()
}

// RemoveLink detaches link name while the forwarder runs (or before Run):
// its program stops redirecting, the worker forwards what its RX rings
// hold and stops using it, its sockets close and every frame they held
// comes back; the Handler hears of it (LinkObserver: the switch forgets
// its addresses); its totals stay in the Summary, and its index is free
// for a later AddLink. Any link may go, the first and the last
// included: with none left the forwarder runs on, forwarding nothing, and
// the next AddLink's sockets register the UMEM again. Errors wrap
// ErrUnknownLink and linkop.ErrUnknownLink (it is not forwarded) or
// linkop.ErrUnsupported.
func (f *Forwarder) RemoveLink(name string) error {
	f.linkOps.mu.Lock()
	defer f.linkOps.mu.Unlock()
	if err := f.changeable("del", name); err != nil {
		return err
	}
	i := f.indexOf(name)
	if _, out := f.linkOps.vanished[name]; i < 0 && out {
		// Out against the forwarder's will (Vanished): removed on
		// purpose now, it is no longer waited for.
		delete(f.linkOps.vanished, name)
		f.plan.Logger.Info("link removed: it was out, and is no longer waited for", "link", name)
		return nil
	}
	if i < 0 || name == "" {
		return fmt.Errorf("link del %s: %w %q (%w)", name, ErrUnknownLink, name, linkop.ErrUnknownLink)
	}
	if err := f.linkFixed(i); err != nil {
		return fmt.Errorf("link del %s: %w", name, err)
	}
	f.removeLink(i, false)
	f.watchChanged()
	f.plan.Logger.Info("link removed", "link", name, "index", i)
	return nil
}

// removeLink takes link i out: RemoveLink's, and the monitor's for a link
// the kernel deleted (gone: its sockets are unbound already). linkOps.mu is
// held.
func (f *Forwarder) removeLink(i int, gone bool) {
	for q := range f.socks[i] {
		f.progs[i].Unregister(q)
	}
	var d dropped
	f.parked(func() {
		for _, w := range f.workers {
			w.unlive(i)
		}
		for _, w := range f.workers {
			w.forwardLink(i)
		}
		f.unorderLink(i)
		deadline := time.Now().Add(linkRemoveDrain)
		for _, w := range f.workers {
			w.dropLink(i, deadline, &d)
		}
	})
	// Its totals, read while its sockets are open, go to the summary.
	name := f.links[i].name
	st := f.LinkStats(i)
	f.teardown.mu.Lock()
	f.linkOps.removed.add(name, st)
	socks, prog := f.socks[i], f.progs[i]
	f.links[i], f.socks[i], f.ports[i], f.progs[i] = linkInfo{}, nil, nil, nil
	f.health[i].downs.Store(0)
	f.health[i].downNS.Store(0)
	f.health[i].downAt.Store(0)
	var prom io.Closer
	if f.plan.Promiscuous && i < len(f.promisc) {
		prom, f.promisc[i] = f.promisc[i], nil
	}
	f.linkOps.stranded += d.stranded
	f.teardown.mu.Unlock()
	f.capture.SetLinks(f.Links())
	// The UMEM outlives the socket that registered it: the kernel holds
	// it for every socket bound to it, and AddLink binds to another; when
	// these were the last, the kernel lets it go with them, and the next
	// AddLink's first socket registers the region again (openLink).
	for q := len(socks) - 1; q >= 0; q-- {
		socks[q].Close()
	}
	prog.Close()
	if prom != nil {
		prom.Close()
	}
	f.parked(func() { f.workers[0].releaseLent(d.rx, d.tx) })
	if o, ok := f.handler.(LinkObserver); ok {
		o.LinkRemoved(i)
	}
}

// Vanished is the links the kernel deleted while they were forwarded
// (the monitor removed them), or whose queue count changed to one they
// could not be added back on, and that were not added again since: what
// a daemon that waits for its links adds back when it can.
func (f *Forwarder) Vanished() []string {
	f.linkOps.mu.Lock()
	defer f.linkOps.mu.Unlock()
	out := make([]string, 0, len(f.linkOps.vanished))
	for n := range f.linkOps.vanished {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// LinksOut is Vanished with why each is out: OutDeleted, or why it was
// not added back on its new queues.
func (f *Forwarder) LinksOut() map[string]string {
	f.linkOps.mu.Lock()
	defer f.linkOps.mu.Unlock()
	return maps.Clone(f.linkOps.vanished)
}

// RemovedLinks is the totals of the last 64 links removed while running,
// by name (a name removed twice: both summed); the Summary lists them
// with the others, and sums the older ones (Summary.RemovedOlder).
func (f *Forwarder) RemovedLinks() map[string]LinkStats {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	out := make(map[string]LinkStats, len(f.linkOps.removed.byName))
	for k, v := range f.linkOps.removed.byName {
		out[k] = v
	}
	return out
}

// watchChanged has the monitor follow the links as they are now.
func (f *Forwarder) watchChanged() {
	select {
	case f.linkOps.rewatch <- struct{}{}:
	default:
	}
}
