package fwd

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Links attached and detached while forwarding (AddLink, RemoveLink), in
// the modes with a Handler.
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
// A worker picks changes up at a round boundary (linkChanges): the caller
// queues a request, wakes the worker and waits; the worker checks one
// atomic flag per round, so forwarding pays nothing per packet.
//
// Concurrency: linkMu serialises AddLink and RemoveLink. The forwarder's
// per-link slices (links, socks, ports, progs, health, promisc) are
// written under statsMu held exclusively, so stats readers see a link
// whole or not at all; a worker's own lists (rx, tx, own, pfds, live) are
// written only by the worker, or by the caller while the worker is not
// running (linkChanges.running false, under linkChanges.mu).

// LinkObserver is what a Handler may implement to hear of the links added
// and removed while it runs: LinkAdded(i) before any packet from or to
// link i, LinkRemoved(i) once no worker reads or sends on it any more,
// before index i may be given to another link (modes.Switch flushes the
// link's FDB entries).
type LinkObserver interface {
	LinkAdded(i int)
	LinkRemoved(i int)
}

// linkRemoveDrain bounds how long a worker waits, while removing a link,
// for the kernel to complete what the link's TX rings hold (a link that is
// down or deleted never does: what is left is taken back from the ring).
const linkRemoveDrain = 50 * time.Millisecond

// linkChanges is a worker's part that takes link changes.
type linkChanges struct {
	pending atomic.Bool // reqs is not empty
	mu      sync.Mutex
	running bool // run's loop takes requests; else the caller applies them
	reqs    []*linkReq
	// live is the set of links the worker may send to (a Handler's
	// verdicts naming another are dropped, handler_drops).
	live LinkSet
}

// linkReq is one change for a worker: adopt link's ports (add), or stop
// using them (drop), or give back the frames the dropped link's closed
// sockets held (release).
type linkReq struct {
	kind  int
	link  int
	ports []*port // add: the link's ports this worker reads
	lane  *lane   // add: its TX lane on the link
	addrs []uint64
	done  chan struct{}
	// drop's results: the frames the kernel still held on the link's
	// sockets (rx: umem.KernelRX, tx: umem.KernelTX), and TX descriptors
	// neither completed nor on the ring (stranded).
	rx, tx   []uint64
	stranded int
}

const (
	reqAdd = iota
	reqDrop
	reqRelease
)

// submit has w carry out r: at its next round boundary if it runs, here
// and now if it does not.
func (w *worker) submit(r *linkReq) {
	c := &w.chg
	c.mu.Lock()
	if !c.running {
		w.apply(r)
		c.mu.Unlock()
		return
	}
	r.done = make(chan struct{})
	c.reqs = append(c.reqs, r)
	c.pending.Store(true)
	c.mu.Unlock()
	w.wake.wake()
	<-r.done
}

// takeChanges carries out the queued requests; the worker's loop calls it
// at a round boundary when pending is set.
func (w *worker) takeChanges() {
	c := &w.chg
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reqs {
		w.apply(r)
		close(r.done)
	}
	c.reqs = c.reqs[:0]
	c.pending.Store(false)
}

// setRunning records whether run's loop takes requests; when it stops,
// what is queued is carried out at once.
func (w *worker) setRunning(on bool) {
	c := &w.chg
	c.mu.Lock()
	c.running = on
	c.mu.Unlock()
	if !on && c.pending.Load() {
		w.takeChanges()
	}
}

func (w *worker) apply(r *linkReq) {
	switch r.kind {
	case reqAdd:
		w.adopt(r)
	case reqDrop:
		w.dropLink(r)
	case reqRelease:
		w.releaseLent(r.rx, r.tx)
	}
}

// adopt makes the worker read r's ports and send on its lane; their fill
// rings go full before the caller points the program at them.
func (w *worker) adopt(r *linkReq) {
	for len(w.tx) <= r.link {
		w.tx = append(w.tx, nil)
	}
	w.tx[r.link] = r.lane
	for _, p := range r.ports {
		w.add(p, w)
		if p.tx != nil {
			w.own = append(w.own, p.tx)
		}
		p.rx.Refill(w.batch)
	}
	w.frames.Publish()
	w.chg.live = w.chg.live.Add(r.link)
	w.txAll = append(w.txAll, r.lane)
	w.pollSet()
}

