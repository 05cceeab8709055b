package fwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Forwarder forwards between links: two cross-connected, or 1 to MaxLinks
// with a Handler. Build it with New, run it with Run, release it with
// Close.
//
// Every RX queue of every link has a socket, whatever the worker count:
// a packet the XDP program cannot redirect goes to the kernel's stack,
// unseen. Worker w reads RX queues w, w+W, w+2W, … of each link and
// transmits on queue w of each, so the TX queues flows are spread over are
// the first W.
type Forwarder struct {
	// plan is the Plan New resolved the Config into, host and startLinks
	// what it was resolved against (links changes with AddLink and
	// RemoveLink), for Reconfigure. Nothing writes them after New.
	plan       Plan
	host       hostFacts
	startLinks []linkInfo

	// The datapath New built. env provides the links, programs and
	// sockets (Config.Env); clock is its Now, the clock of the arrival
	// stamps. Once running, the per-link slices (links, socks, ports,
	// progs, health, promisc) are written with linkOps.mu held and
	// teardown.mu held exclusively (links.go), and workers learn of the
	// change at a round's boundary.
	env   Env
	clock func() int64
	links []linkInfo
	// doms are the UMEMs (domain.go), by index: links[i].dom.
	doms    []*domain
	progs   []Program
	socks   [][]*xsk.Socket // [link][queue]; nil for a removed link
	ports   [][]*port       // [link][queue], as socks
	workers []*worker
	policy  linearize.Policy
	flows   *flowState // nil with one queue
	// handoffSize is the entries of each handoff ring (merge.go);
	// handoffBytes what all the rings' entries take.
	handoffSize, handoffBytes int
	health                    []linkHealth
	// handler decides each packet's way (nil: cross-connect two links).
	handler Handler
	// capture is where xdpfwd capture's sessions tap the workers.
	capture *capture.Hub
	// promisc holds each link's promiscuous membership (Config.Promisc),
	// nil when off: released by Close, or by the kernel when the process
	// dies.
	promisc []io.Closer

	// live are the settings Reconfigure changes while running, atomics
	// any goroutine loads: inlineMax, the inline limit (SetInlineMax),
	// which workers copy into their policy once per batch; xpsMode, the
	// XPS mode (SetXPS), also with one queue, where there is no table to
	// hold it.
	live struct {
		inlineMax atomic.Int32
		xpsMode   atomic.Uint32
	}

	// linkOps: mu serialises AddLink, RemoveLink and the monitor's
	// handling of a link event (links.go), and guards the rest: removed,
	// the totals of the links removed; stranded, the TX descriptors their
	// sockets took with them; rewatch, which tells the monitor the links
	// changed; vanished, the links the kernel deleted, or that could not
	// be added back on their new queues, until added again (Vanished,
	// LinksOut).
	linkOps struct {
		mu       sync.Mutex
		removed  removedTotals
		stranded int
		rewatch  chan struct{}
		vanished map[string]string // name → why it is out
	}

	stop atomic.Bool
	// handover: freeze holds the workers parked between Freeze and Thaw
	// or Abdicate (handover.go), under linkOps.mu; handedOver is set, and
	// abdicated closed, once a successor took over; inheritedWaiting is
	// the frames on the RX rings Inherit took (written by Inherit before
	// Run).
	handover struct {
		freeze           *frozen
		handedOver       atomic.Bool
		abdicated        chan struct{}
		inheritedWaiting uint64
	}

	// life: Run writes started and stopped, before and after the
	// workers; Close writes the rest under mu, which Summary holds to
	// read them.
	life struct {
		mu               sync.Mutex
		started, stopped time.Time
		closed           bool
		closeErr         error
		leaked, stranded int
		violations       uint64
	}
	// teardown lets stats readers (a metrics scrape) run alongside
	// Close: readers hold mu shared, Close holds it while it tears down
	// and sets torn once the sockets are closed.
	teardown struct {
		mu   sync.RWMutex
		torn bool
	}
}

// New validates cfg, resolves it against the links into a Plan, then maps
// the UMEM, attaches the XDP programs and binds the sockets. On any error
// everything built so far is released.
func New(config Config) (*Forwarder, error) { return build(config, nil) }

