// Package metrics exports a running fwd.Forwarder's counters to Prometheus.
//
// The Collector reads the forwarder at scrape time: it sums nothing per
// packet and keeps no counters of its own. Each scrape loads the workers'
// atomics (fwd.QueueStats), reads the kernel's XDP_STATISTICS with one
// getsockopt per socket (fwd.KernelStats) and the UMEM zones' published
// fill levels (fwd.Zones). The Server adds /metrics and /healthz over it.
//
// Once the forwarder stops (the Server's health function reports an error,
// or Collector.Freeze is called), the Collector no longer touches it and
// serves the last values it read, so a scrape racing with fwd.Close never
// reads a socket or a ring that is being torn down.
//
// README.md beside this file documents every metric.
package metrics

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Namespace prefixes every metric name.
const Namespace = "xdpfwd"

// DescBuckets are the upper bounds of the xdpfwd_tx_descriptors_per_packet
// histogram. A packet never leaves as more than linearize.MaxDescs
// descriptors, so the last bound holds every packet, like +Inf.
var DescBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 12, linearize.MaxDescs}

// source is what the Collector reads; *fwd.Forwarder implements it. Tests
// substitute a fake.
type source interface {
	Links() []string
	Queues() int
	LinkQueues(link int) int
	QueueStats(link, queue int) fwd.LinkStats
	KernelStats(link, queue int) (xsk.Stats, error)
	Zones() []fwd.ZoneUsage
	PagesPer1K() (p4k, p2m float64)
	OwnershipViolations() uint64
	XDPPassed(link int) uint64
	WorkerStats() []fwd.WorkerStats
	InlineBytes() int
}

// Info is what xdpfwd_info and xdpfwd_link_info report. It does not change
// while the forwarder runs, so it is read once, before the run.
type Info struct {
	Version  string
	XDPModes []string // per link: native or generic
	BindMode string   // zerocopy or copy, or "mixed" when the links' UMEM domains differ
	// UMEMBacking is hugetlb-2MiB, thp-2MiB or 4KiB.
	UMEMBacking string
}

// mixedMode is xdpfwd_info's xdp_mode or bind_mode when the links
// differ; the per-link modes are in xdpfwd_link_info.
const mixedMode = "mixed"

// Collector is a prometheus.Collector over a forwarder. Build it with
// NewCollector before the forwarder runs.
type Collector struct {
	src        source
	info       Info
	links      []string
	queues     int
	linkQueues []int
	logger     *slog.Logger

	// live, if set, reports whether the forwarder may still be read; once
	// it returns an error the Collector freezes for good.
	live func() error
	// pods, if set, names a link's pod (Options.Pods).
	pods func(link string) (Pod, bool)

	mu     sync.Mutex // serializes scrapes; guards the fields below
	frozen bool
	last   *snapshot // the latest reading; never nil after NewCollector

	d descs
}

// NewCollector returns a Collector over f, labelled with version. Call it
// after fwd.New and before (or while) Run: it takes a first reading at once,
// so a Collector frozen before its first scrape still has values to serve.
func NewCollector(f *fwd.Forwarder, version string) *Collector {
	info := Info{Version: version, XDPModes: make([]string, len(f.Links()))}
	for i := range info.XDPModes {
		ls := f.LinkStats(i)
		info.XDPModes[i] = ls.XDPMode
		switch info.BindMode {
		case "":
			info.BindMode = ls.BindMode
		case ls.BindMode, mixedMode:
		default:
			info.BindMode = mixedMode // zero-copy NICs, copy-mode veths (fwd's UMEM domains)
		}
	}
	if r := f.Region(); r != nil {
		info.UMEMBacking = string(r.Backing())
	}
	return newCollector(f, info)
}

// linkQueues lists the RX queue count of each of src's links.
func linkQueues(src source) []int {
	n := make([]int, len(src.Links()))
	for i := range n {
		n[i] = src.LinkQueues(i)
	}
	return n
}

func newCollector(src source, info Info) *Collector {
	c := &Collector{
		src:        src,
		info:       info,
		links:      src.Links(),
		queues:     src.Queues(),
		linkQueues: linkQueues(src),
		logger:     slog.New(slog.DiscardHandler),
		d:          newDescs(),
	}
	c.last = c.read()
	return c
}

// Freeze stops the Collector from reading the forwarder: every later scrape
// serves the values of the last one. Call it before fwd.Close (or
// Shutdown). It waits for a scrape in progress to finish.
func (c *Collector) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

