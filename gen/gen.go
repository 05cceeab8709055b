// Package gen owns xdpfwd's traffic generator, `xdpfwd run --mode txonly`:
// AF_XDP sockets that only transmit, on one umem.Region shared by every
// (link, queue), sending UDP frames that carry a payload (Payload) a sink
// checks for loss, reordering and latency (modes.NewSink).
//
// Each socket owns a fixed set of TX buffers, one per packet it may have in
// flight: inline slots (package inline) for frames up to 256 bytes, UMEM
// frames for larger ones. Each buffer is written once, whole, when the
// generator starts, and then re-sent: per packet only the sequence number,
// the TX stamp and the UDP checksum (updated incrementally) are rewritten.
// Packets are paced by a Pacer, a burst per round (what is due in Window,
// 1 ms: one packet at a time up to 1 kpps a socket), and the kernel is kicked
// through txring only when the ring's need_wakeup flag asks: no syscall,
// timer or allocation per packet.
//
// # Ownership
//
// A buffer's address is the generator's between a completion and the next
// submit, and the kernel's in between (txring); it goes back to its zone
// when the generator closes. Each socket is run by one goroutine; counters
// are atomics, read by Stats from any goroutine.
package gen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// MaxFlows is the most flows a run may have: the flow id is 16 bits, and a
// sink tracks this many.
const MaxFlows = 4096

// MaxLinks is the most links one generator sends on.
const MaxLinks = 64

// Config configures a generator. Zero values are defaults.
type Config struct {
	Links  []string // links to send on, 1..MaxLinks
	Queues int      // sockets (TX queues) per link; 0: 1
	// Sizes are frame sizes with FCS (64..1518+: up to the link's MTU),
	// cycled over each socket's buffers: one size, or IMIX. nil: 64.
	Sizes []int
	// Count is how many packets to send in all; Duration how long to
	// send. With both zero the generator sends until its context ends.
	Count    uint64
	Duration time.Duration
	// Rate is the target in packets per second over all sockets; 0 sends
	// as fast as the sockets take them. It must be a number, and each
	// socket's share must leave an interval between packets that fits in
	// a time.Duration (Interval).
	Rate float64
	// Window bounds a paced socket's bursts: a round sends at most what
	// is due in this long, at least one packet, at most Batch (Pacer); 0:
	// DefaultWindow (1 ms). A smaller one spaces packets more finely for
	// more wake-ups.
	Window time.Duration
	// Flows is the number of flows, 1..MaxFlows and at least the socket
	// count (each flow is sent from one socket, so its sequence is
	// ordered); 0: the socket count.
	Flows int
	// Template gives the frames' addresses; a nil SrcMAC is each link's
	// own address, a nil DstMAC broadcast, a zero SrcIP 198.18.0.1, a zero
	// DstIP 198.18.0.2, a zero SrcPort 1024, a zero DstPort 9 (discard),
	// a zero Run a random one.
	Template Template
	RingSize uint32 // TX ring entries and buffers per socket; 0: 2048
	Batch    int    // most packets per round; 0: 64
	ZeroCopy xsk.ZeroCopy
	// HugePages backs the region; the zero value is umem's auto.
	HugePages umem.HugePages
	// CPUs, if set, pins socket k's thread to CPUs[k%len(CPUs)]: a
	// benchmark keeps the generator off the CPUs of what it measures.
	CPUs []int
}

// Generator is a running txonly generator.
type Generator struct {
	cfg    Config
	region *umem.Region
	queues []*queue
	socks  []*xsk.Socket // opening order: the UMEM's owner first
	// bufOf maps a zone unit to the buffer holding it: written once per
	// buffer by New, read by the owning queue only.
	inlineIdx, frameIdx []int32
	// started (gen.Now at Run's start, 0 before) and elapsed (ns, at its
	// end) are atomics: Stats reads them while Run runs.
	started, elapsed atomic.Int64
}

// buffer is one packet in flight, written once.
type buffer struct {
	addr  uint64
	len   uint32
	flow  uint16 // index into the queue's seq
	sport uint16 // its flow's UDP source port
	lay   Layout
	frame bool // a frame-zone unit (else an inline slot)
}