// build is New, or with from Adopt: the UMEM, programs and sockets taken
// over from the predecessor that from describes instead of made. Its
// stages: the plan, the kernel objects, the workers, then the links go
// live.
func build(config Config, from *adoption) (_ *Forwarder, err error) {
	f, err := planned(config, from)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if from != nil {
		err = from.build(f)
	} else {
		err = f.make()
	}
	if err != nil {
		return nil, err
	}
	if err := f.startWorkers(from == nil); err != nil {
		return nil, err
	}
	if err := f.goLive(from); err != nil {
		return nil, err
	}
	f.warnVLANLoss()
	f.logReady(from != nil)
	return f, nil
}

// planned is a Forwarder with its plan and nothing built: the Config
// checked alone first (a bad setting is refused before the links are
// looked up, which --wait-for-links would wait for in vain), then
// resolved against the links (the predecessor's, holes included, with
// from) and the plan's decisions logged.
func planned(config Config, from *adoption) (*Forwarder, error) {
	host := hostFacts{cpus: allowedCPUs()}
	if err := config.check(host); err != nil {
		return nil, err
	}
	env, clock := config.Env, monoNow
	if env == nil {
		env = kernel{}
	} else {
		clock = env.Now
	}
	if err := env.CheckCapabilities(); err != nil {
		return nil, err
	}
	links, err := lookupLinks(env, config.Links)
	if err != nil {
		return nil, err
	}
	cfg, err := plan(config, links, host)
	if err != nil {
		return nil, err
	}
	given := links
	if from != nil {
		// The predecessor's links, holes included: those added while
		// it ran too, at the indices it gave them.
		if links, err = from.links(env, &cfg); err != nil {
			return nil, err
		}
	}
	for _, d := range cfg.Decisions {
		cfg.Logger.Log(context.Background(), d.Level, d.Msg, "reason", d.Reason)
	}
	n := len(links)
	f := &Forwarder{plan: cfg, env: env, clock: clock, links: links, startLinks: slices.Clone(given), host: host, handler: cfg.Handler,
		progs: make([]Program, n), socks: make([][]*xsk.Socket, n),
		ports: make([][]*port, n), health: make([]linkHealth, n),
		handoffSize: cfg.HandoffSize,
		policy:      linearize.Policy{InlineMax: cfg.inlineBytes(), MaxTxFrags: cfg.MaxTxFrags, ChunkSize: cfg.FrameSize},
	}
	f.linkOps.rewatch = make(chan struct{}, 1)
	f.handover.abdicated = make(chan struct{})
	f.live.inlineMax.Store(int32(cfg.inlineBytes()))
	f.live.xpsMode.Store(uint32(cfg.XPS))
	return f, nil
}

// startWorkers gives every socket its port and every queue its worker,
// each tapped by the capture hub, and with several queues the flow table
// and the ordering between them. With fill, the fill rings go full now,
// before the programs point at the sockets, so the first packet after
// "ready" finds a frame to land in (adopted ones are topped up by Run's
// first round, once the predecessor let go of them).
func (f *Forwarder) startWorkers(fill bool) error {
	cfg := &f.plan
	if cfg.Queues > 1 {
		f.flows = newFlowState(f.regions(), cfg.XPS, cfg.FlowTableSize, !cfg.XPSAsymmetric, cfg.Queues)
	}
	for i := range f.socks {
		f.ports[i] = f.newPorts(i)
	}
	f.capture = capture.NewHub(cfg.Queues, f.Links())
	for q := range cfg.Queues {
		w, err := newWorker(f, q)
		if err != nil {
			return err
		}
		w.tap.point = f.capture.Point(q)
		f.workers = append(f.workers, w)
		if fill {
			refill(w.rx.ports, w.rx.batch)
		}
		for _, p := range w.rx.ports {
			f.env.Notify(p.sock, w.wake.wake)
		}
	}
	if f.flows != nil {
		for _, w := range f.workers {
			w.flows.table = f.flows
		}
		setupOrdering(f, f.handoffSize)
	}
	return nil
}

