package fwd

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/zcbuf"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Plan is a Config resolved against what the links and the host report:
// every value a Forwarder runs with, each zero value of Config replaced by
// what it stands for. A field named as Config's takes Config's values, off
// spelled the same (InlineOff, FragOff), and never holds a zero that is a
// default there: such a value given back as the Config's resolves to
// itself. resolve builds it from data alone (no netlink, no syscall), so
// the same Config against the same facts always gives the same Plan; New
// builds the forwarder from it, and nothing changes it after. The input
// Config is never written.
//
// Worker w reads RX queues w, w+Queues, w+2·Queues, … of each link and
// transmits on queue w of each (LinkQueues gives each link's RX queues,
// every one with a socket).
type Plan struct {
	Links   []string
	Handler Handler // nil: the two links cross-connected
	Logger  *slog.Logger

	// MaxLinks is how many links the forwarder holds at most (Links and
	// those added while running): Config.MaxLinks, or len(Links) for its
	// 0; never 0.
	MaxLinks int
	// Queues is the number of workers, each with TX queue w on every link.
	Queues int
	// LinkQueues is each link's RX queue count: every queue gets a socket.
	LinkQueues []int
	// RingSize is the entries of each RX and TX ring of the links given;
	// fill and completion rings of a TX lane's socket get twice as many
	// (fillSize). With the ring size auto and MaxLinks above the links
	// given, it is the size they would have alone only as far as the UMEM
	// stays within a sixteenth of what it would be at AddedRingSize
	// (givenRingSize), never below AddedRingSize.
	RingSize uint32
	// BurstRing, if set, is the RX and fill ring size of every socket
	// whose ring size gives it a smaller fill ring, on a link that binds
	// in copy mode: its fill ring lends what the ring size gives (less
	// in a flood: socketRings), more while its link takes bursts
	// (rxring.Ring.SetLend), up to BurstRing,
	// from a reserve of BurstRing frames per worker (umemConfig). Auto
	// ring sizes only (a ring size set is what each socket gets); 0 when
	// no socket's fill ring is smaller.
	BurstRing uint32
	// AddedRingSize is the ring size of a link added while running
	// (AddLink): Config.AddedRingSize when set; auto, the one MaxLinks
	// links would get (never above RingSize), so that each one to come
	// costs what it would at start, and the UMEM of a forwarder that took
	// them is within 10 % of one started with all of them.
	AddedRingSize uint32
	// MaxUMEM is the bound the UMEM was held to (Config.MaxUMEM, resolved).
	MaxUMEM int64
	Batch   int
	// FrameSize and ZeroCopy as package zcbuf fitted them to the drivers:
	// ZeroCopyOff where a driver would cut MTU-sized frames.
	FrameSize int
	ZeroCopy  xsk.ZeroCopy
	XDPMode   xsk.XDPMode
	HugePages umem.HugePages
	Force     bool

	MultiBuffer bool // sockets bound with XDP_USE_SG
	// Checksums says on which links' packets partial TCP/UDP checksums
	// are finished (completesChecksums).
	Checksums   ChecksumMode
	Promiscuous bool // links held promiscuous while running

	// CPUs pins worker q to CPUs[q % len(CPUs)]; empty: not pinned.
	CPUs []int
	// InlineMax is the inline limit at start, as Config.InlineMax spells
	// it, resolved: 1..256 bytes, or InlineOff (the inline path off, and
	// no inline zone in the UMEM); never 0, Config's default (256).
	// inlineBytes is it as a byte count, what the workers and
	// Forwarder.InlineMax hold.
	InlineMax int
	// FragOrder is the frag zone's order, as Config.FragOrder spells it:
	// 3 or 4, or FragOff when the UMEM has none (FragOff asked, or neither
	// multi-buffer nor a Handler to use one); never 0, Config's default
	// (4).
	FragOrder  int
	MaxTxFrags int

	Spin          int // as Config.Spin
	Coalesce      time.Duration
	BusyPoll      time.Duration
	XPS           xps.Mode
	XPSAsymmetric bool
	FlowTableSize int

	// Domains are the UMEMs (domain.go): one, or with zero-copy NIC links
	// and links that cannot bind in zero-copy (veths, every link added
	// while running) two, zero-copy first. UMEM is the layout of the last
	// (its frames, inline slots and frag blocks: umemConfig), the one
	// links added while running join; UMEMReserved is the bytes of it set
	// aside for them (MaxLinks above Links), at AddedRingSize.
	Domains      []Domain
	UMEM         umem.Config
	UMEMReserved int
	// HandoffSize is the entries of each handoff ring; 0 with one worker.
	// AddedHandoffSize is that of the rings to and from a link added
	// while running: the size MaxLinks links would get (never above
	// HandoffSize).
	HandoffSize, AddedHandoffSize int

	// Decisions are the choices resolve made that a user should hear of
	// (New logs them): a frame size raised, zero-copy given up, multi-buffer
	// turned on or off.
	Decisions []Decision
}