// Frozen reports whether Freeze was called or the health function failed.
func (c *Collector) Frozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

// descs are the metric descriptors, one per family.
type descs struct {
	rxPackets, rxBytes, txPackets, txBytes *prometheus.Desc
	drops                                  *prometheus.Desc
	txPath, txDescs, inlineFallbacks       *prometheus.Desc
	domainCopies, domainCopyBytes          *prometheus.Desc
	kickErrors, csumCompleted              *prometheus.Desc
	descsPerPacket                         *prometheus.Desc
	txKicks, fillWakeups, rxBatchPackets   *prometheus.Desc
	rxLend, rxLendGrowths                  *prometheus.Desc

	wRounds, wSleeps, wPolls, wPollTimeouts   *prometheus.Desc
	wPollEventfd, wEventfdWrites              *prometheus.Desc
	wColdSockets, wSocketMoves, wColdFailures *prometheus.Desc
	wReplyCaught, wReplyWindow, wStoodIn      *prometheus.Desc
	wCadenceCaught                            *prometheus.Desc
	wKickPolls                                *prometheus.Desc

	xskRXDropped, xskRXInvalid, xskTXInvalid        *prometheus.Desc
	xskRXRingFull, xskFillRingEmpty, xskTXRingEmpty *prometheus.Desc

	zoneUnits, zoneFree, zoneUnitBytes *prometheus.Desc
	pagesPer1K, violations             *prometheus.Desc

	info, linkInfo, queues, inlineMax *prometheus.Desc

	// Flow table (the xps work): add its descriptors here, e.g.
	//   flowEntries  xdpfwd_flow_table_entries           gauge
	//   flowCapacity xdpfwd_flow_table_capacity_entries  gauge
	//   flowMoves    xdpfwd_flow_moves_total             counter
	// (and the rest of fwd.XPSSummary: flows, deferred moves, evictions,
	// fallbacks as counters, active queues as a gauge, mode as an info
	// label), read them with Forwarder.XPS in (*Collector).read, emit them
	// in (*Collector).emit beside "Flow table" there, add them to
	// Describe, and document them in README.md.
}