// goLive makes the links promiscuous if the plan says (before the sockets
// are registered, so that the first frames for other MACs are not left at
// the NIC), then points every program at its sockets and commits it (a
// replaced foreign program stays replaced from here on); an adopted
// forwarder's programs point at them already, and its Handler hears of its
// links.
func (f *Forwarder) goLive(from *adoption) error {
	if f.plan.Promiscuous {
		for _, l := range f.links {
			var m io.Closer
			if l.name != "" {
				var err error
				if m, err = f.env.Promiscuous(l.info()); err != nil {
					return err
				}
			}
			f.promisc = append(f.promisc, m)
		}
	}
	if from != nil {
		from.observe(f)
		return nil
	}
	for i := range f.links {
		if err := f.register(i); err != nil {
			return err
		}
	}
	for _, p := range f.progs {
		p.Commit()
	}
	return nil
}

// make maps the UMEM, attaches the programs and binds the sockets: New's.
func (f *Forwarder) make() error {
	if err := f.mapDomains(); err != nil {
		return err
	}
	for i := range f.links {
		f.links[i].dom = f.plan.domainOf(f.links[i].name)
	}
	// Programs first: a link that is not ours to take is refused before
	// any socket is bound to it.
	for i := range f.links {
		if err := f.attach(i); err != nil {
			return err
		}
	}
	for d := range f.doms {
		if err := f.openDomain(d); err != nil {
			if errors.Is(err, xsk.ErrZeroCopyUnsupported) {
				return &InputError{err}
			}
			return err
		}
	}
	return nil
}

// logReady logs what the forwarder runs on, built or adopted.
func (f *Forwarder) logReady(adopted bool) {
	cfg := &f.plan
	var rxq []int
	var modes []string
	bind := ""
	for i, l := range f.links {
		if l.name == "" {
			continue
		}
		rxq, modes = append(rxq, l.rxQueues), append(modes, f.progs[i].Mode())
		switch b := f.socks[i][0].BindMode(); bind {
		case "":
			bind = b
		case b, "mixed":
		default:
			bind = "mixed" // zero-copy NICs, copy-mode veths: umem_domains says which
		}
	}
	doms := make([]string, len(f.doms))
	for d, dm := range f.doms {
		doms[d] = fmt.Sprintf("%s: %s", dm, strings.Join(dm.Links, ","))
	}
	warnBusyShare(cfg)
	msg := "forwarder ready"
	if adopted {
		msg = "forwarder adopted: ready to take over"
	}
	cfg.Logger.Info(msg,
		"links", f.Links(), "workers", cfg.Queues, "spin", spinString(cfg.Spin),
		"rx_queues", rxq, "ring_size", cfg.RingSize, "xdp_mode", modes,
		"bind_mode", bind, "promiscuous", cfg.Promiscuous,
		"umem_backing", f.doms[0].region.Backing(), "umem_bytes", f.umemBytes(), "umem_domains", doms,
		"max_links", cfg.MaxLinks, "added_ring_size", cfg.AddedRingSize, "umem_reserved_bytes", cfg.UMEMReserved)
}

// mapDomains maps the plan's UMEMs, back to back in one mapping.
func (f *Forwarder) mapDomains() error {
	cfgs := make([]umem.Config, len(f.plan.Domains))
	for d, dm := range f.plan.Domains {
		cfgs[d] = dm.UMEM
	}
	regions, err := umem.NewSpace(cfgs...)
	if err != nil {
		return err
	}
	for d, dm := range f.plan.Domains {
		f.doms = append(f.doms, &domain{Domain: dm, region: regions[d]})
	}
	return nil
}

// openDomain binds the sockets of domain d's links. With zero-copy auto,
// when the first got zero-copy and one sharing it could not follow
// (shared sockets inherit the owner's mode), all of them bind in copy
// mode instead.
func (f *Forwarder) openDomain(d int) error {
	zc := f.doms[d].ZeroCopy
	err := f.openLinksOf(d, zc)
	if owner := f.umemOwner(d); err != nil && zc == xsk.ZeroCopyAuto && owner != nil && owner.ZeroCopy() {
		f.closeLinksOf(d)
		err = f.openLinksOf(d, xsk.ZeroCopyOff)
	}
	if owner := f.umemOwner(d); err == nil && owner != nil {
		f.doms[d].zeroCopy = owner.ZeroCopy()
	}
	return err
}

