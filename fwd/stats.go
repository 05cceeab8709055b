package fwd

import (
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// LinkStats are one link's counters, summed over its queues.
type LinkStats struct {
	RXPackets uint64            `json:"rx_packets"`
	RXBytes   uint64            `json:"rx_bytes"`
	TXPackets uint64            `json:"tx_packets"`
	TXBytes   uint64            `json:"tx_bytes"`
	Drops     map[string]uint64 `json:"drops"`
	XDPMode   string            `json:"xdp_mode"`
	BindMode  string            `json:"bind_mode"`
	// Domain is the UMEM domain the link binds in (domain.go): "zerocopy"
	// or "copy" when the forwarder has two, "" when one.
	Domain string `json:"umem_domain,omitempty"`
	// Queues is the RX queues the link has, each with a socket.
	Queues int `json:"queues"`

	// TX layout accounting (packets sent on this link).
	TXPaths         map[string]uint64 `json:"tx_paths"` // inline, frame, frag, chain
	TXDescriptors   uint64            `json:"tx_descriptors"`
	InlineFallbacks uint64            `json:"inline_fallbacks"`
	// DescsPerPacket is a histogram: "1" → packets that left as one
	// descriptor, and so on up to "18".
	DescsPerPacket map[string]uint64 `json:"tx_descs_per_packet"`

	// ChecksumsCompleted counts packets received on this link with a
	// partial TCP/UDP checksum that xdpfwd finished.
	ChecksumsCompleted uint64 `json:"checksums_completed"`

	// OrderHoldTimeouts counts packets sent on this link before their
	// turn because they had waited for ordering across RX queues longer
	// than the hold bound: not drops, but possibly out of order.
	OrderHoldTimeouts uint64 `json:"order_hold_timeouts"`
	// DomainCopies* count the packets sent on this link that were copied
	// from another UMEM domain (a zero-copy NIC's into a pod's, or back),
	// by the TX path the copy took; DomainCopyBytes their bytes.
	DomainCopiesInline uint64 `json:"domain_copies_inline"`
	DomainCopiesFrame  uint64 `json:"domain_copies_frame"`
	DomainCopiesFrag   uint64 `json:"domain_copies_frag"`
	DomainCopyBytes    uint64 `json:"domain_copy_bytes"`
	// VLANRestored counts packets received on this link whose VLAN tag the
	// sender or the NIC had offloaded (kept out of the frame) and that
	// xdpfwd put back into the frame.
	VLANRestored uint64 `json:"vlan_tags_restored"`

	// KickErrors counts TX wake-ups (sendto) that failed, mostly while the
	// link was down. Not a drop: the descriptors stay on the TX ring and
	// leave when the link is back.
	KickErrors uint64 `json:"tx_kick_errors"`

	// LinkDowns counts the times the link went down while forwarding;
	// DownSeconds is the total time it was down.
	LinkDowns   uint64  `json:"link_downs"`
	DownSeconds float64 `json:"down_seconds"`

	// What the packets cost in system calls and batches.
	// TXKicks counts the sendto calls that woke the kernel to transmit
	// on this link (failed ones included: KickErrors).
	TXKicks uint64 `json:"tx_kicks"`
	// FillWakeups counts the recvfrom calls that woke the kernel for the
	// fill rings of this link's sockets (need_wakeup set on the fill ring).
	FillWakeups uint64 `json:"rx_fill_wakeups"`
	// RXLend is how many frames the link's fill rings keep lent to the
	// kernel now (rxring.Ring.SetLend, Plan.socketRings): the whole fill
	// rings, on a copy-mode link down to a few batches per worker in a
	// flood, more while it takes bursts. RXLendGrowths counts the times a
	// burst doubled one.
	RXLend        uint64 `json:"rx_lend"`
	RXLendGrowths uint64 `json:"rx_lend_growths"`
	// RXBatches counts the batches read from this link's RX rings;
	// RXBatchPackets is a histogram of them by packets per batch, keyed
	// by BatchBucketNames ("1", "2", "3-4", … "65+").
	RXBatches      uint64            `json:"rx_batches"`
	RXBatchPackets map[string]uint64 `json:"rx_batch_packets"`
}

// BatchBuckets are the upper bounds of the RX batch-size histogram
// (packets per batch); a last bucket holds the larger batches.
var BatchBuckets = [...]int{1, 2, 4, 8, 16, 32, 64}

// numBatchBuckets is len(BatchBuckets) plus the bucket above the last bound.
const numBatchBuckets = len(BatchBuckets) + 1

// BatchBucketNames name the histogram's buckets in LinkStats.RXBatchPackets:
// "1", "2", "3-4", "5-8", … "33-64", "65+".
var BatchBucketNames = func() [numBatchBuckets]string {
	var n [numBatchBuckets]string
	lo := 1
	for i, hi := range BatchBuckets {
		if lo == hi {
			n[i] = strconv.Itoa(hi)
		} else {
			n[i] = strconv.Itoa(lo) + "-" + strconv.Itoa(hi)
		}
		lo = hi + 1
	}
	n[len(BatchBuckets)] = strconv.Itoa(lo) + "+"
	return n
}()

// batchBucket is the histogram bucket of a batch of n packets.
func batchBucket(n int) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len(uint(n-1)), len(BatchBuckets))
}

