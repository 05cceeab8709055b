// The workloads: the table of them, which contenders and pair each runs
// on, the measured window, and the UDP, TCP bulk and RR runs (the others
// have a file each).

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// workload is one kind of traffic every contender runs.
type workload struct {
	Name   string // --workload name, results key
	Group  string // udp, cost, tcp, rr, reorder: one table and one chart each
	Title  string
	Metric string // the headline metric
	Unit   string

	Size    int  // UDP: IP packet length in bytes
	Paced   bool // UDP: offered at Options.CostRate instead of as fast as possible
	Streams int  // TCP bulk: connections
	Conns   int  // RR: connections
	Req     int  // RR: request bytes
	Resp    int  // RR: response bytes
	V6      bool // RR: over IPv6

	// Queues is the queue count of every veth of the pair this workload
	// runs on; 0: --queues. A workload with its own count gets a pair of
	// its own, and every contender is started on it separately (xdpfwd
	// and asavie-fwd with --queues set to it).
	Queues int
	// Workers, if > 0, is xdpfwd's --queues (its workers) on this
	// workload's pair instead of Queues: links with more queues than
	// workers, each worker reading several RX queues.
	Workers int
	Flows   int           // reorder: sequenced UDP flows
	Burst   int           // reorder: datagrams of every flow per round on one queue
	Gap     time.Duration // reorder: pause after each round (spun, not slept)
	Rate    int           // latency: requests/s; delivery, paced UDP: packets/s (0: --cost-rate)
	Count   int           // latency: requests per sample (halved with --quick)
	// FwdDefaults runs the forwarders on this workload's pair with their
	// defaults, as a user would: no --queues, on every CPU perf may use.
	FwdDefaults bool
	// Hosts, if > 0, runs this workload on topo.NewHosts(Hosts) instead of
	// a Pair: the switch's three hosts, the reflector's one.
	Hosts int
	// Contenders, if set, are the only contenders that run this workload,
	// besides those whose Groups name its group.
	Contenders []string
	// OnRequest: it runs only when --workload names it or its group, not
	// in a run of all.
	OnRequest bool
	// MACs, if above 1: UDP from that many source MACs in turn (txonly
	// only), hosts behind the uplink for a switch to learn.
	MACs int
	// SpreadFlows, if > 0: UDP to every host past the first in turn,
	// each host's share from source ports in turn, about this many
	// 5-tuples in all (txonly only), to every link of a switch and for
	// tables keyed by flow to hold.
	SpreadFlows int
	// PodSink: UDP is counted and dropped at the destinations' eth0 by
	// an XDP program (podSink), not received on sockets: what the
	// switch costs, without the pods' stacks and perf's receivers.
	PodSink bool

	run func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error)
}

// latencyContenders run the latency workloads, besides the xdpfwd
// configurations whose Groups name them: the bridge, and Open vSwitch,
// whose one PMD thread polls every queue of both ports. Not testpmd: DPDK
// 22.11's net_af_xdp takes a link's queue count from ETHTOOL_GCHANNELS'
// combined count, which a veth does not have (it counts RX and TX apart),
// so it refuses queue_count > 1 there ("Specified queue count 2 is larger
// than combined queue count 1"), and on one queue it would lose whatever
// arrives on the others.
var latencyContenders = []string{"xdpfwd", "bridge", "ovs-afxdp"}

// peerContenders are the five forwarders of the peers table, which run
// latency-1q (testpmd drives one queue of a veth, not two) and tcp-16
// (whose answer the other xdpfwd configurations and asavie would only
// repeat from tcp-4, and which keeps the quick run within its time), and
// xdpfwd's busy mode when asked for, to set beside the busy pollers.
var peerContenders = []string{"xdpfwd", "xdpfwd-busy", "bridge", "xdp-redirect", "testpmd", "ovs-afxdp"}