func newDescs() descs {
	// A link's series name the pod it serves, if any (Options.Pods).
	lq := []string{"link", "namespace", "pod", "queue"}
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	d := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name(n), help, labels, nil)
	}
	return descs{
		rxPackets: d("rx_packets_total", "Frames received on the link's queue and handed to xdpfwd.", lq...),
		rxBytes:   d("rx_bytes_total", "Bytes of the frames received on the link's queue (Ethernet header included).", lq...),
		txPackets: d("tx_packets_total", "Frames xdpfwd transmitted on the link's queue.", lq...),
		txBytes:   d("tx_bytes_total", "Bytes of the frames xdpfwd transmitted on the link's queue (Ethernet header included).", lq...),
		drops: d("drops_total", "Frames lost, by reason. Kernel reasons mirror the xdpfwd_xsk_* counters; "+
			"rx_fill_ring_empty_descs is a subset of rx_dropped, so leave it out when summing reasons.", append(lq, "reason")...),
		txPath:          d("tx_path_packets_total", "Frames transmitted on the link's queue, by TX layout: inline, frame, frag or chain.", append(lq, "path")...),
		txDescs:         d("tx_descriptors_total", "TX descriptors posted on the link's queue.", lq...),
		inlineFallbacks: d("inline_fallbacks_total", "Small frames that found no free inline slot and left from their RX frame (or chain) instead.", lq...),
		domainCopies: d("domain_copies_total", "Frames transmitted on the link's queue that were copied from another UMEM domain (a zero-copy NIC's into a copy-mode pod's, or back), by the TX path of the copy: inline, frame or frag.",
			append(lq, "path")...),
		domainCopyBytes: d("domain_copy_bytes_total", "Bytes of the frames copied from another UMEM domain to leave on the link's queue.", lq...),
		kickErrors:      d("tx_kick_errors_total", "TX wake-ups (sendto) that failed, mostly while the link was down; not drops: the descriptors stay queued.", lq...),
		csumCompleted:   d("checksums_completed_total", "Frames received with a partial TCP/UDP checksum (left for offload) that xdpfwd finished.", lq...),
		descsPerPacket:  d("tx_descriptors_per_packet", "TX descriptors each frame transmitted on the link's queue took.", lq...),
		txKicks:         d("tx_kicks_total", "TX wake-ups (sendto) made for the link's queue, failed ones included.", lq...),
		fillWakeups:     d("rx_fill_wakeups_total", "Fill-ring wake-ups (recvfrom) made for the link's queue's socket.", lq...),
		rxLend:          d("rx_lend_frames", "Frames the link's queue's fill ring keeps lent to the kernel now: what its ring size gives, more on a copy-mode link taking bursts.", lq...),
		rxLendGrowths:   d("rx_lend_growths_total", "Times a burst doubled the frames the link's queue's fill ring lends.", lq...),
		rxBatchPackets:  d("rx_batch_packets", "Packets per batch read from the link's queue's RX ring; _count is the batches.", lq...),

		wRounds:        d("worker_rounds_total", "Passes of the worker's loop over its rings, busy or empty.", "worker"),
		wSleeps:        d("worker_sleeps_total", "Times the worker slept: in ppoll, or in nanosleep while a link was down.", "worker"),
		wPolls:         d("worker_polls_total", "ppoll returns of the worker.", "worker"),
		wPollTimeouts:  d("worker_poll_timeouts_total", "ppoll returns of the worker that found nothing ready.", "worker"),
		wPollEventfd:   d("worker_poll_eventfd_wakeups_total", "ppoll returns of the worker with its eventfd ready: another worker handed it packets.", "worker"),
		wEventfdWrites: d("worker_eventfd_writes_total", "eventfd writes other workers made to wake the worker (system calls on their threads).", "worker"),
		wReplyCaught:   d("worker_reply_caught_total", "Packets that came within the worker's reply window (polling for the answer to what it forwarded): wake-ups saved.", "worker"),
		wStoodIn:       d("worker_stood_in_total", "Times another worker sent what it handed this one while this one slept, instead of waking it: wake-ups saved.", "worker"),
		wKickPolls:     d("worker_kick_polls_total", "ppoll calls that kicked several of the worker's TX rings at once, in place of a sendto each.", "worker"),
		wCadenceCaught: d("worker_cadence_caught_total", "Packets of new work that came while the worker polled the window they were due in (new work at a steady interval: it slept until just before): wake-ups saved.", "worker"),
		wColdSockets:   d("worker_cold_sockets", "Sockets that passed no packet for a while, which the worker's sleep waits on through one epoll rather than polling each.", "worker"),
		wSocketMoves:   d("worker_socket_moves_total", "RX sockets the worker moved between its sleep's poll (hot) and its epoll (cold).", "worker", "to"),
		wColdFailures:  d("worker_cold_failures_total", "RX sockets the worker's epoll could not take or let go of: they are polled directly.", "worker"),
		wReplyWindow:   d("worker_reply_window_seconds", "How long the worker polls its rings after forwarding, for the answer to come (--spin auto); 0: none.", "worker"),

		xskRXDropped:     d("xsk_rx_dropped_total", "Kernel XDP_STATISTICS rx_dropped of the socket: frames dropped for lack of room or too long for a frame.", lq...),
		xskRXInvalid:     d("xsk_rx_invalid_descs_total", "Kernel XDP_STATISTICS rx_invalid_descs of the socket: invalid fill ring addresses.", lq...),
		xskTXInvalid:     d("xsk_tx_invalid_descs_total", "Kernel XDP_STATISTICS tx_invalid_descs of the socket: invalid TX descriptors.", lq...),
		xskRXRingFull:    d("xsk_rx_ring_full_total", "Kernel XDP_STATISTICS rx_ring_full of the socket: frames dropped because the RX ring was full.", lq...),
		xskFillRingEmpty: d("xsk_rx_fill_ring_empty_descs_total", "Kernel XDP_STATISTICS rx_fill_ring_empty_descs of the socket: frames that found the fill ring empty (also counted in rx_dropped).", lq...),
		xskTXRingEmpty:   d("xsk_tx_ring_empty_descs_total", "Kernel XDP_STATISTICS tx_ring_empty_descs of the socket: TX wake-ups that found the TX ring empty (not a loss).", lq...),

		zoneUnits:     d("umem_zone_units", "Units (frames, slots or blocks) in the UMEM zone.", "zone"),
		zoneFree:      d("umem_zone_free_units", "Free units of the UMEM zone, in its pool or a worker's cache; approximate while running.", "zone"),
		zoneUnitBytes: d("umem_zone_unit_bytes", "Size of one unit of the UMEM zone in bytes.", "zone"),
		violations:    d("umem_ownership_violations_total", "UMEM units found somewhere other than where their owner believed (a unit owned twice or lost): 0 unless there is a bug."),
		pagesPer1K:    d("umem_pages_per_1k_descriptors", "Mean distinct UMEM pages touched per 1000 TX descriptors, at 4 KiB (4k) or 2 MiB (2m) page granularity.", "granularity"),

		info:      d("info", "Always 1: the build and the forwarder's modes. xdp_mode is \"mixed\" when the links differ (see xdpfwd_link_info).", "version", "xdp_mode", "bind_mode", "umem_backing"),
		linkInfo:  d("link_info", "Always 1: how the forwarder is attached to the link, and the pod it serves (namespace, pod and pod_uid empty for none).", "link", "namespace", "pod", "pod_uid", "xdp_mode", "bind_mode"),
		queues:    d("queues", "Workers, and TX queues per link; every RX queue has its own series."),
		inlineMax: d("inline_max_bytes", "The inline limit in force (--inline-max, or a reload): the largest frame copied whole into an inline TX slot, in bytes; 0 while the inline path is off."),
	}
}