// Drop reasons. The kernel's come from XDP_STATISTICS of every socket.
const (
	DropRXDropped     = "rx_dropped"               // kernel: no room or frame too long
	DropRXRingFull    = "rx_ring_full"             // kernel: our RX ring was full
	DropFillRingEmpty = "rx_fill_ring_empty_descs" // kernel: no frame to receive into (also in rx_dropped)
	DropRXInvalid     = "rx_invalid_descs"         // kernel: bad fill address
	DropTXInvalid     = "tx_invalid_descs"         // kernel: bad TX descriptor
	DropUMEMExhausted = "umem_exhausted"           // us: fill refill found no free frame
	DropRXBadDesc     = "rx_bad_descs"             // us: RX descriptor outside the frame zone, never followed
	DropTXNoRoom      = "tx_no_layout"             // us: a chain too long to send and no frag block to repack it
	DropHandoffFull   = "handoff_full"             // us: the ring to the worker owning the flow's TX queue was full
	DropRXTooLong     = "rx_too_many_frags"        // us: a packet of more descriptors than a TX ring takes (18), dropped whole
	DropRXTruncated   = "rx_truncated"             // us: shorter than its IPv4 total / IPv6 payload length says: cut on its way in (a NIC buffer too short), dropped
	DropAtStop        = "dropped_at_stop"          // us: handed to a TX queue and still waiting when the forwarder closed
	DropHandler       = "handler_drops"            // the Handler dropped it (sink mode, a filter), gave no verdict, or changed its Len
	DropTXFull        = "tx_full"                  // a Handler sent it to a TX queue with no room: its link down
	DropXDPPass       = "xdp_pass"                 // program: no socket for the RX queue, passed to the kernel's stack (per link, not per queue)
	DropSpoofedSource = "spoofed_source"           // a Handler's policy: a source MAC address its link may not use (switch port security)
	DropSpoofedIP     = "spoofed_ip"               // a Handler's policy: a sender IP address its link may not use (switch port security)
	DropRXRateLimited = "rx_rate_limited"          // a Handler's policy: sent by its link over the rate the link is policed to (a pod's egress bandwidth)
	DropTXRateLimited = "tx_rate_limited"          // a Handler's policy: for its link, over the rate the link is policed to (a pod's ingress bandwidth), not sent
	DropSpoofedVLAN   = "spoofed_vlan"             // a Handler's policy: tagged for a VLAN its link is not in (switch port security)
	DropRogueServer   = "rogue_server"             // a Handler's policy: a router's or DHCP server's message from a host's link (switch port security)
	DropUnverifiable  = "unverifiable"             // a Handler's policy: a frame it must read to judge and cannot (switch port security)
)

// KernelDrops are the drop reasons read from the kernel's XDP_STATISTICS:
// a queue's LinkStats.Drops has them only when its socket could be read.
var KernelDrops = [...]string{DropRXDropped, DropRXRingFull, DropFillRingEmpty, DropRXInvalid, DropTXInvalid}