// workloadTable lists every workload in table order. Adding one is a line.
func workloadTable() []*workload {
	return append([]*workload{
		{Name: "udp-64", Group: "udp", Title: "UDP 64 B", Metric: "pps", Unit: "packets/s", Size: 64, run: runUDP},
		{Name: "udp-256", Group: "udp", Title: "UDP 256 B", Metric: "pps", Unit: "packets/s", Size: 256, run: runUDP},
		{Name: "udp-1500", Group: "udp", Title: "UDP 1500 B", Metric: "pps", Unit: "packets/s", Size: 1500, run: runUDP},
		// The CPU cost at three offered rates: a low rate,
		// where a forwarder sleeps and wakes for a few packets, --cost-rate
		// (100k by default), and a high one, where batches grow.
		{Name: "cost-64-20k", Group: "cost", Title: "CPU per packet, UDP 64 B at a fixed load", Metric: "own_cpu_ns_per_pkt_net", Unit: "ns/packet", Size: 64, Paced: true, Rate: 20000, run: runUDP},
		{Name: "cost-64", Group: "cost", Title: "CPU per packet, UDP 64 B at a fixed load", Metric: "own_cpu_ns_per_pkt_net", Unit: "ns/packet", Size: 64, Paced: true, run: runUDP},
		{Name: "cost-64-300k", Group: "cost", Title: "CPU per packet, UDP 64 B at a fixed load", Metric: "own_cpu_ns_per_pkt_net", Unit: "ns/packet", Size: 64, Paced: true, Rate: 300000, run: runUDP},
		{Name: "tcp-1", Group: "tcp", Title: "TCP bulk, 1 stream", Metric: "gbps", Unit: "Gbit/s", Streams: 1, run: runTCP},
		{Name: "tcp-4", Group: "tcp", Title: "TCP bulk, 4 streams", Metric: "gbps", Unit: "Gbit/s", Streams: 4, run: runTCP},
		{Name: "tcp-16", Group: "tcp", Title: "TCP bulk, 16 streams", Metric: "gbps", Unit: "Gbit/s", Streams: 16,
			Contenders: peerContenders, run: runTCP},
		{Name: "rr-1k", Group: "rr", Title: "TCP RR 1 KB/1 KB, 250 connections", Metric: "tps", Unit: "transactions/s", Conns: 250, Req: 1024, Resp: 1024, run: runRR},
		// The 42-byte cliff of Eric Dumazet's 128-byte inline zone in
		// "[RFC net] tcp: Fix performance regression for
		// request-response workloads" (netdev, 2022): over IPv6 with TCP
		// timestamps a 40-byte message makes a 126-byte frame, a 44-byte
		// one 130: on either side of --inline-max 128 (xdpfwd-inline128).
		{Name: "rr-v6-40", Group: "rr", Title: "TCP RR IPv6 40 B/40 B, 200 connections", Metric: "tps", Unit: "transactions/s", Conns: 200, Req: 40, Resp: 40, V6: true, run: runRR},
		{Name: "rr-v6-44", Group: "rr", Title: "TCP RR IPv6 44 B/44 B, 200 connections", Metric: "tps", Unit: "transactions/s", Conns: 200, Req: 44, Resp: 44, V6: true, run: runRR},
		// The XPS-after-scrub case of "Poor TCP performance with XPS
		// enabled after scrubbing skb" (Flavio Leitner, netdev, 2018;
		// fwd/xps_test.go): 16 flows, each arriving on two RX queues,
		// paced as in that test. Run by
		// xdpfwd in each --xps mode, and by the contenders whose answer
		// is worth knowing: the kernel's paths and asavie (per-worker TX
		// queue, like --xps cpu). bridge-offload would only repeat the
		// bridge (the frames are built by the sender, not the stack);
		// the other xdpfwd configurations only repeat sticky.
		{Name: "reorder-16", Group: "reorder", Title: "16 sequenced UDP flows over two ingress queues", Metric: "ooo_per_million", Unit: "out-of-order per million",
			Size: 64, Queues: 2, Flows: 16, Burst: 1, Gap: 60 * time.Microsecond,
			Contenders: []string{"xdpfwd", "bridge", "xdp-redirect", "asavie"}, run: runReorder},
		// One UDP flow at a low rate over one queue, the client on the
		// load CPU: every forwarder can run it (testpmd drives one queue
		// of a veth), and its p50 is the round trip through an idle
		// forwarder.
		{Name: "latency-1q", Group: "latency", Title: "UDP request/response, 500 requests/s over one queue", Metric: "p50_us", Unit: "µs",
			Size: 64, Queues: 1, Rate: 500, Count: 2000,
			Contenders: peerContenders, run: runLatency},
		// One UDP flow at a low rate whose requests come from two CPUs,
		// so through two RX queues: the p99 shows a packet waiting for a
		// sleeping worker. Run by xdpfwd in each --xps mode and with
		// --queues 1 (the ratio's reference), by the bridge and Open vSwitch.
		{Name: "latency-2q", Group: "latency", Title: "UDP request/response, 500 requests/s from two CPUs over two queues", Metric: "p99_us", Unit: "µs",
			Size: 64, Queues: 2, Rate: 500, Count: 2000,
			Contenders: latencyContenders, run: runLatency},
		// The same over 4-queue links read by two workers (--queues 2;
		// one for xdpfwd-q1): each worker owns two RX queues of each link.
		{Name: "latency-4q", Group: "latency", Title: "UDP request/response, 500 requests/s from two CPUs, 4-queue links, two workers", Metric: "p99_us", Unit: "µs",
			Size: 64, Queues: 4, Workers: 2, Rate: 500, Count: 2000,
			Contenders: latencyContenders, run: runLatency},
		// 64 flows over 4-queue links, forwarders with their defaults:
		// on a 2-CPU machine xdpfwd has two workers for four RX queues.
		{Name: "delivery-4q", Group: "delivery", Title: "64 UDP flows at 20k packets/s over 4-queue links, forwarders with their defaults", Metric: "delivered_pct", Unit: "% delivered",
			Size: 64, Queues: 4, Flows: 64, Rate: 20000, FwdDefaults: true,
			Contenders: []string{"xdpfwd", "bridge"}, run: runDelivery},
		// The switch: three hosts on one L2 segment,
		// switched by xdpfwd --mode switch or a Linux bridge; traffic
		// from host 0 to host 1, host 2 learned and flooded to.
		{Name: "switch-udp-64", Group: "switch", Title: "UDP 64 B, packets/s at maximum offered load", Metric: "pps", Unit: "packets/s",
			Size: 64, Hosts: 3, Contenders: switchContenders, run: runSwitch(runUDP)},
		{Name: "switch-cost-64", Group: "switch", Title: "CPU per packet, UDP 64 B at a fixed load", Metric: "own_cpu_ns_per_pkt_net", Unit: "ns/packet",
			Size: 64, Paced: true, Hosts: 3, Contenders: switchContenders, run: runSwitch(runUDP)},
		{Name: "switch-tcp-1", Group: "switch", Title: "TCP bulk, 1 stream", Metric: "gbps", Unit: "Gbit/s",
			Streams: 1, Hosts: 3, Contenders: switchContenders, run: runSwitch(runTCP)},
		// Generator cost: what a traffic source costs per packet at one
		// rate (gencost.go), run by the baseline alone (nothing
		// forwards).
		{Name: "gen-sendmmsg", Group: "gencost", Title: "Generator CPU per packet, 64 B frames at 100k packets/s", Metric: "own_cpu_ns_per_pkt", Unit: "ns/packet",
			Size: genIPLen, Paced: true, Rate: 100000, Contenders: []string{"baseline-drop"}, run: runGen("sendmmsg")},
		{Name: "gen-trafgen", Group: "gencost", Title: "Generator CPU per packet, 64 B frames at 100k packets/s", Metric: "own_cpu_ns_per_pkt", Unit: "ns/packet",
			Size: genIPLen, Paced: true, Rate: 100000, Contenders: []string{"baseline-drop"}, run: runGen("trafgen")},
		{Name: "gen-txonly", Group: "gencost", Title: "Generator CPU per packet, 64 B frames at 100k packets/s", Metric: "own_cpu_ns_per_pkt", Unit: "ns/packet",
			Size: genIPLen, Paced: true, Rate: 100000, Contenders: []string{"baseline-drop"}, run: runGen("txonly")},
		// The reflector: 64-byte frames back to their sender, MACs
		// swapped, by xdpfwd --mode reflect or an XDP_TX program.
		{Name: "reflect-64", Group: "reflect", Title: "64-byte frames reflected, MACs swapped", Metric: "pps", Unit: "packets/s",
			Size: 64, Hosts: 1, Contenders: reflectContenders, run: runReflect},
	}, scaleWorkloads()...)
}