// Describe sends every descriptor: the Collector's set of metrics is fixed.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, x := range []*prometheus.Desc{
		d.rxPackets, d.rxBytes, d.txPackets, d.txBytes, d.drops,
		d.txPath, d.txDescs, d.inlineFallbacks, d.domainCopies, d.domainCopyBytes, d.kickErrors, d.csumCompleted, d.descsPerPacket,
		d.txKicks, d.fillWakeups, d.rxBatchPackets, d.rxLend, d.rxLendGrowths,
		d.wRounds, d.wSleeps, d.wPolls, d.wPollTimeouts, d.wPollEventfd, d.wEventfdWrites, d.wReplyCaught, d.wCadenceCaught, d.wReplyWindow, d.wStoodIn, d.wKickPolls, d.wColdSockets, d.wSocketMoves, d.wColdFailures,
		d.xskRXDropped, d.xskRXInvalid, d.xskTXInvalid, d.xskRXRingFull, d.xskFillRingEmpty, d.xskTXRingEmpty,
		d.zoneUnits, d.zoneFree, d.zoneUnitBytes, d.pagesPer1K, d.violations,
		d.info, d.linkInfo, d.queues, d.inlineMax,
	} {
		ch <- x
	}
}

// Collect reads the forwarder (unless frozen) and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if !c.frozen && c.live != nil {
		if err := c.live(); err != nil {
			c.frozen = true
		}
	}
	if !c.frozen {
		if s := c.safeRead(); s != nil {
			c.last = s
		}
	}
	s := c.last
	c.mu.Unlock()
	c.emit(ch, s)
}

// snapshot is one reading of the forwarder.
type snapshot struct {
	links   []string      // by index, "" for a removed link's
	q       [][]queueSnap // [link][queue]
	zones   []fwd.ZoneUsage
	p4k     float64
	p2m     float64
	queuesN int
	// inlineMax is read at every scrape: a reload changes it.
	inlineMax int
	viol      uint64
	passed    []uint64 // per link: xdp_pass, not per queue
	pods      []Pod    // per link: the pod it serves, zero for none
	workers   []fwd.WorkerStats
}

type queueSnap struct {
	s    fwd.LinkStats
	k    xsk.Stats
	kErr error // the kernel's statistics could not be read: no xsk series
}

// safeRead reads the forwarder; a panic (a forwarder torn down under a
// scrape, which the health function should have prevented) freezes the
// Collector instead of killing the daemon.
func (c *Collector) safeRead() (s *snapshot) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("metrics: reading the forwarder failed; serving the last values from now on", "panic", fmt.Sprint(r))
			c.frozen = true
			s = nil
		}
	}()
	return c.read()
}

