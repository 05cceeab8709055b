// The sections of the workloads whose point is how traffic spreads over
// several queues: reordering, latency across workers, and delivery.

package report

import (
	"fmt"
	"slices"
	"strings"
)

// reorderSection renders the reordering workload: out-of-order datagrams
// per million received, per contender.
func (r *Results) reorderSection(b *strings.Builder) {
	cs := r.ranContenders("reorder", false)
	for _, w := range r.workloads("reorder") {
		if len(cs) == 0 {
			return
		}
		fmt.Fprintf(b, "### Reordering: %s\n\n", w.Title)
		queues := max(w.Queues, r.Settings.Queues)
		fmt.Fprintf(b, "Every one of %d sequenced UDP flows (%d-byte IP packets, flow id and sequence number in the payload) reaches the contender on two RX queues: "+
			"two AF_XDP senders in the source namespace, on queues 0 and 1 of its veth (%d queues per veth; a veth delivers TX queue *i* into its peer's RX queue *i*), "+
			"take turns, %s of every flow per turn. Before it switches queues the sender waits until the kernel has consumed the turn, so it never reorders by itself, "+
			"then pauses %.0f µs: a load every contender sustains. The receiver counts, per flow, the datagrams that arrive after one with a higher sequence number. "+
			"xdpfwd runs with `--queues %d` and `--xps cpu` (the TX queue follows the worker that received the packet: the kernel's XPS after skb scrubbing), `hash` or `sticky`; ",
			w.Flows, w.Size, queues, plural(max(1, w.Burst), "datagram"), w.GapUS, queues)
		ref := r.label(RefContender)
		if m, ok := r.ContenderDetail(RefContender, "xps_mode"); ok {
			fmt.Fprintf(b, "%s gives no `--xps`: its default, `%s` in the build measured. ", ref, m)
		} else {
			fmt.Fprintf(b, "%s gives no `--xps`: its default. ", ref)
		}
		b.WriteString("asavie-fwd's worker *q* transmits on queue *q* what it received on queue *q*, like `--xps cpu`. " +
			"Lower is better; a ratio is shown only where the reference's figure is above 0.\n\n")
		t := mdTable{head: []string{"contender", "out-of-order per million", "out-of-order datagrams", "delivered packets/s", "offered packets/s", "lost"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.cell(c.Name, w.Name, "ooo_per_million", true), r.cell(c.Name, w.Name, "out_of_order", false),
				r.cell(c.Name, w.Name, "pps", true), r.cell(c.Name, w.Name, "sent_pps", false),
				r.cell(c.Name, w.Name, "loss_pct", false)})
		}
		b.WriteString(t.String() + "\n")
	}
}

// latencyRef is the latency workload's reference: one worker, nothing
// handed between workers.
const latencyRef = "xdpfwd-q1"

// latencyCell is cell with the ratio to ref.
func (r *Results) latencyCell(ref, contender, workload, metric string) string {
	s := r.cell(contender, workload, metric, false)
	a, ok := r.Stat(contender, workload, metric)
	b, ok2 := r.Stat(ref, workload, metric)
	if ok && ok2 && b.Median > 0 {
		s += fmt.Sprintf(" ×%.2f", a.Median/b.Median)
	}
	return s
}

// latencySection renders the low-rate request/response workload.
func (r *Results) latencySection(b *strings.Builder) {
	cs := r.ranContenders("latency", false)
	if len(cs) == 0 {
		return
	}
	for _, w := range r.workloads("latency") {
		if w.Queues <= 1 {
			r.latency1q(b, w, cs)
			continue
		}
		q := max(w.Queues, r.Settings.Queues)
		workers := q
		if w.Workers > 0 {
			workers = w.Workers
		}
		shape := fmt.Sprintf("xdpfwd runs with `--queues %d` in each `--xps` mode", workers)
		if workers != q {
			shape = fmt.Sprintf("The veths have %d queues each (XPS uses the first two); xdpfwd runs with `--queues %d` in each `--xps` mode, so each worker reads %d RX queues of each link", q, workers, q/workers)
		}
		fmt.Fprintf(b, "### Latency: %s\n\n", w.Title)
		fmt.Fprintf(b, "One UDP flow, request and reply of %d-byte IP packets, %d requests per sample (%d with `--quick`) at %d requests/s. "+
			"The requests leave one unconnected UDP socket in the source namespace from two client threads pinned to CPU 0 and CPU 1, taking turns; "+
			"XPS on its veth maps CPU *i* to TX queue *i*, and a veth delivers TX queue *i* into its peer's RX queue *i*, so the one flow reaches the contender on two RX queues. "+
			"A userspace echo in the destination namespace sends each request back; the client timestamps both ends. "+
			"%s, and with `--queues 1` (one worker: nothing is handed between workers), the reference of the ratios (×, lower is better). "+
			"A packet that reaches a worker which does not own its flow's TX queue is handed over; when the owner sleeps, the worker that handed it sends it in the owner's place (xdpfwd's `stood_in`) rather than wait for the owner's wake-up.\n\n",
			w.Size, w.Count, QuickLatencyCount(w.Count), w.Rate, shape)
		t := mdTable{head: []string{"contender", "p50 µs", "p99 µs", "max µs", "p99 µs, from CPU 0", "p99 µs, from CPU 1", "lost", "lost, from CPU 0", "lost, from CPU 1"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.latencyCell(latencyRef, c.Name, w.Name, "p50_us"), r.latencyCell(latencyRef, c.Name, w.Name, "p99_us"),
				r.cell(c.Name, w.Name, "max_us", false),
				r.cell(c.Name, w.Name, "cpu0_p99_us", false), r.cell(c.Name, w.Name, "cpu1_p99_us", false),
				r.cell(c.Name, w.Name, "loss_pct", false),
				r.cell(c.Name, w.Name, "cpu0_loss_pct", false), r.cell(c.Name, w.Name, "cpu1_loss_pct", false)})
		}
		b.WriteString(t.String() + "\n")
	}
}