var workloadGroups = []string{"udp", "cost", "tcp", "rr", "reorder", "latency", "delivery", "switch", "reflect", "gencost", "scale"}

func selectWorkloads(names []string) ([]*workload, error) {
	all := workloadTable()
	if len(names) == 0 {
		return slices.DeleteFunc(all, func(w *workload) bool { return w.OnRequest }), nil
	}
	var out []*workload
	for _, w := range all {
		for _, n := range names {
			if n == w.Name || n == w.Group {
				out = append(out, w)
				break
			}
		}
	}
	for _, n := range names {
		found := false
		for _, w := range all {
			found = found || n == w.Name || n == w.Group
		}
		if !found {
			var have []string
			for _, w := range all {
				have = append(have, w.Name)
			}
			return nil, fmt.Errorf("--workload %q: no such workload or group (groups %s; workloads %s)",
				n, strings.Join(workloadGroups, ", "), strings.Join(have, ", "))
		}
	}
	return out, nil
}

// applies reports whether contender c runs workload w: a contender with
// Groups runs those groups only; a workload with Contenders is run by those
// only (and by contenders whose Groups name it, and by NAME-ref, --ref-src's
// build of a contender NAME it names); the others, by all.
func (w *workload) applies(c *contender) bool {
	switch {
	case c.Baseline:
		return w.Group == "cost" || w.Paced
	case c.Groups != nil:
		return slices.Contains(c.Groups, w.Group)
	case w.Contenders != nil:
		return slices.Contains(w.Contenders, strings.TrimSuffix(c.Name, "-ref"))
	}
	return true
}