// Decision is one choice resolve made, and why.
type Decision struct {
	Level  slog.Level
	Msg    string
	Reason string
}

// hostFacts is what resolve needs of the host: the CPUs the process may
// run on (sched_getaffinity).
type hostFacts struct {
	cpus []int
}

// resolve turns cfg, the links' facts (in cfg.Links' order) and the host's
// into a Plan, or an InputError naming the setting that cannot be met.
// It is the only place a Config is validated.
func resolve(cfg Config, links []linkInfo, host hostFacts) (Plan, error) {
	if err := cfg.check(host); err != nil {
		return Plan{}, err
	}
	return plan(cfg, links, host)
}

// Check validates what cfg alone decides, as New does first: a caller
// learns of a bad setting before it acts on the rest (opens files, waits
// for links). The error is an InputError.
func (c Config) Check() error { return c.check(hostFacts{cpus: allowedCPUs()}) }

// Defaults that Config's zero values stand for.
const (
	defaultBatch      = 64
	defaultFragOrder  = 4
	defaultMaxTxFrags = 4
)

// plan is resolve after check: the link-dependent part.
func plan(cfg Config, links []linkInfo, host hostFacts) (Plan, error) {
	p := Plan{
		Links:         slices.Clone(cfg.Links),
		Handler:       cfg.Handler,
		Logger:        cfg.Logger,
		Queues:        cfg.Queues,
		MaxLinks:      max(cfg.MaxLinks, len(cfg.Links)),
		RingSize:      cfg.RingSize,
		Batch:         cmp0(cfg.Batch, defaultBatch),
		XDPMode:       cfg.XDPMode,
		HugePages:     cfg.HugePages,
		Force:         cfg.Force,
		CPUs:          slices.Clone(cfg.CPUs),
		MaxTxFrags:    cmp0(cfg.MaxTxFrags, defaultMaxTxFrags),
		Spin:          cfg.Spin,
		Coalesce:      cfg.Coalesce,
		BusyPoll:      cfg.BusyPoll,
		XPS:           cfg.XPS,
		XPSAsymmetric: cfg.XPSAsymmetric,
		FlowTableSize: cmp0(cfg.FlowTableSize, xps.DefaultSize),
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Spin < 0 || p.Coalesce < 0 {
		p.Coalesce = 0
	}
	p.InlineMax = cmp0(cfg.InlineMax, umem.InlineSlotSize) // check checked it
	p.FragOrder = cmp0(cfg.FragOrder, defaultFragOrder)    // as asked; the UMEM's below
	if p.FragOrder < 0 {
		p.FragOrder = FragOff
	}
	p.Promiscuous = resolvePromisc(cfg.Promisc, cfg.Handler)
	p.Checksums = cfg.Checksums
	for _, l := range links {
		p.LinkQueues = append(p.LinkQueues, l.rxQueues)
	}
	if p.Queues == 0 {
		p.Queues = defaultQueues(links, host)
	}
	for _, l := range links {
		if p.Queues > l.rxQueues || p.Queues > l.txQueues {
			return Plan{}, inputErr("--queues %d: each worker transmits on a queue of its own, and link %q has %d RX and %d TX queues", p.Queues, l.name, l.rxQueues, l.txQueues)
		}
	}
	if p.RingSize == 0 {
		p.RingSize = autoRingSize(p.Queues, links)
		p.Batch = min(p.Batch, int(p.RingSize))
	}
	p.AddedRingSize = addedRingSize(cfg.AddedRingSize, &p, links)
	if len(p.CPUs) == 0 && !cfg.NoPin && p.Queues > 1 {
		p.CPUs = slices.Clone(host.cpus)
	}
	if err := p.fitDrivers(cfg, links); err != nil {
		return Plan{}, err
	}
	if err := p.resolveMultiBuffer(cfg.MultiBufferMode, links); err != nil {
		return Plan{}, err
	}
	if cfg.RingSize == 0 && p.MaxLinks > len(links) {
		// Weighed on the frame size and frag zone just settled.
		p.RingSize = givenRingSize(&p, links)
	}
	if cfg.RingSize == 0 && fillSizeOf(min(p.RingSize, p.AddedRingSize), p.Queues, 0) < burstRing {
		// Some TX lane's socket would lend fewer than a burst.
		p.BurstRing = burstRing
	}
	p.planDomains(links)
	p.FragOrder = cmp0(p.UMEM.FragOrder, FragOff) // umem's 0 is none
	if err := p.boundUMEM(cfg, links); err != nil {
		return Plan{}, err
	}
	var err error
	if p.HandoffSize, err = handoffRingSize(&p, links); err != nil {
		return Plan{}, err
	}
	p.AddedHandoffSize = addedHandoffSize(&p, links)
	return p, nil
}

// addedRingSize is Plan.AddedRingSize: set, the ring size asked (check
// held it to RingSize); auto, the one MaxLinks links would get at start,
// the links that may be added counting as links of one queue per worker,
// never below a batch nor above the links given's. It never follows a
// RingSize set by hand up: MaxLinks-len(links) links to come at the given
// links' 4096 entries would set aside over a GiB.
func addedRingSize(set uint32, p *Plan, links []linkInfo) uint32 {
	if set != 0 {
		return set
	}
	if p.MaxLinks <= len(links) {
		return p.RingSize // none to come: what a rebuild would give them
	}
	auto := max(autoRingSize(p.Queues, reserveLinks(links, p.MaxLinks, p.Queues)), pow2AtLeast(p.Batch))
	return min(p.RingSize, auto)
}

// boundUMEM refuses a plan whose UMEM is above Config.MaxUMEM, naming how
// much the links given and those to come take and what lowers each.
func (p *Plan) boundUMEM(cfg Config, links []linkInfo) error {
	limit := cmp.Or(cfg.MaxUMEM, DefaultMaxUMEM)
	p.MaxUMEM = limit
	size := int64(p.UMEMSize())
	if size <= limit {
		return nil
	}
	reserved := int64(p.UMEMReserved)
	return inputErr("the UMEM would pin %d MiB, above --max-umem %d MiB: %d MiB for the %d links given (--ring-size %d) and %d MiB set aside for %d links to come (--max-links %d, --added-ring-size %d); lower those or raise --max-umem",
		size>>20, limit>>20, (size-reserved)>>20, len(links), p.RingSize, reserved>>20, max(p.MaxLinks-len(links), 0), p.MaxLinks, p.AddedRingSize)
}

// UMEMSize is the bytes every domain's UMEM pins together.
func (p *Plan) UMEMSize() int {
	n := 0
	for _, d := range p.Domains {
		n += d.UMEM.Size()
	}
	return n
}

// umemReserved is the bytes of p's UMEM set aside for the links that may
// be added (MaxLinks above the links given): its size less that of the
// same plan without them.
func umemReserved(p *Plan, links []linkInfo) int {
	q := *p
	q.MaxLinks = len(links)
	return p.UMEM.Size() - umemConfig(&q, links).Size()
}

// pow2AtLeast is the smallest power of two n or more.
func pow2AtLeast(n int) uint32 {
	p := uint32(1)
	for int(p) < n {
		p <<= 1
	}
	return p
}

// reserveLinks is links with, up to max, links of queues RX and TX queues
// standing for those Forwarder.AddLink may add: what the ring size of an
// added link is chosen for. A link added later with more RX queues than
// that draws their fill rings from the shared pool, beyond its reserve.
func reserveLinks(links []linkInfo, max, queues int) []linkInfo {
	if max <= len(links) {
		return links
	}
	out := slices.Clone(links)
	for len(out) < max {
		out = append(out, linkInfo{rxQueues: queues, txQueues: queues})
	}
	return out
}

// cmp0 is v, or def when v is 0.
func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (p *Plan) decide(level slog.Level, msg, reason string) {
	p.Decisions = append(p.Decisions, Decision{Level: level, Msg: msg, Reason: reason})
}

// resolvePromisc is Promiscuous from Promisc and the Handler.
func resolvePromisc(m PromiscMode, h Handler) bool {
	switch m {
	case PromiscOn:
		return true
	case PromiscOff:
		return false
	}
	if ph, ok := h.(PromiscHandler); ok {
		return ph.Promiscuous()
	}
	return true
}

// fitDrivers settles FrameSize and ZeroCopy so that no link's driver cuts
// a frame of its MTU in zero-copy mode (package zcbuf), and says what it
// changed and why.
func (p *Plan) fitDrivers(cfg Config, links []linkInfo) error {
	zl := make([]zcbuf.Link, len(links))
	for i, l := range links {
		zl[i] = zcbuf.Link{Name: l.name, Driver: l.driver, MTU: l.mtu,
			NoZeroCopy: l.zc.Known && !l.zc.ZeroCopy, ZCMaxSegs: l.zc.MaxSegs}
	}
	// xdpfwd's UMEM has no headroom of its own: the pool's is the XDP one.
	d, err := zcbuf.Decide(zl, cfg.FrameSize, cfg.ZeroCopy, zcbuf.XDPHeadroom)
	if err != nil {
		return &InputError{err}
	}
	p.ZeroCopy = cfg.ZeroCopy
	switch {
	case d.Copy:
		p.ZeroCopy = xsk.ZeroCopyOff
		p.decide(slog.LevelWarn, "zero-copy off", d.Reason)
	case cfg.FrameSize == 0 && d.FrameSize != zcbuf.DefaultFrameSize,
		cfg.FrameSize != 0 && d.FrameSize != cfg.FrameSize:
		p.decide(slog.LevelInfo, fmt.Sprintf("frame size %d", d.FrameSize), d.Reason)
	}
	p.FrameSize = d.FrameSize
	return nil
}

// resolveMultiBuffer sets MultiBuffer from the mode and the links' MTUs,
// and refuses an MTU that the frames cannot carry.
func (p *Plan) resolveMultiBuffer(mode MultiBufferMode, links []linkInfo) error {
	// A frame holds FrameSize minus the headroom the kernel keeps in front
	// of received data (XDP_PACKET_HEADROOM, in copy mode).
	perFrame := p.FrameSize - unix.XDP_PACKET_HEADROOM
	var jumbo *linkInfo // the first link whose MTU needs more than a frame
	for i := range links {
		l := &links[i]
		need := l.mtu + maxFrameOverhead
		if need <= p.FrameSize {
			continue
		}
		if mode == MultiBufferOff {
			return inputErr("link %q MTU %d needs frames of at least %d bytes (MTU + 18 + %d headroom); --frame-size is %d (multi-buffer is off: use --multi-buffer auto or on for jumbo frames)",
				l.name, l.mtu, need, unix.XDP_PACKET_HEADROOM, p.FrameSize)
		}
		// The kernel takes at most MAX_SKB_FRAGS+1 buffers per packet.
		if frames := (l.mtu + 18 + perFrame - 1) / perFrame; frames > linearize.MaxDescs {
			return inputErr("link %q MTU %d needs %d frames of %d bytes per packet; the kernel takes at most %d (raise --frame-size or lower the MTU)",
				l.name, l.mtu, frames, p.FrameSize, linearize.MaxDescs)
		}
		if jumbo == nil {
			jumbo = l
		}
	}
	switch {
	case mode == MultiBufferOn:
		p.MultiBuffer = true
		p.decide(slog.LevelInfo, "multi-buffer on", "--multi-buffer on")
	case jumbo != nil:
		p.MultiBuffer = true
		p.decide(slog.LevelInfo, "multi-buffer on", fmt.Sprintf("link %s MTU %d needs %d bytes per packet (MTU + 18 + %d headroom), more than a %d-byte frame",
			jumbo.name, jumbo.mtu, jumbo.mtu+maxFrameOverhead, unix.XDP_PACKET_HEADROOM, p.FrameSize))
	default:
		reason := "--multi-buffer off"
		if mode == MultiBufferAuto {
			reason = fmt.Sprintf("both links' MTUs fit a %d-byte frame", p.FrameSize)
		}
		p.decide(slog.LevelInfo, "multi-buffer off", reason)
	}
	return nil
}

// defaultQueues is the worker count Config.Queues 0 stands for: no more
// workers than CPUs the process may use (a worker is a busy thread) nor
// than any link has RX or TX queues (each worker transmits on its own).
func defaultQueues(links []linkInfo, host hostFacts) int {
	n := max(len(host.cpus), 1)
	for _, l := range links {
		n = min(n, l.rxQueues, l.txQueues)
	}
	return n
}

// autoRingSize picks the ring size from the sockets each worker reads:
// 2048 entries while a worker has one socket per link, less as it gains
// more, so that memory grows with the traffic a worker can take rather
// than with the queue count, and never below 64. Every socket's bind costs
// the kernel time per UMEM chunk, so this also keeps links with many
// queues quick to start (64 queues per link on 2 workers: 64 entries,
// about 17 MiB of 2 KiB frames).
func autoRingSize(workers int, links []linkInfo) uint32 {
	perWorker := 0
	for _, l := range links {
		perWorker += (l.rxQueues + workers - 1) / workers
	}
	size := uint32(2048)
	for size > 64 && int(size)*perWorker > 2*2048 {
		size /= 2
	}
	return size
}

// burstRing is Plan.BurstRing when set: half the fill ring one link alone
// on a worker gets, so a burst costs a worker's UMEM 2048 frames and each
// socket 64 KiB of rings.
const burstRing = 2048

// socketRings are the ring sizes of queue q's socket whose ring size is
// ring: its TX ring, RX ring and fill (and completion) ring; the fewest
// frames its fill ring lends (rxring.Ring.SetLend); and brace, what it
// lends before its worker parks (rxring.Ring.Brace), the frames the UMEM
// sets aside for it (umemConfig: a fill ring of what ring gives).
//
// A socket of a link bound in copy mode (copied: copyBound) that is a
// worker's TX lane lends brace, down to lendBatches batches while its
// link is flooded (rxring.Ring.SetLend): the kernel copies each packet
// into the frame the fill ring gives it next, and a ring that keeps
// thousands lent makes every copy land in a line (and a page) it has not
// touched since it went round, on the sending CPU. Its RX and fill rings are
// BurstRing's where ring would give it a smaller fill ring. A zero-copy
// socket lends its whole fill ring: a driver posts the frames to its
// hardware ring ahead of packets. An RX-only socket (a link with more RX
// queues than workers) keeps its rings and lends them whole: RSS spreads
// its bursts, and a NIC may have 64 of them.
type socketRings struct{ tx, rx, fill, lend, brace uint32 }

func (p *Plan) socketRings(ring uint32, q int, copied bool) socketRings {
	fill := fillSizeOf(ring, p.Queues, q)
	r := socketRings{tx: ring, rx: ring, fill: fill, lend: fill, brace: fill}
	if !copied || q >= p.Queues {
		return r
	}
	r.lend = min(fill, lendBatches*uint32(p.Batch))
	if p.BurstRing > fill {
		r.rx, r.fill = max(ring, p.BurstRing), p.BurstRing
	}
	return r
}

// lendBatches is the fewest batches a copy-mode TX lane's fill ring
// lends in a flood: 1,024 frames at the default batch, what one
// sendmmsg(2) may send at once (UIO_MAXIOV), a quarter of the fill ring
// two links get. A burst larger than that, before the worker refills,
// is dropped (rx_fill_ring_empty) and grows the lend; four batches
// dropped a tenth of a 2,000-datagram burst on veths. Below a flood it
// lends its whole fill ring, which covers a worker's stall of 40 ms at
// 100,000 packets/s where 1,024 frames covered 10; a pause the worker
// knows of (parked) is braced for with the whole fill ring.
const lendBatches = 16

// copyBound: l's sockets, opened asking zc, bind in copy mode, where a
// fill ring's frames are the kernel's to copy into, not a driver's to
// keep posted: those get burst rings.
func (p *Plan) copyBound(l linkInfo, zc xsk.ZeroCopy) bool {
	return zc == xsk.ZeroCopyOff || !mayBindZeroCopy(p, l)
}

// fillSize is the fill (and completion) ring size of queue q's socket: a
// TX lane's is twice the ring size, so a worker scheduled out for a while
// loses nothing; an RX-only socket's is the ring size, and its frames
// are not multiplied by the queues a link may have.
func fillSize(p *Plan, q int) uint32 { return fillSizeOf(p.RingSize, p.Queues, q) }

// fillSizeOf is fillSize for rings of ring entries and queues workers.
func fillSizeOf(ring uint32, queues, q int) uint32 {
	if q < queues {
		return 2 * ring
	}
	return ring
}

// umemConfig sizes the UMEM from the rings in use: per socket a full fill
// ring lent to the kernel (and in zero-copy mode the driver's hardware
// ring), per TX lane a TX ring's worth in flight, what the other workers'
// caches may hold while one refills, and frag blocks per TX lane
// (fragBlocks), not per socket. Every socket's buffer pool in the kernel
// has an entry per UMEM chunk, so the UMEM's size also sets how long each
// bind takes and how much kernel memory each socket costs. The frag zone
// is of p.FragOrder, the order asked (3, 4 or FragOff), and the inline
// zone there unless p.InlineMax is InlineOff.
//
// The links that may be added (Plan.MaxLinks) get as much set aside at
// AddedRingSize, as links of one RX queue per worker: their fill rings
// and TX in flight, and their lanes' share of the frag blocks.
func umemConfig(p *Plan, links []linkInfo) umem.Config {
	spare := max(p.MaxLinks-len(links), 0)
	lanes := (len(links) + spare) * p.Queues
	frames := len(links) * p.Queues * int(p.RingSize) // TX in flight
	for _, l := range links {
		for q := range l.rxQueues {
			frames += int(fillSize(p, q))
			if p.Handler != nil && q >= p.Queues {
				frames += int(p.RingSize) // reflections in flight
			}
		}
	}
	frames += spare * p.Queues * 3 * int(p.AddedRingSize) // fill ring 2×, TX 1×
	for _, l := range links {
		if mayBindZeroCopy(p, l) {
			// The driver keeps a hardware ring's worth of each
			// socket's frames posted, beyond its fill ring.
			frames += l.rxQueues * l.rxRing
		}
	}
	// Free frames in a worker's cache are out of the other workers'
	// reach (frameCacheSize): without these, the rings of a small UMEM
	// (a zero-copy domain of two NICs) starved while another worker's
	// cache held what they lacked.
	frames += max(p.Queues-1, 0) * frameCacheSize
	// A burst per worker: what its busiest socket lends above its floor.
	if p.burstsAny(links, spare) {
		frames += p.Queues * int(p.BurstRing)
	}
	ucfg := umem.DefaultConfig(lanes)
	ucfg.FrameSize = p.FrameSize
	ucfg.Frames = frames
	ucfg.HugePages = p.HugePages
	ucfg.FragOrder = p.FragOrder
	if p.FragOrder == FragOff || !p.MultiBuffer && p.Handler == nil {
		// Frag blocks take repacked multi-buffer packets (and a
		// Handler's flood copies): without either, no packet uses one,
		// and every socket's bind pays per UMEM chunk.
		ucfg.FragOrder = 0 // umem's none
	}
	ucfg.FragBlocks = 0
	if ucfg.FragOrder != 0 {
		ucfg.FragBlocks = len(links)*p.Queues*fragBlocks(p.RingSize, p.FrameSize, ucfg.FragBlockSize()) +
			spare*p.Queues*fragBlocks(p.AddedRingSize, p.FrameSize, ucfg.FragBlockSize())
	}
	if p.InlineMax == InlineOff {
		ucfg.InlineSlots = 0
	}
	return ucfg
}

// burstsAny: a TX lane's socket of links, or of the spare links to come
// (copy mode, at AddedRingSize), gets burst rings.
func (p *Plan) burstsAny(links []linkInfo, spare int) bool {
	if spare > 0 && p.BurstRing > fillSizeOf(p.AddedRingSize, p.Queues, 0) {
		return true
	}
	for _, l := range links {
		if p.copyBound(l, p.ZeroCopy) && p.BurstRing > fillSizeOf(p.RingSize, p.Queues, 0) {
			return true
		}
	}
	return false
}

// completesChecksums: partial TCP/UDP checksums of the packets received
// on l are finished: on every link with ChecksumsOn; with ChecksumsAuto
// on veths, given or added while running (a container's stack leaves
// them partial for offload, and nothing after XDP would finish them).
func (p *Plan) completesChecksums(l linkInfo) bool {
	return p.Checksums == ChecksumsOn || p.Checksums == ChecksumsAuto && l.veth
}

// mayBindZeroCopy: l's sockets may bind in zero-copy mode under p (a link
// whose support is unknown tries, as the plan does).
func mayBindZeroCopy(p *Plan, l linkInfo) bool {
	return p.ZeroCopy != xsk.ZeroCopyOff && !l.veth && (!l.zc.Known || l.zc.ZeroCopy)
}

// maxLaneFragBlocks is the most frag blocks a TX lane gets (2 MiB of
// 64 KiB blocks), what every lane had before they were sized by its ring.
const maxLaneFragBlocks = 32

// fragBlocks is the frag blocks set aside for a TX lane of ring entries,
// frames of chunk bytes, blocks of block bytes. A lane has at most a TX
// ring of descriptors in flight, and a copy in a block (a flood copy, a
// repacked multi-buffer packet) takes at most a chunk per descriptor (it
// starts on a boundary of a chunk at most, and no descriptor holds more
// than a chunk), so a ring's worth of chunks is all the lane can hold in
// blocks; 2 more cover the block its worker's packer is filling and one
// that a last straggling descriptor keeps from the pool. More would lie
// idle: a 64-entry lane needs 4 blocks of 64 KiB, not 32. When a worker
// finds none, a copy goes to free frames instead (layOutCopy) and a
// repack leaves as the packet's own chain, so a lane's share is no hard
// limit either.
func fragBlocks(ring uint32, chunk, block int) int {
	return min((int(ring)*chunk+block-1)/block+2, maxLaneFragBlocks)
}

// givenRingSize is the auto ring size of the links given when more may be
// added (MaxLinks above them): as large as they would have alone
// (p.RingSize), but only as far as the UMEM, laid out (umem.Config.Size),
// stays within a sixteenth (givenRingSlack) of what it is with every link
// at AddedRingSize: the UMEM of MaxLinks links at start. So a forwarder
// started with 2 links that takes 62 more resides within 10 % of one
// started with 64 (the rest of the 10 % is for what is not the UMEM: the
// sockets' rings, the heap), where the 2 links' 2048-entry rings alone
// would take more than the 62 others; and the links given keep the
// largest rings that allows, at least AddedRingSize.
func givenRingSize(p *Plan, links []linkInfo) uint32 {
	const givenRingSlack = 16
	q := *p
	q.RingSize = p.AddedRingSize
	base := umemConfig(&q, links).Size()
	ring := p.RingSize
	for ; ring > p.AddedRingSize; ring /= 2 {
		q.RingSize = ring
		if umemConfig(&q, links).Size()-base <= base/givenRingSlack {
			break
		}
	}
	return ring
}

// allowed reports whether every CPU of cpus is one of set.
func allowed(cpus, set []int) bool {
	for _, c := range cpus {
		if !slices.Contains(set, c) {
			return false
		}
	}
	return true
}

// Change is one setting that differs between the Plan a forwarder runs
// with and the one a new Config resolves to: Field names the Config field,
// From and To are the resolved values.
type Change struct {
	Field, From, To string
}

func (c Change) String() string { return fmt.Sprintf("%s %s → %s", c.Field, c.From, c.To) }

// Reconfiguration is what Reconfigure did with a new Config.
type Reconfiguration struct {
	// Applied are the live changes put in force.
	Applied []Change
	// Restart are the changes a running forwarder cannot take: each
	// needs a restart, and none was applied.
	Restart []Change
	// Failed joins the live changes that were refused (SetQueues or
	// SetInlineMax said why); each stays as it was.
	Failed error
}

// RestartError is nil, or an error naming every change that needs a
// restart.
func (r Reconfiguration) RestartError() error {
	if len(r.Restart) == 0 {
		return nil
	}
	s := make([]string, len(r.Restart))
	for i, c := range r.Restart {
		s[i] = c.String()
	}
	return fmt.Errorf("%s: not applied, a restart is needed", strings.Join(s, ", "))
}

// inlineBytes is the byte count p.InlineMax puts in force, 0 when the
// inline path is off: linearize.Policy.InlineMax, Forwarder.InlineMax.
func (p *Plan) inlineBytes() int {
	n, _ := inline.ResolveMax(p.InlineMax) // resolved: 1..256 or InlineOff
	return n
}

// spinString is a spin as --spin spells it.
func spinString(spin int) string {
	switch {
	case spin == 0:
		return "auto"
	case spin < 0:
		return "off"
	case spin == SpinBusy:
		return "busy"
	}
	return fmt.Sprint(spin)
}

// fragOrderString is a Plan's frag order as --frag-order spells it.
func fragOrderString(order int) string {
	if order == FragOff {
		return "off"
	}
	return fmt.Sprint(order)
}