// DropReasons lists every key of a queue's LinkStats.Drops (xdp_pass,
// counted per link, aside): the kernel's, then the rings', then the
// engine's own, one per reason it abandons a packet for. For an exporter
// that shows every reason from the start.
func DropReasons() []string {
	r := append(KernelDrops[:len(KernelDrops):len(KernelDrops)], DropUMEMExhausted, DropRXBadDesc, DropRXTooLong)
	for _, d := range drops {
		if d.name != "" {
			r = append(r, d.name)
		}
	}
	return r
}

// LinkStats returns the counters of link i (its index in Config.Links),
// summed over its queues. It is safe to call while the forwarder runs: it
// sums per-worker atomics and reads the kernel's statistics with one
// getsockopt per socket. It is safe alongside Close too, and returns zero
// values once Close began.
func (f *Forwarder) LinkStats(i int) LinkStats {
	// One read lock for the whole reading: a nested RLock would deadlock
	// behind a Close waiting for the write lock.
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return f.linkStats(i)
}

// XDPPassed is how many packets link i's XDP program passed to the
// kernel's stack for want of a socket: counted per link, not per queue.
func (f *Forwarder) XDPPassed(i int) uint64 {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	if f.closedLocked() || f.progs[i] == nil {
		return 0
	}
	n, _ := f.progs[i].Passed()
	return n
}

// closedLocked reports, under teardown.mu, whether Close has torn the
// forwarder down: Close closes the sockets holding teardown.mu (f.life.closed is
// written before that, so it cannot be read under teardown.mu alone).
func (f *Forwarder) closedLocked() bool { return f.teardown.torn }

func (f *Forwarder) linkStats(i int) LinkStats {
	l := newLinkStats()
	if f.closedLocked() {
		return l
	}
	for q := range f.ports[i] {
		l.add(f.queueStats(i, q))
	}
	if p := f.progs[i]; p != nil {
		l.XDPMode = p.Mode()
		// Not a drop of xdpfwd's, but packets that never went through it:
		// before the sockets were registered, after Stop, or on a queue
		// without a socket.
		if n, err := p.Passed(); err == nil {
			l.Drops[DropXDPPass] = n
		}
	}
	if len(f.socks[i]) > 0 && f.socks[i][0] != nil {
		l.BindMode = f.socks[i][0].BindMode()
	}
	l.Domain = f.doms[f.links[i].dom].Name
	l.Queues = len(f.ports[i])
	l.LinkDowns = f.health[i].downs.Load()
	l.DownSeconds = f.health[i].downTime().Seconds()
	return l
}

func newLinkStats() LinkStats {
	l := LinkStats{Drops: map[string]uint64{}, TXPaths: map[string]uint64{}, DescsPerPacket: map[string]uint64{},
		RXBatchPackets: make(map[string]uint64, numBatchBuckets)}
	for p := range linearize.NumPaths {
		l.TXPaths[p.String()] = 0
	}
	for _, b := range BatchBucketNames {
		l.RXBatchPackets[b] = 0
	}
	return l
}

func (l *LinkStats) add(o LinkStats) {
	for _, f := range linkCounts {
		if f != nil {
			*f(l) += *f(&o)
		}
	}
	for _, f := range ringCounts {
		*f(l) += *f(&o)
	}
	for k, v := range o.RXBatchPackets {
		l.RXBatchPackets[k] += v
	}
	for k, v := range o.Drops {
		l.Drops[k] += v
	}
	for k, v := range o.TXPaths {
		l.TXPaths[k] += v
	}
	for k, v := range o.DescsPerPacket {
		l.DescsPerPacket[k] += v
	}
}

// QueueStats returns the counters of queue q of link i; zero values once
// Close began.
func (f *Forwarder) QueueStats(i, q int) LinkStats {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return f.queueStats(i, q)
}