// queues is the queue count of the pair w runs on.
func (w *workload) queues(o *Options) int {
	if w.Queues > 0 {
		return w.Queues
	}
	return max(1, o.Queues)
}

// window runs the measured part of a sample: warm-up, then snapshot before
// and after the window. snap reads the workload's counters.
type snapshot struct {
	cpu measure.CPUTimes
	own float64 // measure.OwnCPU ns
	n   [3]float64
}

func (e *env) window(ctx context.Context, snap func() [3]float64) (a, b snapshot, err error) {
	if err = sleepCtx(ctx, e.o.Warmup); err != nil {
		return
	}
	take := func() (snapshot, error) {
		n := snap()
		c, err := measure.ReadCPUTimes()
		return snapshot{cpu: c, own: e.own.NS(e.childPID()), n: n}, err
	}
	if a, err = take(); err != nil {
		return
	}
	if err = sleepCtx(ctx, e.o.Duration); err != nil {
		return
	}
	b, err = take()
	return
}

// cpuMetrics adds the busy share of the forwarder CPU and of the load CPUs
// over the window, and the share of the machine other processes used.
func (e *env) cpuMetrics(m map[string]float64, a, b snapshot) {
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	other := (measure.BusyNs(a.cpu, b.cpu) - (b.own - a.own)) / (secs * 1e9 * float64(b.cpu.CPUs()))
	m["other_cpu_pct"] = max(0, 100*other)
	m["cpu_fwd_pct"] = measure.BusyPct(a.cpu, b.cpu, e.o.FwdCPU)
	var load float64
	for _, c := range e.o.LoadCPUs {
		load += measure.BusyPct(a.cpu, b.cpu, c)
	}
	m["cpu_load_pct"] = load / float64(len(e.o.LoadCPUs))
}