// queue is one socket's generator: run by one goroutine.
type queue struct {
	g         *Generator
	link      string
	q         int
	sock      *xsk.Socket
	tx        *txring.Ring
	b         *inline.Builder
	frames    *umem.Cache
	bufs      []buffer
	free      []int32 // FIFO of free buffers, so flows take turns
	head, n   int
	seq       []uint32 // per local flow
	quota     uint64   // packets to send; 0: unlimited
	rate      float64
	batch     int
	burst     uint64 // most packets per paced round
	reaped    []uint64
	sent      atomic.Uint64
	forgiven  atomic.Uint64 // packets the pacer gave up on (Pacer.Forgiven)
	bytes     atomic.Uint64
	completed atomic.Uint64
	stalls    atomic.Uint64 // rounds with packets due and no free buffer

	// macs: with Template.SrcMACs above 1, the source MACs taken in
	// turn, from macBase (SrcMAC's low 24 bits); mac counts packets.
	macs, macBase, mac uint32
	// ports: with Template.SrcPorts above 1, the source ports taken in
	// turn from each buffer's flow's (buffer.sport); port counts packets.
	ports, port uint32
}

// InputError is a configuration the generator refuses: the command's
// usage error.
type InputError struct{ msg string }

func (e InputError) Error() string { return e.msg }

func bad(format string, a ...any) error { return InputError{fmt.Sprintf(format, a...)} }