func (c *Collector) read() *snapshot {
	s := &snapshot{queuesN: c.queues, inlineMax: c.src.InlineBytes()}
	// The links as they are now: links added while running are
	// exported from their first scrape on, a removed one no more.
	s.links = c.src.Links()
	s.q = make([][]queueSnap, len(s.links))
	for i, name := range s.links {
		if name == "" {
			continue // a removed link's index
		}
		n := c.src.LinkQueues(i)
		s.q[i] = make([]queueSnap, n)
		for q := range n {
			qs := &s.q[i][q]
			qs.s = c.src.QueueStats(i, q)
			qs.k, qs.kErr = c.src.KernelStats(i, q)
			if qs.kErr == nil {
				// One reading for both families, so that
				// xdpfwd_drops_total{reason="rx_dropped"} and
				// xdpfwd_xsk_rx_dropped_total agree in every scrape.
				qs.s.Drops[fwd.DropRXDropped] = qs.k.Rx_dropped
				qs.s.Drops[fwd.DropRXRingFull] = qs.k.Rx_ring_full
				qs.s.Drops[fwd.DropFillRingEmpty] = qs.k.Rx_fill_ring_empty_descs
				qs.s.Drops[fwd.DropRXInvalid] = qs.k.Rx_invalid_descs
				qs.s.Drops[fwd.DropTXInvalid] = qs.k.Tx_invalid_descs
			}
		}
	}
	s.zones = c.src.Zones()
	s.p4k, s.p2m = c.src.PagesPer1K()
	s.viol = c.src.OwnershipViolations()
	s.passed = make([]uint64, len(s.links))
	s.pods = make([]Pod, len(s.links))
	for i, name := range s.links {
		if name != "" {
			s.passed[i] = c.src.XDPPassed(i)
			if c.pods != nil {
				if p, ok := c.pods(name); ok {
					s.pods[i] = p
				}
			}
		}
	}
	s.workers = c.src.WorkerStats()
	// Flow table: read the xps flow table's size and moves here (add
	// XPS() fwd.XPSSummary to the source interface).
	return s
}

func (c *Collector) emit(ch chan<- prometheus.Metric, s *snapshot) {
	d := &c.d
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}

	for i, link := range s.links {
		if link == "" {
			continue // removed: its series stop
		}
		pod := s.pods[i]
		// Counted by the XDP program per link: the queue label is empty.
		counter(d.drops, s.passed[i], link, pod.Namespace, pod.Name, "", fwd.DropXDPPass)
		for q, qs := range s.q[i] {
			lq := []string{link, pod.Namespace, pod.Name, strconv.Itoa(q)}
			with := func(l string) []string { return append(lq[:len(lq):len(lq)], l) }
			st := qs.s
			counter(d.rxPackets, st.RXPackets, lq...)
			counter(d.rxBytes, st.RXBytes, lq...)
			counter(d.txPackets, st.TXPackets, lq...)
			counter(d.txBytes, st.TXBytes, lq...)
			for _, r := range dropReasons(st.Drops) {
				counter(d.drops, st.Drops[r], with(r)...)
			}
			for _, p := range slices.Sorted(maps.Keys(st.TXPaths)) {
				counter(d.txPath, st.TXPaths[p], with(p)...)
			}
			counter(d.txDescs, st.TXDescriptors, lq...)
			counter(d.inlineFallbacks, st.InlineFallbacks, lq...)
			counter(d.domainCopies, st.DomainCopiesInline, with("inline")...)
			counter(d.domainCopies, st.DomainCopiesFrame, with("frame")...)
			counter(d.domainCopies, st.DomainCopiesFrag, with("frag")...)
			counter(d.domainCopyBytes, st.DomainCopyBytes, lq...)
			counter(d.kickErrors, st.KickErrors, lq...)
			counter(d.csumCompleted, st.ChecksumsCompleted, lq...)
			count, sum, buckets := descHistogram(st.DescsPerPacket)
			ch <- prometheus.MustNewConstHistogram(d.descsPerPacket, count, sum, buckets, lq...)
			counter(d.txKicks, st.TXKicks, lq...)
			counter(d.fillWakeups, st.FillWakeups, lq...)
			gauge(d.rxLend, float64(st.RXLend), lq...)
			counter(d.rxLendGrowths, st.RXLendGrowths, lq...)
			ch <- prometheus.MustNewConstHistogram(d.rxBatchPackets, st.RXBatches, float64(st.RXPackets), batchHistogram(st.RXBatchPackets), lq...)
			if qs.kErr == nil {
				k := qs.k
				counter(d.xskRXDropped, k.Rx_dropped, lq...)
				counter(d.xskRXInvalid, k.Rx_invalid_descs, lq...)
				counter(d.xskTXInvalid, k.Tx_invalid_descs, lq...)
				counter(d.xskRXRingFull, k.Rx_ring_full, lq...)
				counter(d.xskFillRingEmpty, k.Rx_fill_ring_empty_descs, lq...)
				counter(d.xskTXRingEmpty, k.Tx_ring_empty_descs, lq...)
			}
		}
	}
	for _, z := range s.zones {
		gauge(d.zoneUnits, float64(z.Units), z.Name)
		gauge(d.zoneFree, float64(z.FreeUnits), z.Name)
		gauge(d.zoneUnitBytes, float64(z.UnitBytes), z.Name)
	}
	gauge(d.pagesPer1K, s.p4k, "4k")
	gauge(d.pagesPer1K, s.p2m, "2m")
	counter(d.violations, s.viol)
	for _, w := range s.workers {
		worker := strconv.Itoa(w.Worker)
		counter(d.wRounds, w.Rounds, worker)
		counter(d.wSleeps, w.Sleeps, worker)
		counter(d.wPolls, w.Polls, worker)
		counter(d.wPollTimeouts, w.PollTimeouts, worker)
		counter(d.wPollEventfd, w.PollEventfd, worker)
		counter(d.wEventfdWrites, w.EventfdWrites, worker)
		counter(d.wKickPolls, w.KickPolls, worker)
		counter(d.wReplyCaught, w.ReplyCaught, worker)
		counter(d.wCadenceCaught, w.CadenceCaught, worker)
		counter(d.wStoodIn, w.StoodIn, worker)
		gauge(d.wReplyWindow, w.ReplyWindow.Seconds(), worker)
		gauge(d.wColdSockets, float64(w.ColdSockets), worker)
		counter(d.wSocketMoves, w.Coolings, worker, "cold")
		counter(d.wSocketMoves, w.Warmings, worker, "hot")
		counter(d.wColdFailures, w.ColdFailures, worker)
	}

	// Flow table: emit the xps flow table's metrics here.

	mode := c.info.XDPModes[0]
	if slices.ContainsFunc(c.info.XDPModes, func(m string) bool { return m != mode }) {
		mode = mixedMode
	}
	gauge(d.info, 1, c.info.Version, mode, c.info.BindMode, c.info.UMEMBacking)
	for i, link := range s.links {
		if link == "" {
			continue
		}
		m := mode // a link added while running: the mode of the others
		if i < len(c.info.XDPModes) && i < len(c.links) && c.links[i] == link {
			m = c.info.XDPModes[i]
		}
		pod := s.pods[i]
		gauge(d.linkInfo, 1, link, pod.Namespace, pod.Name, pod.UID, m, c.info.BindMode)
	}
	gauge(d.queues, float64(s.queuesN))
	gauge(d.inlineMax, float64(s.inlineMax))
}