// runUDP sends one way from A to B, as fast as the sender can or paced,
// and counts what the receiver gets. For the baseline nothing is received:
// every packet sent is dropped at the ingress root end.
func runUDP(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	rate := 0.0
	if w.Paced {
		rate = float64(e.o.CostRate)
		if w.Rate > 0 {
			rate = float64(w.Rate)
		}
	}
	deadline := time.Now().Add(e.o.Warmup + e.o.Duration + 2*time.Second)
	shape, err := e.shapeOf(p, w)
	if err != nil {
		return nil, err
	}
	var (
		dst  netip.AddrPort
		rxs  []*traffic.UDPReceiver
		sink *podSink
	)
	if w.PodSink && !c.Baseline {
		sink, dst, err = e.podSinkOf(p, shape)
	} else {
		dst, rxs, err = e.udpReceivers(p, shape, c.Baseline, deadline.Add(time.Second))
	}
	if err != nil {
		return nil, err
	}
	closeRx := func() (err error) {
		for _, rx := range rxs {
			err = errors.Join(err, rx.Close())
		}
		if sink != nil {
			err = errors.Join(err, sink.Close())
		}
		return err
	}
	tx, err := traffic.NewSource(e.o.Source, p, dst, w.Size, rate, deadline, shape)
	if err != nil {
		return nil, errors.Join(err, closeRx())
	}
	var sinkErr error
	var costs []fwdCost // the forwarder's own counters, at both ends of the window
	a, b, werr := e.window(ctx, func() [3]float64 {
		if w.Paced && !c.Baseline {
			costs = append(costs, e.readFwdCost(ctx))
		}
		n := [3]float64{float64(tx.Packets())}
		for _, rx := range rxs {
			n[1] += float64(rx.Packets.Load())
			n[2] += float64(rx.OutOfOrder.Load())
		}
		if sink != nil {
			got, _, err := sink.read()
			if err != nil {
				sinkErr = err
			}
			n[1] = float64(got)
		}
		return n
	})
	reached := 0 // hosts that received, with flows spread over them
	for _, rx := range rxs {
		if rx.Packets.Load() > 0 {
			reached++
		}
	}
	if sink != nil {
		var err error
		_, reached, err = sink.read()
		sinkErr = errors.Join(sinkErr, err)
	}
	if err := errors.Join(werr, sinkErr, tx.Close(), closeRx()); err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	sent := b.n[0] - a.n[0]
	got := b.n[1] - a.n[1]
	if c.Baseline {
		got = sent
	}
	m := map[string]float64{
		"sent_pps":     sent / secs,
		"pps":          got / secs,
		"out_of_order": b.n[2] - a.n[2],
		"cpu_busy_ns":  measure.BusyNs(a.cpu, b.cpu),
		"own_cpu_ns":   b.own - a.own,
	}
	if sent > 0 {
		m["loss_pct"] = max(0, 100*(1-got/sent))
	}
	if len(shape.DstHosts) > 0 && !c.Baseline {
		m["hosts_reached"] = float64(reached)
	}
	e.cpuMetrics(m, a, b)
	if got == 0 {
		return m, fmt.Errorf("no packet arrived (%.0f sent)", sent)
	}
	m["cpu_ns_per_pkt"] = m["cpu_busy_ns"] / got
	m["own_cpu_ns_per_pkt"] = m["own_cpu_ns"] / got
	if len(costs) == 2 {
		costMetrics(m, costs[0], costs[1], got)
	}
	return m, nil
}

// shapeOf is what w's UDP varies on p: its source MACs, and with
// SpreadFlows every host past the first as a destination, from source
// ports in turn.
func (e *env) shapeOf(p *topo.Pair, w *workload) (traffic.Shape, error) {
	shape := traffic.Shape{SrcMACs: w.MACs}
	if w.SpreadFlows == 0 {
		return shape, nil
	}
	h := e.hosts[p]
	if h == nil || len(h.NS) < 2 {
		return shape, fmt.Errorf("%s spreads its flows over hosts, and %s has none", w.Name, p.Name)
	}
	for i := 1; i < len(h.NS); i++ {
		mac, _, err := ifaceOf(h.NS[i], "eth0")
		if err != nil {
			return shape, fmt.Errorf("in %s: %w", h.NS[i].Name, err)
		}
		shape.DstHosts = append(shape.DstHosts, gen.Host{MAC: mac, IP: h.V4[i]})
	}
	shape.SrcPorts = max(1, w.SpreadFlows/len(shape.DstHosts))
	return shape, nil
}

// podSinkOf attaches a podSink to p's pods, counting at B alone unless
// shape spreads the flows over them all, and returns where to send: B's
// discard port (the sink drops the UDP before B's stack sees it).
func (e *env) podSinkOf(p *topo.Pair, shape traffic.Shape) (*podSink, netip.AddrPort, error) {
	h := e.hosts[p]
	if h == nil {
		return nil, netip.AddrPort{}, fmt.Errorf("%s has no pods to sink in", p.Name)
	}
	dst := 0
	if len(shape.DstHosts) == 0 {
		if dst = slices.Index(h.V4, p.V4B); dst < 1 {
			return nil, netip.AddrPort{}, fmt.Errorf("%s: B (%s) is not a pod", p.Name, p.V4B)
		}
	}
	s, err := newPodSink(h, dst)
	return s, netip.AddrPortFrom(p.V4B, 9), err
}