// New checks cfg, maps one region and opens every socket, and writes every
// buffer. It needs no XDP program: nothing is received.
func New(cfg Config) (_ *Generator, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ifis, err := cfg.links()
	if err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.region, err = umem.New(cfg.regionConfig()); err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	g.inlineIdx = make([]int32, g.region.Inline.Len())
	g.frameIdx = make([]int32, g.region.Frames.Len())
	scratch := make([]byte, 4096)
	for _, ifi := range ifis {
		t := cfg.Template
		if t.SrcMAC == nil {
			t.SrcMAC = ifi.HardwareAddr
		}
		if err := t.Check(); err != nil {
			return nil, bad("link %s: %v", ifi.Name, err)
		}
		for qi := range cfg.Queues {
			k := len(g.queues) // socket index, 0..sockets-1
			q, err := g.openQueue(ifi, qi, k, t)
			if err != nil {
				return nil, err
			}
			if err := q.writeBuffers(t, k, scratch); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

// links are cfg's links, each checked to take the largest frame and to
// have the TX queues asked.
func (cfg *Config) links() ([]*net.Interface, error) {
	largest := 0
	for _, s := range cfg.Sizes {
		largest = max(largest, s)
	}
	l2 := ethLen
	if cfg.Template.VLAN > 0 {
		l2 += vlanLen
	}
	var ifis []*net.Interface
	for _, name := range cfg.Links {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return nil, bad("link %s: %v", name, err)
		}
		if largest-FCS-l2 > ifi.MTU {
			return nil, bad("--size %d: link %s has MTU %d, the largest frame it sends is %d bytes with FCS", largest, name, ifi.MTU, ifi.MTU+l2+FCS)
		}
		if n := txQueues(name); cfg.Queues > n {
			return nil, bad("queues %d: link %s has %d TX queues", cfg.Queues, name, n)
		}
		ifis = append(ifis, ifi)
	}
	return ifis, nil
}

// sockets is how many sockets the generator opens: one per queue of
// every link.
func (cfg *Config) sockets() int { return len(cfg.Links) * cfg.Queues }

// sizeKinds reports whether some frame of cfg.Sizes fits an inline slot
// (small) and whether some does not (large).
func (cfg *Config) sizeKinds() (small, large bool) {
	for _, s := range cfg.Sizes {
		if s-FCS <= umem.InlineSlotSize {
			small = true
		} else {
			large = true
		}
	}
	return small, large
}

// regionConfig is the region every socket shares: a ring's worth of
// inline slots per socket for the small frames, of frames for the large.
func (cfg *Config) regionConfig() umem.Config {
	sockets, per := cfg.sockets(), int(cfg.RingSize)
	small, large := cfg.sizeKinds()
	ucfg := umem.Config{FrameSize: 2048, Frames: 64, HugePages: cfg.HugePages}
	if small {
		ucfg.InlineSlots = sockets * per
	}
	if large {
		ucfg.Frames = max(64, sockets*per)
	}
	return ucfg
}

// openQueue opens the socket of ifi's TX queue qi, sharing the region of
// the first, and its queue, socket k of the generator's, sending t's
// frames; Close frees both from then on.
func (g *Generator) openQueue(ifi *net.Interface, qi, k int, t Template) (*queue, error) {
	cfg := &g.cfg
	var shared *xsk.Socket
	if len(g.socks) > 0 {
		shared = g.socks[0]
	}
	s, err := xsk.Open(g.region, xsk.Config{
		Ifname: ifi.Name, Ifindex: ifi.Index, Queue: qi,
		RingSize: cfg.RingSize, Shared: shared, ZeroCopy: cfg.ZeroCopy,
	})
	if err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	g.socks = append(g.socks, s)
	sockets, per := cfg.sockets(), int(cfg.RingSize)
	q := &queue{
		g: g, link: ifi.Name, q: qi, sock: s, tx: txring.New(s),
		bufs: make([]buffer, 0, per), free: make([]int32, per),
		reaped: make([]uint64, per), batch: cfg.Batch,
		rate: cfg.Rate / float64(sockets),
	}
	q.burst = Burst(q.rate, cfg.Window, cfg.Batch)
	if t.SrcMACs > 1 {
		q.macs, q.macBase = uint32(t.SrcMACs), uint32(t.SrcMAC[3])<<16|uint32(t.SrcMAC[4])<<8|uint32(t.SrcMAC[5])
	}
	q.ports = uint32(t.SrcPorts)
	if cfg.Count > 0 {
		q.quota = cfg.Count / uint64(sockets)
		if uint64(k) < cfg.Count%uint64(sockets) {
			q.quota++
		}
	}
	g.queues = append(g.queues, q) // from here on, Close frees its buffers
	// Flows k, k+sockets, k+2·sockets, ...: each from one socket.
	q.seq = make([]uint32, (cfg.Flows-k+sockets-1)/sockets)
	small, large := cfg.sizeKinds()
	if small {
		q.b = inline.NewBuilder(g.region, linearize.Policy{InlineMax: umem.InlineSlotSize}, per, 64)
	}
	if large {
		q.frames = g.region.Frames.NewCache(per)
	}
	return q, nil
}

// writeBuffers writes the ring of buffers of q, socket k, t's frames of
// the sizes in turn, each of one of q's flows, into inline slots or
// frames; scratch holds one frame.
func (q *queue) writeBuffers(t Template, k int, scratch []byte) error {
	g, cfg := q.g, &q.g.cfg
	sockets, per, local := cfg.sockets(), int(cfg.RingSize), len(q.seq)
	mem := g.region.Mem()
	for j := range per {
		size := cfg.Sizes[j%len(cfg.Sizes)]
		lf := j % local
		n, lay := t.Frame(scratch, size, uint16(k+lf*sockets))
		b := buffer{len: uint32(n), flow: uint16(lf), sport: SrcPort(scratch, lay), lay: lay}
		var ok bool
		if n <= umem.InlineSlotSize {
			b.addr, ok = q.b.Inline(scratch[:n])
			if ok {
				g.inlineIdx[g.region.Inline.Index(b.addr)] = int32(j)
			}
		} else {
			b.frame = true
			if b.addr, ok = q.frames.Alloc(umem.KernelTX); ok {
				copy(mem[b.addr:], scratch[:n])
				g.frameIdx[g.region.Frames.Index(b.addr)] = int32(j)
			}
		}
		if !ok {
			return fmt.Errorf("txonly: link %s queue %d: region exhausted at buffer %d", q.link, q.q, j)
		}
		q.bufs = append(q.bufs, b)
		q.free[j] = int32(j)
	}
	q.n = per
	return nil
}

// txQueues is the TX queues a link uses now: its ethtool channels, else
// the count it was created with.
func txQueues(name string) int {
	if c, err := ethtool.GetChannels(name); err == nil && c.TX+c.Combined > 0 {
		return int(c.TX + c.Combined)
	}
	if l, err := netlink.LinkByName(name); err == nil && l.Attrs().NumTxQueues > 0 {
		return l.Attrs().NumTxQueues
	}
	return 1
}

func (c *Config) defaults() error {
	switch {
	case len(c.Links) == 0 || len(c.Links) > MaxLinks:
		return bad("txonly takes 1..%d links, got %d", MaxLinks, len(c.Links))
	case c.Queues < 0 || c.Queues > 64:
		return bad("queues %d: want 1..64 (0: 1)", c.Queues)
	case math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > 1e9:
		return bad("rate %v: want 0 (unpaced) .. 1e9 packets/s", c.Rate)
	case c.Window < 0:
		return bad("window %v: want ≥ 0 (0: %v)", c.Window, DefaultWindow)
	case c.Duration < 0:
		return bad("duration %v: want ≥ 0", c.Duration)
	case c.Batch < 0 || c.Batch > 4096:
		return bad("batch %d: want 1..4096 (0: 64)", c.Batch)
	case c.RingSize != 0 && (c.RingSize < 64 || c.RingSize > 16384 || c.RingSize&(c.RingSize-1) != 0):
		return bad("ring size %d: want a power of two, 64..16384", c.RingSize)
	}
	if c.Queues == 0 {
		c.Queues = 1
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64}
	}
	vlan := c.Template.VLAN > 0
	for _, s := range c.Sizes {
		if s < MinSize(vlan) || s-FCS > 2048 {
			what := ""
			if vlan {
				what = ", tagged (VLAN)"
			}
			return bad("frame size %d: want %d..%d bytes with FCS%s", s, MinSize(vlan), 2048+FCS, what)
		}
	}
	sockets := c.sockets()
	if _, ok := Interval(c.Rate / float64(sockets)); !ok {
		// Each socket paces its share: one packet every
		// sockets/Rate seconds must fit in a time.Duration.
		return bad("rate %v packets/s over %d socket(s): one packet every %.3g s a socket, longer than a time.Duration holds (%.0f years); want 0 (unpaced) or at least %.2g",
			c.Rate, sockets, float64(sockets)/c.Rate, time.Duration(math.MaxInt64).Hours()/24/365, float64(sockets)*1e9/math.MaxInt64*1.0001)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Flows == 0 {
		c.Flows = sockets
	}
	if c.Flows < sockets || c.Flows > MaxFlows {
		return bad("flows %d: want %d (one per socket: links × queues) .. %d", c.Flows, sockets, MaxFlows)
	}
	if c.RingSize == 0 {
		c.RingSize = 2048
	}
	if c.Batch == 0 {
		c.Batch = 64
	}
	c.Batch = min(c.Batch, int(c.RingSize))
	t := &c.Template
	if t.DstMAC == nil {
		t.DstMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	}
	if !t.SrcIP.IsValid() {
		t.SrcIP = netip.MustParseAddr("198.18.0.1")
	}
	if !t.DstIP.IsValid() {
		t.DstIP = netip.MustParseAddr("198.18.0.2")
	}
	if t.SrcPort == 0 {
		t.SrcPort = 1024
	}
	if t.DstPort == 0 {
		t.DstPort = 9
	}
	for t.Run == 0 { // a run id of its own, so a sink tells this run from the last
		t.Run = rand.Uint32()
	}
	top := int(t.SrcPort) + max(t.SrcPorts, 1) - 1 // the highest source port
	if !t.ByIP {
		top += c.Flows - 1
	}
	if top > 65535 {
		return bad("flows %d, %d source ports each, from source port %d run past port 65535", c.Flows, max(t.SrcPorts, 1), t.SrcPort)
	}
	return nil
}

// Run sends until the count or duration is reached or ctx ends, then waits
// (up to a second) for every packet in flight to complete. Each socket is
// run by a goroutine on a locked OS thread.
func (g *Generator) Run(ctx context.Context) error {
	var stop atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-ctx.Done(); stop.Store(true) }()
	start := Now()
	g.started.Store(start)
	var end int64
	if g.cfg.Duration > 0 {
		// Saturated: past what an int64 of ns holds (a Duration of
		// 292 years, plus the clock's uptime) is never.
		end = start + min(int64(g.cfg.Duration), math.MaxInt64-start)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(g.queues))
	for i, q := range g.queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if c := g.cfg.CPUs; len(c) == 0 {
				defer runtime.UnlockOSThread()
			} else { // the pinned thread ends with the goroutine, locked
				var set unix.CPUSet
				set.Set(c[i%len(c)])
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					errs[i] = fmt.Errorf("txonly: pin queue %d to CPU %d: %w", i, c[i%len(c)], err)
					return
				}
			}
			errs[i] = q.run(start, end, &stop)
		}()
	}
	wg.Wait()
	g.elapsed.Store(Now() - start)
	return errors.Join(errs...)
}