// knownDrops are the reasons of fwd's drop counters, each always exported
// (at 0 until it happens) so that rate() works from the start.
var knownDrops = fwd.DropReasons()

// kernelDrops are the reasons that come from XDP_STATISTICS: without a
// reading of the socket they are left out rather than reported as 0.
var kernelDrops = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range fwd.KernelDrops {
		m[r] = true
	}
	return m
}()

// dropReasons lists the reasons to export, sorted: fwd's own reasons
// always, the kernel's when they were read, and any reason a later fwd adds.
func dropReasons(m map[string]uint64) []string {
	set := map[string]bool{}
	for _, r := range knownDrops {
		if _, ok := m[r]; ok || !kernelDrops[r] {
			set[r] = true
		}
	}
	for r := range m {
		set[r] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// descHistogram turns fwd's per-count histogram ("1" → packets that left as
// one descriptor, ...) into a Prometheus histogram: count, sum and
// cumulative buckets at DescBuckets.
func descHistogram(h map[string]uint64) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(DescBuckets))
	for _, b := range DescBuckets {
		buckets[b] = 0
	}
	for k, v := range h {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || n < 1 {
			continue
		}
		count += v
		sum += float64(n) * float64(v)
		for _, b := range DescBuckets {
			if float64(n) <= b {
				buckets[b] += v
			}
		}
	}
	return count, sum, buckets
}

// batchHistogram turns fwd's RX batch histogram (bucket name → batches)
// into cumulative Prometheus buckets at fwd.BatchBuckets; the batches
// above the last bound are only in the histogram's count (+Inf).
func batchHistogram(h map[string]uint64) map[float64]uint64 {
	buckets := make(map[float64]uint64, len(fwd.BatchBuckets))
	var cum uint64
	for i, b := range fwd.BatchBuckets {
		cum += h[fwd.BatchBucketNames[i]]
		buckets[float64(b)] = cum
	}
	return buckets
}