// udpReceivers starts a receiver on B, and on every host of shape, all on
// B's port, and returns where to send; the baseline has none (its
// packets are dropped at the ingress root end).
func (e *env) udpReceivers(p *topo.Pair, shape traffic.Shape, baseline bool, deadline time.Time) (netip.AddrPort, []*traffic.UDPReceiver, error) {
	if baseline {
		return netip.AddrPortFrom(p.V4B, 9), nil, nil
	}
	rx, err := traffic.NewUDPReceiver(p.B, p.V4B, deadline)
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	rxs := []*traffic.UDPReceiver{rx}
	h := e.hosts[p]
	for _, d := range shape.DstHosts {
		if d.IP == p.V4B {
			continue
		}
		i := slices.Index(h.V4, d.IP)
		r, err := traffic.NewSeqReceiver(h.NS[i], netip.AddrPortFrom(d.IP, uint16(rx.Port)), 0, deadline)
		if err != nil {
			for _, rx := range rxs {
				rx.Close()
			}
			return netip.AddrPort{}, nil, err
		}
		rxs = append(rxs, r)
	}
	return netip.AddrPortFrom(p.V4B, uint16(rx.Port)), rxs, nil
}

// runTCP streams from A to B over w.Streams connections.
func runTCP(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	client, server, err := traffic.TCPConns(p.A, p.B, p.V4A, p.V4B, w.Streams, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t := traffic.StartTCPBulk(client, server, time.Now().Add(e.o.Warmup+e.o.Duration+5*time.Second))
	a, b, err := e.window(ctx, func() [3]float64 { return [3]float64{float64(t.Received.Load())} })
	t.Close()
	if err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	bytes := b.n[0] - a.n[0]
	m := map[string]float64{"gbps": bytes * 8 / secs / 1e9}
	e.cpuMetrics(m, a, b)
	if bytes == 0 {
		return m, errors.New("no byte arrived")
	}
	return m, nil
}

// runRR runs request/response transactions over w.Conns connections.
func runRR(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	src, dst := p.V4A, p.V4B
	if w.V6 {
		src, dst = p.V6A, p.V6B
	}
	client, server, err := traffic.TCPConns(p.A, p.B, src, dst, w.Conns, 10*time.Second)
	if err != nil {
		return nil, err
	}
	r := traffic.StartRR(client, server, w.Req, w.Resp, time.Now().Add(e.o.Warmup+e.o.Duration+5*time.Second))
	a, b, err := e.window(ctx, func() [3]float64 {
		r.Measuring.Store(true) // the first snapshot opens the window
		return [3]float64{float64(r.Count.Load())}
	})
	r.Measuring.Store(false)
	r.Close()
	if err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	n := b.n[0] - a.n[0]
	m := map[string]float64{
		"tps":     n / secs,
		"p50_us":  r.Hist.Quantile(0.50) / 1e3,
		"p99_us":  r.Hist.Quantile(0.99) / 1e3,
		"p999_us": r.Hist.Quantile(0.999) / 1e3,
	}
	e.cpuMetrics(m, a, b)
	if n == 0 {
		return m, errors.New("no transaction completed")
	}
	return m, nil
}

func workloadInfo(w *workload, o *Options) report.WorkloadInfo {
	wi := report.WorkloadInfo{Name: w.Name, Group: w.Group, Title: w.Title, Metric: w.Metric, Unit: w.Unit}
	if q := w.queues(o); q != o.Queues {
		wi.Queues = q
	}
	wi.Workers = w.Workers
	if w.Flows > 0 {
		wi.Size, wi.Flows, wi.Burst, wi.GapUS = w.Size, w.Flows, w.Burst, float64(w.Gap)/float64(time.Microsecond)
	}
	if w.Hosts > 0 {
		wi.Size, wi.Hosts = w.Size, w.Hosts
	}
	if w.MACs > 1 {
		wi.MACs = w.MACs
	}
	wi.SpreadFlows = w.SpreadFlows
	if w.Rate > 0 {
		wi.Size, wi.Rate, wi.Count, wi.FwdDefaults = w.Size, w.Rate, w.Count, w.FwdDefaults
	}
	return wi
}