// maxSleep is the longest a paced socket sleeps before it looks at stop:
// a signal is answered within it.
const maxSleep = 50 * time.Millisecond

// run is one socket's loop, on a locked OS thread.
func (q *queue) run(start, end int64, stop *atomic.Bool) error {
	pacer := NewPacer(q.rate, start, q.burst)
	if q.rate > 0 {
		// The thread's sleeps end when asked, not up to 50 µs later (the
		// default timer slack): pacing at µs. The thread goes back to
		// the pool with its slack as it was.
		if old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); err == nil {
			unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
			defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
		}
	}
	mem := q.g.region.Mem()
	var sent uint64
	var kickErr error
	for !stop.Load() && (q.quota == 0 || sent < q.quota) {
		q.reap()
		now := Now()
		if end != 0 && now >= end {
			break
		}
		due, next := pacer.Round(now, sent)
		q.forgiven.Store(pacer.Forgiven())
		if due == 0 {
			// Nothing due: sleep until the next round, one sleep per
			// round, none per packet.
			if end != 0 {
				next = min(next, end)
			}
			sleepUntil(next, stop)
			continue
		}
		want := min(due, uint64(q.batch), uint64(q.n))
		if q.quota != 0 {
			want = min(want, q.quota-sent)
		}
		if want == 0 {
			// Everything in flight: have the kernel move, then reap.
			q.stalls.Add(1)
			if err := q.tx.Kick(false); err != nil && kickErr == nil {
				kickErr = err
			}
			runtime.Gosched()
			continue
		}
		got, idx := q.tx.Reserve(uint32(want))
		var bytes uint64
		for i := range got {
			j := q.free[q.head]
			q.head = (q.head + 1) % len(q.free)
			b := &q.bufs[j]
			f := mem[b.addr : b.addr+uint64(b.len)]
			Stamp(f, b.lay, q.seq[b.flow], now)
			q.seq[b.flow]++
			if q.macs > 1 {
				// Outside every checksum: three bytes, no sum to mend.
				m := q.macBase + q.mac%q.macs
				f[9], f[10], f[11] = byte(m>>16), byte(m>>8), byte(m)
				q.mac++
			}
			if q.ports > 1 {
				SetSrcPort(f, b.lay, b.sport+uint16(q.port%q.ports))
				q.port++
			}
			q.tx.Set(idx+i, b.addr, b.len, 0)
			bytes += uint64(b.len)
		}
		q.n -= int(got)
		if got > 0 {
			q.tx.Submit()
			sent += uint64(got)
			q.sent.Store(sent)
			q.bytes.Add(bytes)
		} else {
			q.stalls.Add(1)
			q.tx.Kick(false)
		}
	}
	// Drain: every packet submitted completes, or the run says how many
	// did not.
	deadline := time.Now().Add(time.Second)
	for q.tx.InFlight() > 0 && time.Now().Before(deadline) {
		q.tx.Kick(true)
		q.reap()
		if q.tx.InFlight() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if kickErr != nil {
		return fmt.Errorf("txonly: link %s queue %d: kick: %w", q.link, q.q, kickErr)
	}
	return nil
}