func (f *Forwarder) queueStats(i, q int) LinkStats {
	l := newLinkStats()
	if q >= len(f.ports[i]) || f.closedLocked() {
		return l
	}
	l.Queues = 1
	p := f.ports[i][q]
	for c, f := range linkCounts {
		if f != nil {
			*f(&l) = p.stats.load(count(c))
		}
	}
	for r, d := range drops {
		if d.name != "" {
			l.Drops[d.name] = p.stats.load(cDrops + count(r))
		}
	}
	l.Drops[DropRXBadDesc] = p.rx.Invalid.Load() + p.stats.load(cBadCompletions)
	l.Drops[DropRXTooLong] = p.rx.TooLong.Load()
	l.Drops[DropUMEMExhausted] = p.rx.FillShort.Load()
	if p.tx != nil {
		l.TXKicks, l.KickErrors = p.tx.kicks()
	}
	l.FillWakeups = p.rx.FillWakeups.Load()
	l.RXLend, l.RXLendGrowths = uint64(p.rx.Lend.Load()), p.rx.LendGrew.Load()
	for b, name := range BatchBucketNames {
		l.RXBatchPackets[name] = p.stats.batchHist[b].Load()
	}
	for path := range linearize.NumPaths {
		l.TXPaths[path.String()] = p.stats.txPaths[path].Load()
	}
	for k := 1; k <= linearize.MaxDescs; k++ {
		if v := p.stats.descHist[k].Load(); v != 0 {
			l.DescsPerPacket[strconv.Itoa(k)] = v
		}
	}
	if ks, err := f.kernelStats(i, q); err == nil {
		l.Drops[DropRXDropped] = ks.Rx_dropped
		l.Drops[DropRXRingFull] = ks.Rx_ring_full
		l.Drops[DropFillRingEmpty] = ks.Rx_fill_ring_empty_descs
		l.Drops[DropRXInvalid] = ks.Rx_invalid_descs
		l.Drops[DropTXInvalid] = ks.Tx_invalid_descs
	}
	return l
}

// KernelStats returns the kernel's XDP_STATISTICS of the socket of link i,
// queue q.
func (f *Forwarder) KernelStats(i, q int) (xsk.Stats, error) {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return f.kernelStats(i, q)
}

func (f *Forwarder) kernelStats(i, q int) (xsk.Stats, error) {
	if f.closedLocked() || q >= len(f.socks[i]) || f.socks[i][q] == nil {
		return xsk.Stats{}, fmt.Errorf("link %d queue %d: no socket", i, q)
	}
	return f.socks[i][q].Stats()
}

// ZoneUsage is one UMEM zone's occupancy.
type ZoneUsage struct {
	Name      string
	Units     int
	UnitBytes int
	FreeUnits int // in the pool or a worker's cache, as last published
}

// Zones returns the UMEM zones' occupancy, approximate while running
// (caches publish their fill level once per batch).
func (f *Forwarder) Zones() []ZoneUsage {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	var out []ZoneUsage
	for _, d := range f.doms {
		for _, z := range d.region.Zones() {
			// With two domains each zone is named for its domain too:
			// "copy.frames".
			name := z.Name()
			if d.Name != "" {
				name = d.Name + "." + name
			}
			out = append(out, ZoneUsage{Name: name, Units: z.Len(), UnitBytes: z.UnitSize(), FreeUnits: z.FreeUnits()})
		}
	}
	return out
}

// TotalDrops sums the drop reasons, each packet once.
func (l LinkStats) TotalDrops() uint64 {
	var n uint64
	for k, v := range l.Drops {
		// rx_fill_ring_empty_descs packets are in rx_dropped too, and
		// umem_exhausted counts failed refills, not packets (their
		// packets show up as rx_fill_ring_empty_descs).
		if k != DropFillRingEmpty && k != DropUMEMExhausted {
			n += v
		}
	}
	return n
}

// txSideDrops are the drop reasons counted on the link a packet was to
// leave by, not the one it arrived on: the kernel's tx_invalid_descs and
// the engine's marked tx (abandon.go: drops).
var txSideDrops = func() []string {
	s := []string{DropTXInvalid}
	for _, d := range drops {
		if d.tx {
			s = append(s, d.name)
		}
	}
	return s
}()

// TXDrops is the part of TotalDrops counted on the way out of the link
// (handoff_full, tx_no_layout, tx_full, dropped_at_stop, tx_invalid_descs,
// tx_rate_limited, ...): drops of what other links sent towards it.
func (l LinkStats) TXDrops() uint64 {
	var n uint64
	for _, k := range txSideDrops {
		n += l.Drops[k]
	}
	return n
}