// dropLink stops the worker using link r.link: nothing more is sent to it,
// what its RX rings hold is forwarded, what its TX rings hold is given
// time to complete, and the frames the kernel still holds on its sockets
// are listed (r.rx, r.tx) for the caller, who closes the sockets and then
// has them released. The caller unregistered the sockets first.
func (w *worker) dropLink(r *linkReq) {
	w.chg.live &^= LinkSet(0).Add(r.link)
	var ports []*port
	for _, p := range w.rx {
		if p.link == r.link {
			ports = append(ports, p)
		}
	}
	// What arrived before the program let go of the sockets is forwarded.
	for range maxBatches {
		n := 0
		for _, p := range ports {
			n += w.forward(p)
		}
		if n == 0 {
			break
		}
	}
	var lanes []*lane
	for _, l := range w.own {
		if l.link == r.link {
			lanes = append(lanes, l)
		}
	}
	deadline := time.Now().Add(linkRemoveDrain)
	for {
		var inFlight uint64
		for _, l := range lanes {
			w.reap(l)
			inFlight += l.inFlight()
		}
		if inFlight == 0 || time.Now().After(deadline) {
			break
		}
		for _, l := range lanes {
			l.kick()
		}
		time.Sleep(100 * time.Microsecond)
	}
	for _, l := range lanes {
		unsent := len(r.tx)
		r.tx = l.unsent(r.tx)
		// Taken by the kernel, never completed: lost with the socket.
		r.stranded += int(l.inFlight()) - (len(r.tx) - unsent)
	}
	for _, p := range ports {
		r.rx = p.rx.Lent(r.rx)
	}
	w.rx = removeLinkOf(w.rx, r.link, func(p *port) int { return p.link })
	w.own = removeLinkOf(w.own, r.link, func(l *lane) int { return l.link })
	if r.link < len(w.tx) {
		w.tx[r.link] = nil
	}
	w.txAll = removeLinkOf(w.txAll, r.link, func(l *lane) int { return l.link })
	w.reapAll()
	w.frames.Publish()
	w.build.Publish()
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

// pollSet rebuilds what poll(2) waits on: the RX sockets, then the
// waker's eventfd.
func (w *worker) pollSet() {
	w.pfds = w.pfds[:0]
	w.memRX = false
	for _, p := range w.rx {
		w.pfds = append(w.pfds, unix.PollFd{Fd: int32(p.sock.FD()), Events: unix.POLLIN})
		w.memRX = w.memRX || p.sock.FD() < 0
	}
	w.pfds = append(w.pfds, unix.PollFd{Fd: int32(w.wake.fd), Events: unix.POLLIN})
}

// changeable says why links cannot be added or removed now, if so.
func (f *Forwarder) changeable(op, name string) error {
	switch {
	case f.handler == nil:
		return &InputError{fmt.Errorf("link %s %s: without a Handler (xconnect) the links are the two given: %w", op, name, linkop.ErrUnsupported)}
	case f.cfg.Queues > 1:
		// The ordering across RX queues (merge.go) builds its handoff
		// rings per link at start.
		return fmt.Errorf("link %s %s: with %d workers the links are fixed at start (one worker, --queues 1, takes links while running): %w", op, name, f.cfg.Queues, linkop.ErrUnsupported)
	case len(f.socks) == 0 || len(f.socks[0]) == 0 || f.socks[0][0] == nil:
		return fmt.Errorf("link %s %s: the forwarder has no sockets: %w", op, name, linkop.ErrUnsupported)
	case f.socks[0][0].ZeroCopy():
		// In zero-copy mode a driver holds frames the rings do not show,
		// which closing one socket would lose.
		return fmt.Errorf("link %s %s: the sockets run in zero-copy mode, where a removed socket's frames cannot be told apart (--zero-copy off takes links while running): %w", op, name, linkop.ErrUnsupported)
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed || f.stop.Load() {
		return fmt.Errorf("link %s %s: the forwarder is stopping: %w", op, name, linkop.ErrUnsupported)
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
// handed to the worker. It takes the lowest free index (a removed link's,
// else the next): Links()[i] == name. Errors wrap linkop.ErrExists (it is
// forwarded already), ErrUnknownLink and linkop.ErrNoSuchLink (there is
// no such link) or linkop.ErrUnsupported (xconnect, several workers,
// zero-copy); MaxLinks reached is an InputError.
func (f *Forwarder) AddLink(name string) error {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	if err := f.changeable("add", name); err != nil {
		return err
	}
	if f.indexOf(name) >= 0 {
		return fmt.Errorf("link add %s: %w", name, linkop.ErrExists)
	}
	i := f.indexOf("")
	if i < 0 {
		i = len(f.links)
	}
	if i >= f.cfg.MaxLinks {
		return inputErr("link add %s: the forwarder holds %d links at most, all taken (--max-links)", name, f.cfg.MaxLinks)
	}
	found, err := lookupLinks(f.env, []string{name})
	if err != nil {
		if errors.Is(err, ErrUnknownLink) {
			return fmt.Errorf("link add %s: %w (%w)", name, err, linkop.ErrNoSuchLink)
		}
		return fmt.Errorf("link add %s: %w", name, err)
	}
	l := found[0]
	if l.rxQueues < f.cfg.Queues || l.txQueues < f.cfg.Queues {
		return inputErr("link add %s: %d RX and %d TX queues, fewer than the %d workers", name, l.rxQueues, l.txQueues, f.cfg.Queues)
	}
	if l.mtu+maxFrameOverhead > f.cfg.FrameSize && !f.cfg.MultiBuffer {
		return inputErr("link add %s: MTU %d does not fit a %d-byte frame (restart with a larger --frame-size or --multi-buffer)", name, l.mtu, f.cfg.FrameSize)
	}

	// The new link's entries, built under the readers' lock: a reader
	// sees the link without ports (zero counts) until the worker has them.
	f.statsMu.Lock()
	locked := true
	defer func() {
		if locked {
			f.statsMu.Unlock()
		}
	}()
	for len(f.links) <= i {
		f.links = append(f.links, linkInfo{})
		f.socks = append(f.socks, nil)
		f.ports = append(f.ports, nil)
		f.progs = append(f.progs, nil)
		f.health = append(f.health, linkHealth{})
		if f.cfg.Promiscuous {
			f.promisc = append(f.promisc, nil)
		}
	}
	f.links[i] = l
	undo := func() {
		for _, s := range f.socks[i] {
			if s != nil {
				s.Close()
			}
		}
		if f.progs[i] != nil {
			f.progs[i].Close()
		}
		if f.cfg.Promiscuous && f.promisc[i] != nil {
			f.promisc[i].Close()
		}
		f.links[i], f.socks[i], f.ports[i], f.progs[i] = linkInfo{}, nil, nil, nil
		if f.cfg.Promiscuous {
			f.promisc[i] = nil
		}
	}
	if err := f.attach(i); err != nil {
		undo()
		return fmt.Errorf("link add %s: %w", name, err)
	}
	if err := f.openLink(i, xsk.ZeroCopyOff, f.cfg.AddedRingSize); err != nil {
		undo()
		if errors.Is(err, xsk.ErrZeroCopyUnsupported) {
			err = &InputError{err}
		}
		return fmt.Errorf("link add %s: %w", name, err)
	}
	if f.cfg.Promiscuous {
		m, err := f.env.Promiscuous(l.info())
		if err != nil {
			undo()
			return fmt.Errorf("link add %s: %w", name, err)
		}
		f.promisc[i] = m
	}
	ports := f.newPorts(i)
	f.statsMu.Unlock()
	locked = false
	if o, ok := f.handler.(LinkObserver); ok {
		o.LinkAdded(i)
	}
	w := f.workers[0] // one worker (changeable)
	for _, p := range ports {
		f.env.Notify(p.sock, w.wake.wake)
	}
	w.submit(&linkReq{kind: reqAdd, link: i, ports: ports, lane: ports[0].tx})
	f.statsMu.Lock()
	f.ports[i] = ports
	f.statsMu.Unlock()
	f.capture.SetLinks(f.Links())
	if err := f.register(i); err != nil {
		f.removeLink(i, false)
		return fmt.Errorf("link add %s: %w", name, err)
	}
	f.progs[i].Commit()
	f.watchChanged()
	f.cfg.Logger.Info("link added", "link", name, "index", i, "rx_queues", l.rxQueues, "xdp_mode", f.progs[i].Mode())
	return nil
}

// RemoveLink detaches link name while the forwarder runs (or before Run):
// its program stops redirecting, the worker forwards what its RX rings
// hold and stops using it, its sockets close and every frame they held
// comes back; the Handler hears of it (LinkObserver: the switch forgets
// its addresses); its totals stay in the Summary, and its index is free
// for a later AddLink. Link 0 holds the UMEM registration and stays.
// Errors wrap ErrUnknownLink and linkop.ErrUnknownLink (it is not
// forwarded) or linkop.ErrUnsupported.
func (f *Forwarder) RemoveLink(name string) error {
	f.linkMu.Lock()
	defer f.linkMu.Unlock()
	if err := f.changeable("del", name); err != nil {
		return err
	}
	i := f.indexOf(name)
	if i < 0 || name == "" {
		return fmt.Errorf("link del %s: %w %q (%w)", name, ErrUnknownLink, name, linkop.ErrUnknownLink)
	}
	if i == 0 {
		return fmt.Errorf("link del %s: the first link's socket registered the UMEM, which every other socket shares: %w", name, linkop.ErrUnsupported)
	}
	f.removeLink(i, false)
	f.watchChanged()
	f.cfg.Logger.Info("link removed", "link", name, "index", i)
	return nil
}

// removeLink takes link i out: RemoveLink's, and the monitor's for a link
// the kernel deleted (gone: its sockets are unbound already). linkMu is
// held.
func (f *Forwarder) removeLink(i int, gone bool) {
	for q := range f.socks[i] {
		f.progs[i].Unregister(q)
	}
	w := f.workers[0]
	drop := &linkReq{kind: reqDrop, link: i}
	w.submit(drop)
	// Its totals, read while its sockets are open, go to the summary.
	name := f.links[i].name
	st := f.LinkStats(i)
	f.statsMu.Lock()
	if prev, ok := f.removed[name]; ok {
		prev.add(st)
		st = prev
	}
	if f.removed == nil {
		f.removed = map[string]LinkStats{}
	}
	f.removed[name] = st
	socks, prog := f.socks[i], f.progs[i]
	f.links[i], f.socks[i], f.ports[i], f.progs[i] = linkInfo{}, nil, nil, nil
	f.health[i].downs.Store(0)
	f.health[i].downNS.Store(0)
	f.health[i].downAt.Store(0)
	var prom io.Closer
	if f.cfg.Promiscuous && i < len(f.promisc) {
		prom, f.promisc[i] = f.promisc[i], nil
	}
	f.strandedRemoved += drop.stranded
	f.statsMu.Unlock()
	f.capture.SetLinks(f.Links())
	// Sharing sockets, so the owner (link 0) is never among them.
	for q := len(socks) - 1; q >= 0; q-- {
		socks[q].Close()
	}
	prog.Close()
	if prom != nil {
		prom.Close()
	}
	w.submit(&linkReq{kind: reqRelease, link: i, rx: drop.rx, tx: drop.tx})
	if o, ok := f.handler.(LinkObserver); ok {
		o.LinkRemoved(i)
	}
}

// RemovedLinks is the totals of the links removed while running, by name
// (a name removed twice: both summed); the Summary lists them with the
// others.
func (f *Forwarder) RemovedLinks() map[string]LinkStats {
	f.statsMu.RLock()
	defer f.statsMu.RUnlock()
	out := make(map[string]LinkStats, len(f.removed))
	for k, v := range f.removed {
		out[k] = v
	}
	return out
}

// watchChanged has the monitor follow the links as they are now.
func (f *Forwarder) watchChanged() {
	select {
	case f.rewatch <- struct{}{}:
	default:
	}
}