// sleepUntil sleeps the thread until at (Now's clock) or until stop, in
// nanosleeps of at most maxSleep: no timer, channel or allocation, and a
// stop is seen within maxSleep.
func sleepUntil(at int64, stop *atomic.Bool) {
	for !stop.Load() {
		d := at - Now()
		if d <= 0 {
			return
		}
		ts := unix.NsecToTimespec(min(d, int64(maxSleep)))
		unix.Nanosleep(&ts, nil) // EINTR or not: the loop looks again
	}
}

// reap takes completed buffers back.
func (q *queue) reap() {
	for {
		n := q.tx.Reap(q.reaped)
		for _, a := range q.reaped[:n] {
			a = xsk.Flat(a)
			var j int32
			if r := q.g.region; r.Inline.Contains(a) {
				j = q.g.inlineIdx[r.Inline.Index(a)]
			} else {
				j = q.g.frameIdx[r.Frames.Index(a)]
			}
			q.free[(q.head+q.n)%len(q.free)] = j
			q.n++
		}
		if n > 0 {
			q.completed.Add(uint64(n))
		}
		if n < len(q.reaped) {
			return
		}
	}
}

// QueueStats are one socket's counters.
type QueueStats struct {
	Link      string `json:"link"`
	Queue     int    `json:"queue"`
	Sent      uint64 `json:"sent"`
	Completed uint64 `json:"completed"`
	Bytes     uint64 `json:"bytes"`
	Kicks     uint64 `json:"kicks"`
	// KickErrors are sendto calls that failed (link down).
	KickErrors uint64 `json:"kick_errors"`
	// Stalls are rounds with packets due and every buffer in flight.
	Stalls uint64 `json:"stalls"`
	// Burst is the most packets a paced round sends; Forgiven the
	// packets the pacer gave up on, more than MaxDebt behind (Pacer).
	Burst    uint64 `json:"burst"`
	Forgiven uint64 `json:"forgiven"`
	// TXInvalid and TXRingEmpty are the kernel's XDP_STATISTICS.
	TXInvalid   uint64 `json:"tx_invalid_descs"`
	TXRingEmpty uint64 `json:"tx_ring_empty_descs"`
}