// UMEMSummary describes the region in the summary.
type UMEMSummary struct {
	Backing         string `json:"backing"`
	SizeBytes       int    `json:"size_bytes"`
	LeakedAddresses int    `json:"leaked_addresses"`
	// StrandedTX counts TX descriptors the kernel still held at shutdown
	// (a link down or deleted): released with the sockets, not leaked.
	StrandedTX int `json:"stranded_tx_descriptors"`
	// OwnershipViolations counts units found somewhere other than where
	// their owner believed: 0 unless there is a bug.
	OwnershipViolations uint64 `json:"ownership_violations"`
}

// DomainSummary describes one UMEM domain in the summary.
type DomainSummary struct {
	// Name is "zerocopy" or "copy" with two domains, "" with one.
	Name string `json:"name"`
	// BindMode is how its sockets are bound: "zerocopy" or "copy".
	BindMode string `json:"bind_mode"`
	// Links are the links bound in it when the summary was taken.
	Links     []string `json:"links"`
	SizeBytes int      `json:"size_bytes"`
	// LeakedAddresses and StrandedTX are UMEMSummary's, for this
	// domain's UMEM alone.
	LeakedAddresses int `json:"leaked_addresses"`
	StrandedTX      int `json:"stranded_tx_descriptors"`
}

// domainSummaries describes the domains; teardown.mu is held.
func (f *Forwarder) domainSummaries() []DomainSummary {
	out := make([]DomainSummary, len(f.doms))
	for d, dm := range f.doms {
		out[d] = DomainSummary{Name: dm.Name, BindMode: dm.bindMode(), Links: []string{}, SizeBytes: dm.region.Size()}
	}
	for _, l := range f.links {
		if l.name != "" {
			out[l.dom].Links = append(out[l.dom].Links, l.name)
		}
	}
	return out
}

// OwnershipViolations sums the UMEM zones' ownership violations so far.
func (f *Forwarder) OwnershipViolations() uint64 {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	var n uint64
	for _, d := range f.doms {
		for _, z := range d.region.Zones() {
			n += z.Violations()
		}
	}
	return n
}

// Summary is the --summary JSON document. Later versions add fields and
// never rename these.
type Summary struct {
	// Links are the links by name: those forwarded, and the last 64
	// removed while running; RemovedOlder sums the ones removed before.
	Links        map[string]LinkStats `json:"links"`
	RemovedOlder *RemovedSummary      `json:"removed_older,omitempty"`
	UMEM         UMEMSummary          `json:"umem"`
	// Domains are the UMEMs one by one (domain.go); DomainCopies counts
	// the packets copied from one into another by TX path (inline,
	// frame, frag), DomainCopyBytes their bytes.
	Domains         []DomainSummary   `json:"umem_domains"`
	DomainCopies    map[string]uint64 `json:"domain_copies"`
	DomainCopyBytes uint64            `json:"domain_copy_bytes"`
	DurationS       float64           `json:"duration_s"`

	// Totals over every link of the TX layout accounting.
	TXPaths         map[string]uint64 `json:"tx_paths"`
	TXDescriptors   uint64            `json:"tx_descriptors"`
	InlineFallbacks uint64            `json:"inline_fallbacks"`
	// PagesPer1KDesc is the mean number of distinct UMEM pages touched per
	// 1,000 TX descriptors, at 4 KiB ("4k") and 2 MiB ("2m") granularity.
	PagesPer1KDesc map[string]float64 `json:"pages_per_1k_desc"`

	XPS XPSSummary `json:"xps"`

	// Workers are each worker's loop counters; Efficiency relates them
	// and the links' kicks, fill wake-ups and batches to the packets
	// received, per 1,000.
	Workers    []WorkerStats `json:"workers"`
	Efficiency Efficiency    `json:"efficiency"`
}