func (f *Forwarder) openLinksOf(d int, zc xsk.ZeroCopy) error {
	for i, l := range f.links {
		if l.dom == d {
			if err := f.openLink(i, zc, f.plan.RingSize); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Forwarder) closeLinksOf(d int) {
	for i := len(f.links) - 1; i >= 0; i-- {
		if f.links[i].dom == d {
			f.closeLink(i)
		}
	}
}

// regions are the domains' UMEMs, by domain.
func (f *Forwarder) regions() []*umem.Region {
	out := make([]*umem.Region, len(f.doms))
	for d, dm := range f.doms {
		out[d] = dm.region
	}
	return out
}

// umemBytes is what every domain's UMEM maps together.
func (f *Forwarder) umemBytes() int {
	n := 0
	for _, dm := range f.doms {
		n += dm.region.Size()
	}
	return n
}

// openLink binds a socket on every RX queue of link i (New, AddLink), its
// rings of ring entries: the first socket of its domain registers the
// domain's UMEM, the others share it.
func (f *Forwarder) openLink(i int, zc xsk.ZeroCopy, ring uint32) error {
	l := f.links[i]
	owner := f.umemOwner(l.dom)
	region := f.doms[l.dom].region
	f.socks[i] = make([]*xsk.Socket, l.rxQueues)
	for q := range l.rxQueues {
		r := f.plan.socketRings(ring, q, f.plan.copyBound(l, zc))
		s, err := f.env.Open(region, xsk.Config{
			Ifname: l.name, Ifindex: l.index, Queue: q,
			RingSize: r.tx, RXSize: r.rx, FillSize: r.fill,
			Shared: owner, ZeroCopy: zc, SG: f.plan.MultiBuffer,
			BusyPoll: f.plan.BusyPoll, BusyPollBudget: f.plan.Batch,
		})
		if err != nil {
			return err
		}
		f.socks[i][q] = s
		if owner == nil {
			owner = s
		}
	}
	return nil
}

// umemOwner is a socket bound to domain d's UMEM, for another to share
// it: the first of the domain's first link there is (nil before any). Any
// will do: the kernel keeps the UMEM for each socket bound to it, the one
// that registered it or not.
func (f *Forwarder) umemOwner(d int) *xsk.Socket {
	for i, ss := range f.socks {
		if f.links[i].dom == d && f.links[i].name != "" && len(ss) > 0 && ss[0] != nil {
			return ss[0]
		}
	}
	return nil
}

// attach puts the program on link i (New, AddLink). It stamps arrivals
// only where they are read: by the merge, which orders flows when there
// are several workers, and by a Handler (Packet.Arrival).
func (f *Forwarder) attach(i int) error {
	l := f.links[i]
	info := l.info()
	p, err := f.env.Attach(info, xsk.AttachConfig{Queues: info.RXQueues, Mode: f.plan.XDPMode, Force: f.plan.Force,
		NoStamps: f.plan.Queues == 1 && f.handler == nil})
	if err != nil {
		if errors.Is(err, xsk.ErrForeignProgram) {
			return &InputError{err}
		}
		return err
	}
	f.progs[i] = p
	if err := p.NativeRefused(); err != nil {
		f.plan.Logger.Warn("XDP native mode refused, generic mode instead", "link", l.name, "reason", err)
	}
	return nil
}

// newPorts makes the ports of link i's sockets (New, AddLink).
func (f *Forwarder) newPorts(i int) []*port {
	var ports []*port
	for q, sk := range f.socks[i] {
		// What it lends is the plan's for its ring size (its TX ring's)
		// in the mode it bound in.
		r := f.plan.socketRings(sk.TX.Size(), q, !sk.ZeroCopy())
		p := &port{link: i, dom: f.links[i].dom, queue: q, sock: sk, csum: f.plan.completesChecksums(f.links[i]),
			lend: r.lend, brace: r.brace}
		if f.progs[i].Mode() == "native" {
			// One CPU at a time runs a queue's NAPI, so the queue's
			// newest stamp only grows (merge.go's caughtUp relies on
			// it); generic XDP may run one queue on several CPUs.
			p.stamps = f.progs[i].LastStamps()
		}
		// TX lanes; with a Handler every socket, which may reflect.
		if q < f.plan.Queues || f.handler != nil {
			p.tx = newLane(p)
		}
		ports = append(ports, p)
	}
	return ports
}

// register points link i's queues at its sockets (New, AddLink).
func (f *Forwarder) register(i int) error {
	for q, s := range f.socks[i] {
		if err := f.progs[i].Register(q, s); err != nil {
			return err
		}
	}
	return nil
}

func (f *Forwarder) closeSockets() error {
	var errs []error
	// Sharing sockets first: the owner holds the UMEM registration.
	for i := len(f.links) - 1; i >= 0; i-- {
		errs = append(errs, f.closeLink(i))
	}
	return errors.Join(errs...)
}

// closeLink closes link i's sockets, the last first.
func (f *Forwarder) closeLink(i int) error {
	var errs []error
	for q := len(f.socks[i]) - 1; q >= 0; q-- {
		if s := f.socks[i][q]; s != nil {
			errs = append(errs, s.Close())
		}
	}
	f.socks[i] = nil
	return errors.Join(errs...)
}

// Run forwards until ctx is done, then stops receiving, waits (briefly) for
// what is in flight to complete, and returns.
//
// Run gives the Go runtime a P more than the forwarder has workers, unless
// GOMAXPROCS is set in the environment (see spareProc).
func (f *Forwarder) Run(ctx context.Context) error {
	f.life.started = time.Now()
	spareProc(len(f.workers))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, w := range f.workers {
		wg.Go(func() { w.run(&f.stop) })
	}
	wg.Go(func() { f.monitor(ctx, cancel) })
	select {
	case <-ctx.Done():
	case <-f.handover.abdicated: // a successor forwards now (handover.go)
	}
	f.Stop()
	cancel(nil)
	wg.Wait()
	if f.HandedOver() {
		f.life.stopped = time.Now()
		return nil
	}
	// The captures go on until Close: what finish sends, and what Close
	// drops at stop, is theirs to see. A link change under way ends
	// first: it may be the workers' hands (links.go).
	f.linkOps.mu.Lock()
	f.finish()
	f.linkOps.mu.Unlock()
	f.life.stopped = time.Now()
	if err := context.Cause(ctx); errors.Is(err, ErrLinkGone) || errors.Is(err, ErrQueuesChanged) {
		return err
	}
	return nil
}

// finish runs once every worker has stopped: packets one worker handed to
// another after that one had drained are sent now.
func (f *Forwarder) finish() {
	for _, w := range f.workers {
		if w.flows.order != nil && w.flows.order.pending() {
			w.drain()
		}
	}
}

// Stop asks the workers to drain and return; Run returns once they have.
func (f *Forwarder) Stop() {
	// Detaching the programs first stops new packets from arriving while
	// the workers finish what is already in their rings. The read lock:
	// AddLink may be growing the slices.
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	for i, p := range f.progs {
		if p != nil && !f.HandedOver() { // a successor's sockets now
			for q := range f.socks[i] {
				p.Unregister(q)
			}
		}
	}
	f.stop.Store(true)
	// A sleeping worker would see the flag only at its poll timeout.
	for _, w := range f.workers {
		w.wake.wake()
	}
}

// Close detaches the programs, closes the sockets, reclaims what the kernel
// held and unmaps the UMEM. Call it after Run has returned. It counts as
// leaked every address that was neither free nor legitimately in the
// kernel's fill/RX side when the sockets closed.
func (f *Forwarder) Close() error {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	if f.life.closed {
		return f.life.closeErr
	}
	f.life.closed = true
	if f.capture != nil {
		why := capture.ErrClosed
		if f.HandedOver() {
			why = capture.ErrHandedOver
		}
		defer f.capture.End(why) // after the drops at stop: the captures see them
	}
	f.teardown.mu.Lock()
	defer f.teardown.mu.Unlock()
	var errs []error
	for i, p := range f.progs {
		if p != nil {
			errs = append(errs, p.Close())
			f.progs[i] = nil
		}
	}
	for _, m := range f.promisc {
		if m != nil { // nil: a removed link's (links.go)
			errs = append(errs, m.Close())
		}
	}
	f.promisc = nil
	// Descriptors still on a TX ring (a link down or deleted: the kernel
	// never completed them) are released by closing the sockets.
	inflight := f.linkOps.stranded
	for _, w := range f.workers {
		inflight += int(w.lanes.inFlight())
	}
	errs = append(errs, f.closeSockets())
	f.teardown.torn = true
	if f.HandedOver() {
		// The successor took every unit where it was: nothing here is
		// this process's to count or give back.
		for _, w := range f.workers {
			errs = append(errs, w.wake.close(), w.waits.close())
		}
		for _, dm := range f.doms {
			errs = append(errs, dm.region.Close())
		}
	} else if len(f.doms) > 0 {
		for _, w := range f.workers {
			w.dropHandoffs()
		}
		for _, w := range f.workers {
			for _, d := range w.umems.dom {
				d.build.Close()
				d.frames.Flush()
			}
			errs = append(errs, w.wake.close(), w.waits.close())
		}
		// Closing the sockets made the kernel let go of its fill, RX, TX
		// and completion rings. Whatever the TX side still held beyond
		// the descriptors known to be in flight was lost on our side; a
		// frame still Held was lost by a worker.
		var tx []int
		for _, dm := range f.doms {
			r := dm.region
			r.Frames.Reclaim(umem.KernelRX)
			tx = append(tx, r.Frames.Reclaim(umem.KernelTX)+r.Inline.Reclaim(umem.KernelTX)+r.Frags.ReclaimReferenced())
		}
		for d, dm := range f.doms {
			// What is in flight is counted for all domains at once: it
			// is taken off the first domains' TX first.
			dm.stranded = min(tx[d], inflight)
			inflight -= dm.stranded
			dm.leaked = dm.region.InUse() + tx[d] - dm.stranded
			f.life.stranded += dm.stranded
			f.life.leaked += dm.leaked
			for _, z := range dm.region.Zones() {
				f.life.violations += z.Violations()
			}
			if err := dm.region.Check(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", dm, err))
			}
			errs = append(errs, dm.region.Close())
		}
	}
	f.life.closeErr = errors.Join(errs...)
	if f.life.closeErr != nil {
		f.life.closeErr = fmt.Errorf("forwarder close: %w", f.life.closeErr)
	}
	return f.life.closeErr
}

// Region is the UMEM of the domain links added while running join, the
// only one with one domain, for tests and stats (nil once Close began to
// build it).
func (f *Forwarder) Region() *umem.Region {
	if len(f.doms) == 0 {
		return nil
	}
	return f.doms[len(f.doms)-1].region
}

// Regions are every domain's UMEM, by domain.
func (f *Forwarder) Regions() []*umem.Region { return f.regions() }

// Leaked is the number of UMEM addresses lost, valid after Close.
func (f *Forwarder) Leaked() int {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	return f.life.leaked
}

// Queues is the number of workers, and of TX queues per link, in use.
func (f *Forwarder) Queues() int { return f.plan.Queues }

// DefaultQueues is what Config.Queues 0 stands for on a reload, for
// SetQueues: what it resolved to at start (the CPUs the process may use,
// at most the links' queue count), and at most Queues (workers cannot be
// added while running).
func (f *Forwarder) DefaultQueues() int {
	live, _ := f.liveLinks() // not the holes removed links left: they have 0 queues
	return min(defaultQueues(live, f.host), f.plan.Queues)
}

// Plan returns the settings the forwarder runs with, as New resolved its
// Config: a copy, which the caller may keep. What changed live since
// (SetQueues, SetXPS, SetInlineMax) is read with Queues' siblings
// ActiveQueues, XPS and InlineMax.
func (f *Forwarder) Plan() Plan {
	p := f.plan
	p.Links = slices.Clone(p.Links)
	p.LinkQueues = slices.Clone(p.LinkQueues)
	p.CPUs = slices.Clone(p.CPUs)
	p.Decisions = slices.Clone(p.Decisions)
	return p
}

// LinkQueues is the number of RX queues of link i, each with a socket.
func (f *Forwarder) LinkQueues(i int) int {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return len(f.ports[i])
}

// Links returns the link names by index: "" where a removed link left a
// hole (links.go).
func (f *Forwarder) Links() []string {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	names := make([]string, len(f.links))
	for i, l := range f.links {
		names[i] = l.name
	}
	return names
}

// LiveLinks is the number of links forwarded now: those of Links but the
// holes. 0 when every link left (a Handler's forwarder runs on with none,
// and takes links again with AddLink).
func (f *Forwarder) LiveLinks() int {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	n := 0
	for _, l := range f.links {
		if l.name != "" {
			n++
		}
	}
	return n
}

// SetQueues changes, while running, how many TX queues flows are spread
// over (1..the queues started with). In sticky mode a flow leaves a queue
// only when nothing of it is in flight there, so the change reorders
// nothing; the queues beyond n keep draining what they have.
func (f *Forwarder) SetQueues(n int) error {
	if n < 1 || n > f.plan.Queues {
		return inputErr("queues %d: want 1..%d (the queues started with)", n, f.plan.Queues)
	}
	if f.flows == nil {
		return nil
	}
	f.flows.active.Store(int32(n))
	f.flows.table.SetQueues(n)
	return nil
}

// SetXPS changes the queue selection mode while running.
func (f *Forwarder) SetXPS(m xps.Mode) {
	f.live.xpsMode.Store(uint32(m))
	if f.flows != nil {
		f.flows.table.SetMode(m)
	}
}

// SetInlineMax changes the inline limit while running, with the values
// Config.InlineMax takes (0: the default, 256; InlineOff: off); workers
// pick it up at their next batch.
func (f *Forwarder) SetInlineMax(setting int) error {
	n, err := inline.ResolveMax(setting)
	if err != nil {
		return &InputError{err}
	}
	if n > 0 && f.doms[0].region.Inline.Len() == 0 {
		return inputErr("inline limit %d: started with the inline path off, so there is no inline zone; restart to turn it on", n)
	}
	f.live.inlineMax.Store(int32(n))
	return nil
}

// InlineMax returns the inline limit in force, spelled as SetInlineMax
// and Config.InlineMax take it (never 0, the default): the largest packet
// copied whole into an inline slot, 1..256 bytes, or InlineOff, so that
// SetInlineMax(InlineMax()) changes nothing.
func (f *Forwarder) InlineMax() int {
	if n := f.InlineBytes(); n > 0 {
		return n
	}
	return InlineOff
}

// InlineBytes returns the inline limit in force as a byte count, 0 while
// the inline path is off: what the workers' layouts and the
// xdpfwd_inline_max_bytes gauge use.
func (f *Forwarder) InlineBytes() int { return int(f.live.inlineMax.Load()) }

// ActiveQueues is the number of TX queues flows are spread over now:
// Queues, or fewer after SetQueues.
func (f *Forwarder) ActiveQueues() int {
	if f.flows == nil {
		return f.plan.Queues
	}
	return int(f.flows.active.Load())
}

// liveLinks is the links there are, without the holes removed links
// left, and their names.
func (f *Forwarder) liveLinks() ([]linkInfo, []string) {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	var live []linkInfo
	var names []string
	for _, l := range f.links {
		if l.name != "" {
			live = append(live, l)
			names = append(names, l.name)
		}
	}
	return live, names
}

// Stopping reports whether the forwarder has been asked to stop.
func (f *Forwarder) Stopping() bool { return f.stop.Load() }

// warnBusyShare warns when workers that never sleep (SpinBusy) are more
// than the CPUs they may run on: those that share a CPU take turns, a
// scheduler time slice each, and a packet waits out the others' turns.
func warnBusyShare(p *Plan) {
	if p.Spin != SpinBusy {
		return
	}
	cpus := len(slices.Compact(slices.Sorted(slices.Values(p.CPUs))))
	var set unix.CPUSet
	if cpus == 0 && unix.SchedGetaffinity(0, &set) == nil {
		cpus = set.Count()
	}
	if cpus > 0 && p.Queues > cpus {
		p.Logger.Warn("spin busy: more workers than CPUs; workers sharing a CPU take turns, a scheduler time slice each", "workers", p.Queues, "cpus", cpus)
	}
}

// spareProc raises GOMAXPROCS to one more than the workers, unless it was
// set by hand. Each worker holds a P on its locked thread while it polls
// and while it sleeps in ppoll(2); with no P to spare (a process pinned to
// one CPU runs with GOMAXPROCS 1, two workers on two CPUs with 2), every
// other goroutine waits for sysmon to retake a sleeping worker's P — from
// 20 µs to 10 ms, as sysmon backs off — and a worker's P is retaken and
// handed to a thread that wakes for nothing at every longer sleep, two
// context switches each. An idle P avoids both.
func spareProc(workers int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if runtime.GOMAXPROCS(0) <= workers {
		runtime.GOMAXPROCS(workers + 1)
	}
}