// Summary is a run's counters.
type Summary struct {
	Queues    []QueueStats `json:"queues"`
	Sent      uint64       `json:"sent"`
	Completed uint64       `json:"completed"`
	Bytes     uint64       `json:"bytes"`
	DurationS float64      `json:"duration_s"`
	PPS       float64      `json:"pps"` // sent / duration
	Flows     int          `json:"flows"`
	Sizes     []int        `json:"sizes"`
	Rate      float64      `json:"target_pps"`
	Run       uint32       `json:"run_id"`
}

// Stats reads every socket's counters, from any goroutine.
func (g *Generator) Stats() Summary {
	s := Summary{Flows: g.cfg.Flows, Sizes: g.cfg.Sizes, Rate: g.cfg.Rate, Run: g.cfg.Template.Run}
	for _, q := range g.queues {
		qs := QueueStats{
			Link: q.link, Queue: q.q, Sent: q.sent.Load(), Completed: q.completed.Load(),
			Bytes: q.bytes.Load(), Kicks: q.tx.Kicks.Load(), KickErrors: q.tx.KickErrors.Load(),
			Stalls: q.stalls.Load(), Burst: q.burst, Forgiven: q.forgiven.Load(),
		}
		if ks, err := q.sock.Stats(); err == nil {
			qs.TXInvalid, qs.TXRingEmpty = ks.Tx_invalid_descs, ks.Tx_ring_empty_descs
		}
		s.Queues = append(s.Queues, qs)
		s.Sent += qs.Sent
		s.Completed += qs.Completed
		s.Bytes += qs.Bytes
	}
	d := time.Duration(g.elapsed.Load())
	if st := g.started.Load(); d == 0 && st != 0 {
		d = time.Duration(Now() - st)
	}
	if s.DurationS = d.Seconds(); s.DurationS > 0 {
		s.PPS = float64(s.Sent) / s.DurationS
	}
	return s
}

// Region is the generator's UMEM, for accounting checks.
func (g *Generator) Region() *umem.Region { return g.region }

// Close closes the sockets (the UMEM's owner last), returns every buffer to
// its zone and unmaps the region.
func (g *Generator) Close() error {
	var errs []error
	for i := len(g.socks) - 1; i >= 0; i-- {
		errs = append(errs, g.socks[i].Close())
	}
	g.socks = nil
	for _, q := range g.queues {
		for _, b := range q.bufs {
			switch {
			case b.frame:
				q.frames.Free(b.addr, umem.KernelTX)
			default:
				q.b.Release(b.addr)
			}
		}
		if q.b != nil {
			q.b.Close()
		}
		if q.frames != nil {
			q.frames.Flush()
		}
	}
	g.queues = nil
	if g.region != nil {
		errs = append(errs, g.region.Close())
	}
	return errors.Join(errs...)
}