// WorkerStats are one worker's loop counters: what its thread did besides
// moving packets. Only the worker writes them, once per round or sleep,
// but StoodIn, which the worker standing in for it writes.
type WorkerStats struct {
	Worker int `json:"worker"`
	// Rounds counts passes over its rings (refill, forward, merge, reap),
	// busy or empty: spinning shows as many rounds per packet.
	Rounds uint64 `json:"rounds"`
	// Sleeps counts the times it went to sleep: in ppoll, or in
	// nanosleep while a link was down.
	Sleeps uint64 `json:"sleeps"`
	// Polls counts ppoll returns; PollTimeouts those that found nothing
	// ready; PollEventfd those that found its eventfd ready: another
	// worker handed it packets (several queues only).
	Polls        uint64 `json:"polls"`
	PollTimeouts uint64 `json:"poll_timeouts"`
	PollEventfd  uint64 `json:"poll_eventfd_wakeups"`
	// EventfdWrites counts the eventfd writes other workers made to wake
	// it: system calls on their threads.
	EventfdWrites uint64 `json:"eventfd_writes"`
	// ReplyWindow is how long it polls its rings after forwarding, for
	// the answer to come (0: only the short spin); ReplyCaught counts
	// the packets that came within it, each a wake-up saved (Config.Spin).
	ReplyWindow time.Duration `json:"reply_window_ns"`
	ReplyCaught uint64        `json:"reply_caught"`
	// CadenceCaught counts the packets of new work that came while it
	// polled the window they were due in (new work at a steady
	// interval: it slept until just before), each a wake-up saved.
	CadenceCaught uint64 `json:"cadence_caught"`
	// StoodIn counts the times another worker, having handed it packets
	// while it slept, sent them in its place instead of waking it.
	StoodIn uint64 `json:"stood_in"`
	// KickPolls counts the ppoll calls that kicked several of its TX
	// rings at once, in place of a sendto each.
	KickPolls uint64 `json:"kick_polls"`
	// ColdSockets is how many of its sockets, quiet for a while, its
	// sleep now waits on through an epoll rather than polling each, and
	// its rounds read less often;
	// Coolings and Warmings count the moves there and back, and
	// ColdFailures the sockets the epoll could not take or let go of
	// (they are polled directly: a sleep costs more, nothing is missed).
	ColdSockets  int64  `json:"cold_sockets"`
	Coolings     uint64 `json:"socket_coolings"`
	Warmings     uint64 `json:"socket_warmings"`
	ColdFailures uint64 `json:"cold_failures"`
}

// Efficiency is the cost side of a span of forwarding, per 1,000 packets
// received (every link, all queues): system calls, sleeps and batches.
type Efficiency struct {
	RXPackets uint64 `json:"rx_packets"`
	// Per 1,000 packets received.
	Rounds      float64 `json:"rounds_per_1k"`
	Sleeps      float64 `json:"sleeps_per_1k"`
	Polls       float64 `json:"polls_per_1k"`
	Wakeups     float64 `json:"wakeups_per_1k"` // ppoll returns with something ready
	Kicks       float64 `json:"tx_kicks_per_1k"`
	FillWakeups float64 `json:"fill_wakeups_per_1k"`
	Batches     float64 `json:"rx_batches_per_1k"`
	// Syscalls sums the datapath's system calls: ppoll (sleeps and kick
	// polls), nanosleep, sendto (kicks), recvfrom (fill wake-ups), eventfd
	// reads and writes.
	Syscalls float64 `json:"syscalls_per_1k"`
	// MeanBatch is packets per RX batch.
	MeanBatch float64 `json:"mean_rx_batch"`
}