// latency1q renders a latency workload over one queue: one client, on the
// load CPU, and every forwarder; the ratios are to RefContender.
func (r *Results) latency1q(b *strings.Builder, w WorkloadInfo, cs []ContenderResult) {
	fmt.Fprintf(b, "### Latency: %s\n\n", w.Title)
	fmt.Fprintf(b, "One UDP flow, request and reply of %d-byte IP packets, %d requests per sample (%d with `--quick`) at %d requests/s, over veths with one queue. "+
		"The requests leave one UDP socket in the source namespace from a client thread on the load CPU; a userspace echo in the destination namespace sends each back; the client timestamps both ends. "+
		"The forwarder's CPU runs nothing else, so between requests it idles: the p50 is a round trip through an idle forwarder, twice (request and reply). Ratios (×, lower is better) are to %s.\n\n",
		w.Size, w.Count, QuickLatencyCount(w.Count), w.Rate, r.label(RefContender))
	t := mdTable{head: []string{"contender", "p50 µs", "p99 µs", "max µs", "lost"}}
	for _, c := range cs {
		t.rows = append(t.rows, []string{c.Label,
			r.latencyCell(RefContender, c.Name, w.Name, "p50_us"), r.latencyCell(RefContender, c.Name, w.Name, "p99_us"),
			r.cell(c.Name, w.Name, "max_us", false), r.cell(c.Name, w.Name, "loss_pct", false)})
	}
	b.WriteString(t.String() + "\n")
}

// deliverySection renders the many-flows, many-queues delivery workload.
func (r *Results) deliverySection(b *strings.Builder) {
	cs := r.ranContenders("delivery", false)
	if len(cs) == 0 {
		return
	}
	for _, w := range r.workloads("delivery") {
		queues := max(w.Queues, r.Settings.Queues)
		fmt.Fprintf(b, "### Delivery: %s\n\n", w.Title)
		fmt.Fprintf(b, "%d UDP flows (distinct source ports; %d-byte IP packets) at %s packets/s, %.0f ms worth per sample, over veths with %d queues each "+
			"(checked with `ethtool -l`); the sending veth spreads the flows over its TX queues by flow hash, and each lands on the RX queue of the same number on the contender's ingress link. "+
			"The forwarders run with their defaults on every CPU (xdpfwd: no `--queues`, so on a %d-CPU machine its default worker count). "+
			"*Delivered* is what the receiver got of what was offered; *xdpfwd counted* is its own drop count (every reason but `rx_fill_ring_empty_descs` and `umem_exhausted`) over the same window, read from its `--metrics`; "+
			"*uncounted* is what neither arrived nor was counted. *Kernel, per RX queue* is `ethtool -S` on the ingress veth: frames its XDP program saw on queue *i* / of those, redirected to an AF_XDP socket "+
			"(only where an XDP program runs on that end: not for the bridge). A frame on a queue without a socket passes to the root namespace's stack and is lost uncounted.\n\n",
			w.Flows, w.Size, si(float64(w.Rate)), 1000*r.Settings.DurationS, queues, r.Machine.CPUs)
		t := mdTable{head: []string{"contender", "delivered", "offered", "received", "xdpfwd counted", "uncounted", "RX queues", "kernel, per RX queue: seen / to AF_XDP"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.cell(c.Name, w.Name, "delivered_pct", false), r.cell(c.Name, w.Name, "offered", false),
				r.cell(c.Name, w.Name, "delivered", false),
				r.cell(c.Name, w.Name, "fwd_counted_loss_pct", false), r.cell(c.Name, w.Name, "uncounted_loss_pct", false),
				r.cell(c.Name, w.Name, "rx_queues", false), r.perQueue(c.Name, w.Name, queues)})
		}
		b.WriteString(t.String() + "\n")
	}
}

// perQueue is the median over the rounds of each RX queue's XDP counts.
func (r *Results) perQueue(contender, workload string, queues int) string {
	var seen, red []float64
	for q := range queues {
		a, ok := r.Stat(contender, workload, fmt.Sprintf("rxq%d_xdp_packets", q))
		b, ok2 := r.Stat(contender, workload, fmt.Sprintf("rxq%d_xdp_redirect", q))
		if !ok || !ok2 {
			return "—"
		}
		seen, red = append(seen, a.Median), append(red, b.Median)
	}
	if slices.Max(seen) == 0 {
		return "— (no XDP program on the ingress end)"
	}
	return queueList(seen, red)
}

// QuickLatencyCount is a latency sample's requests with --quick: a
// quarter (500 at 500/s: a second; p99 from the 5 slowest), at least 200.
func QuickLatencyCount(n int) int { return max(200, n/4) }