// NewEfficiency relates the counters' growth between two readings (prev
// may be zero values: since the start) to the packets received in between.
func NewEfficiency(prevL, curL []LinkStats, prevW, curW []WorkerStats) Efficiency {
	var e Efficiency
	var kicks, fill, batches uint64
	for i := range curL {
		var p LinkStats
		if i < len(prevL) {
			p = prevL[i]
		}
		e.RXPackets += curL[i].RXPackets - p.RXPackets
		kicks += curL[i].TXKicks - p.TXKicks
		fill += curL[i].FillWakeups - p.FillWakeups
		batches += curL[i].RXBatches - p.RXBatches
	}
	var rounds, sleeps, polls, timeouts, evRead, evWrite, kickPolls uint64
	for i := range curW {
		var p WorkerStats
		if i < len(prevW) {
			p = prevW[i]
		}
		c := curW[i]
		rounds += c.Rounds - p.Rounds
		sleeps += c.Sleeps - p.Sleeps
		polls += c.Polls - p.Polls
		timeouts += c.PollTimeouts - p.PollTimeouts
		evRead += c.PollEventfd - p.PollEventfd
		evWrite += c.EventfdWrites - p.EventfdWrites
		kickPolls += c.KickPolls - p.KickPolls
	}
	if e.RXPackets == 0 {
		return e
	}
	per := func(v uint64) float64 { return 1000 * float64(v) / float64(e.RXPackets) }
	e.Rounds, e.Sleeps, e.Polls = per(rounds), per(sleeps), per(polls)
	e.Wakeups = per(polls - timeouts)
	e.Kicks, e.FillWakeups, e.Batches = per(kicks), per(fill), per(batches)
	// Every sleep is one ppoll or one nanosleep.
	e.Syscalls = per(sleeps + kickPolls + kicks + fill + evRead + evWrite)
	if batches > 0 {
		e.MeanBatch = float64(e.RXPackets) / float64(batches)
	}
	return e
}

// WorkerStats returns every worker's loop counters; nil once Close began.
func (f *Forwarder) WorkerStats() []WorkerStats {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return f.workerStats()
}

func (f *Forwarder) workerStats() []WorkerStats {
	if f.closedLocked() {
		return nil
	}
	out := make([]WorkerStats, len(f.workers))
	for i, w := range f.workers {
		out[i] = WorkerStats{
			Worker:        w.q,
			Rounds:        w.progress.rounds.Load(),
			Sleeps:        w.sleeps.Load(),
			Polls:         w.polls.Load(),
			PollTimeouts:  w.pollTimeouts.Load(),
			PollEventfd:   w.pollEventfd.Load(),
			EventfdWrites: w.wake.wakes.Load(),
			ReplyWindow:   time.Duration(w.replyWindow.Load()),
			ReplyCaught:   w.replyCaught.Load(),
			CadenceCaught: w.cadenceCaught.Load(),
			StoodIn:       w.stoodIn.Load(),
			KickPolls:     w.lanes.kickPolls.Load(),
			ColdSockets:   w.waits.moves.cold.Load(),
			Coolings:      w.waits.moves.coolings.Load(),
			Warmings:      w.waits.moves.warmings.Load(),
			ColdFailures:  w.waits.moves.failed.Load(),
		}
	}
	return out
}

// XPSSummary describes TX queue selection.
type XPSSummary struct {
	Mode          string `json:"mode"`
	Queues        int    `json:"queues"` // TX queues flows are spread over now
	Flows         uint64 `json:"flows"`  // flow entries created
	Moves         uint64 `json:"moves"`
	DeferredMoves uint64 `json:"deferred_moves"`
	Evictions     uint64 `json:"evictions"`
	Fallbacks     uint64 `json:"fallbacks"` // packets sent by hash: table bucket all in flight
	TableSize     uint64 `json:"table_size"`
	TableEntries  uint64 `json:"table_entries"`
	// InFlight is what the flow table counts as sent and not yet
	// completed, all queues: 0 once the forwarder is quiet.
	InFlight int64 `json:"in_flight"`
	// Underflows counts completions the flow table had not seen sent
	// (xps.Stats.Underflows): an accounting defect, 0 when all is well.
	Underflows uint64 `json:"in_flight_underflows"`
	// TXQueuePackets lists, per link, the packets sent on each TX queue.
	TXQueuePackets map[string][]uint64 `json:"tx_queue_packets"`
}

// XPS returns the queue selection summary; zero values once Close began.
func (f *Forwarder) XPS() XPSSummary {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	return f.xps()
}

func (f *Forwarder) xps() XPSSummary {
	if f.closedLocked() {
		return XPSSummary{TXQueuePackets: map[string][]uint64{}}
	}
	x := XPSSummary{Mode: "single-queue", Queues: f.plan.Queues, TXQueuePackets: map[string][]uint64{}}
	for i, l := range f.links {
		if f.ports[i] == nil {
			continue // removed, or being added (links.go)
		}
		for _, w := range f.workers {
			x.TXQueuePackets[l.name] = append(x.TXQueuePackets[l.name], f.ports[i][w.q].stats.load(cTXPackets))
		}
	}
	if f.flows == nil {
		return x
	}
	st := f.flows.table.Stats()
	x.Mode = st.Mode
	x.Queues = int(f.flows.active.Load())
	x.Flows, x.Moves, x.DeferredMoves = st.Flows, st.Moves, st.DeferredMoves
	x.Evictions, x.Fallbacks = st.Evictions, st.Fallbacks
	x.TableSize, x.TableEntries = st.Size, st.Entries
	x.InFlight, x.Underflows = st.InFlight, st.Underflows
	return x
}

// PagesPer1K averages the workers' page meters.
func (f *Forwarder) PagesPer1K() (p4k, p2m float64) {
	var s4, s2, w uint64
	for _, wk := range f.workers {
		a, b, c := wk.layout.meter.Sums()
		s4, s2, w = s4+a, s2+b, w+c
	}
	if w == 0 {
		return 0, 0
	}
	return float64(s4) / float64(w), float64(s2) / float64(w)
}

// Summary collects the final counters; call it after Run returned and
// before Close, then read Leaked after Close (Shutdown does both). Once
// Close began it returns zero values.
func (f *Forwarder) Summary() Summary {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	s := Summary{Links: map[string]LinkStats{}, TXPaths: map[string]uint64{}, DomainCopies: map[string]uint64{}}
	if f.closedLocked() {
		return s
	}
	var links []LinkStats
	for i, l := range f.links {
		if l.name == "" {
			continue // a hole a removed link left (links.go)
		}
		ls := f.linkStats(i)
		if r, ok := f.linkOps.removed.byName[l.name]; ok {
			ls.add(r) // removed, then added again
		}
		links = append(links, ls)
		s.Links[l.name] = ls
		for k, v := range ls.TXPaths {
			s.TXPaths[k] += v
		}
		s.TXDescriptors += ls.TXDescriptors
		s.InlineFallbacks += ls.InlineFallbacks
	}
	for name, ls := range f.linkOps.removed.byName {
		if _, ok := s.Links[name]; !ok {
			s.Links[name] = ls
			links = append(links, ls)
		}
	}
	if r := &f.linkOps.removed; r.olderLinks > 0 {
		s.RemovedOlder = &RemovedSummary{Links: r.olderLinks, Totals: r.older}
		links = append(links, r.older)
	}
	p4, p2 := f.PagesPer1K()
	s.PagesPer1KDesc = map[string]float64{"4k": p4, "2m": p2}
	s.XPS = f.xps()
	s.Workers = f.workerStats()
	s.Efficiency = NewEfficiency(nil, links, nil, s.Workers)
	if len(f.doms) > 0 {
		s.UMEM = UMEMSummary{Backing: string(f.doms[0].region.Backing()), SizeBytes: f.umemBytes()}
		s.Domains = f.domainSummaries()
	}
	for _, ls := range links {
		s.DomainCopies["inline"] += ls.DomainCopiesInline
		s.DomainCopies["frame"] += ls.DomainCopiesFrame
		s.DomainCopies["frag"] += ls.DomainCopiesFrag
		s.DomainCopyBytes += ls.DomainCopyBytes
	}
	end := f.life.stopped
	if end.IsZero() {
		end = time.Now()
	}
	if !f.life.started.IsZero() {
		s.DurationS = end.Sub(f.life.started).Seconds()
	}
	return s
}

// Shutdown is the end of a run: it takes the summary, closes the forwarder
// and records what leaked. The summary is returned even if Close fails.
func (f *Forwarder) Shutdown() (Summary, error) {
	s := f.Summary()
	err := f.Close()
	s.UMEM.LeakedAddresses = f.Leaked()
	s.UMEM.StrandedTX = f.life.stranded
	s.UMEM.OwnershipViolations = f.life.violations
	for d := range s.Domains {
		s.Domains[d].LeakedAddresses = f.doms[d].leaked
		s.Domains[d].StrandedTX = f.doms[d].stranded
	}
	return s, err
}
