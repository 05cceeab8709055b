package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// sig3 formats v with about three significant digits.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// si formats v with an SI suffix: 812k, 1.23M.
func si(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return sig3(v/1e9) + "G"
	case a >= 1e6:
		return sig3(v/1e6) + "M"
	case a >= 1e3:
		return sig3(v/1e3) + "k"
	default:
		return sig3(v)
	}
}

func fmtMetric(v float64, metric string) string {
	switch metric {
	case "pps", "sent_pps", "tps":
		return si(v)
	case "gbps":
		return fmt.Sprintf("%.2f", v)
	case "cpu_ns_per_pkt", "cpu_ns_per_pkt_net", "own_cpu_ns_per_pkt", "own_cpu_ns_per_pkt_net", "p50_us", "p99_us", "p999_us",
		"max_us", "cpu0_p99_us", "cpu1_p99_us":
		return fmt.Sprintf("%.0f", v)
	case "offered", "delivered", "fwd_rx", "fwd_tx", "fwd_dropped", "requests", "replies", "rx_queues":
		return fmt.Sprintf("%.0f", v)
	case "loss_pct", "delivered_pct", "other_cpu_pct", "fwd_counted_loss_pct", "uncounted_loss_pct", "cpu0_loss_pct", "cpu1_loss_pct":
		return fmt.Sprintf("%.1f %%", v)
	case "ooo_per_million", "out_of_order", "flooded_pkts":
		return fmt.Sprintf("%.0f", v)
	}
	return sig3(v)
}

// cell renders "median [min–max] ×ratio" for one contender, workload and
// metric; "—" when there is no sample.
func (r *Results) cell(contender, workload, metric string, withRatio bool) string {
	st, ok := r.stat(contender, workload, metric)
	if !ok {
		return "—"
	}
	s := fmtMetric(st.Median, metric)
	if lo, hi := fmtMetric(st.Min, metric), fmtMetric(st.Max, metric); st.N > 1 && lo != hi {
		s += " [" + lo + "–" + hi + "]"
	}
	if withRatio {
		if q, ok := r.ratio(contender, workload, metric); ok {
			s += fmt.Sprintf(" ×%.2f", q)
		}
	}
	return s
}

type mdTable struct {
	head []string
	rows [][]string
}

func (t *mdTable) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for range t.head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// Markdown renders the run: the context lines, one section per workload
// group, and what could not run.
func (r *Results) Markdown() string {
	var b strings.Builder
	for _, section := range []func(*strings.Builder){
		r.contextSection,
		r.udpSection,
		r.costSection,
		r.gencostSection,
		r.tcpSection,
		r.rrSection,
		r.reorderSection,
		r.latencySection,
		r.deliverySection,
		r.switchSection,
		r.reflectSection,
		r.notesSection,
	} {
		section(&b)
	}
	return b.String()
}

// contextSection renders what every table depends on: when and how the run
// ran, on what machine and under what other load, and where its processes
// were placed.
func (r *Results) contextSection(b *strings.Builder) {
	fmt.Fprintf(b, "Run %s UTC: `%s`, %s in all%s.\n\n", r.Started.UTC().Format("2006-01-02 15:04"), r.Command,
		fmtClock(secondsDuration(r.ElapsedS)), map[bool]string{true: " (interrupted)"}[r.Interrupted])
	fmt.Fprintf(b, "Machine: %s; load average %.1f at the start, %.1f at the end (other processes share these CPUs, so single figures are noisy: compare within a run).\n\n",
		r.Machine, r.LoadAvg[0], r.LoadAvg[1])
	r.otherLoadLine(b)
	st := r.Settings
	fmt.Fprintf(b, "Method: %d interleaved rounds (every contender in turn, then again); each sample is a %.1f s window after %.1f s of unmeasured traffic. "+
		"Cells are the median [min–max] over the rounds; ×N is the ratio to %s in the same run (for CPU cost, lower is better; in the switch and reflect sections, to xdpfwd in that mode).\n\n",
		st.Rounds, st.DurationS, st.WarmupS, r.label(refContender))
	fmt.Fprintf(b, "Placement: forwarder processes (xdpfwd, asavie-fwd, testpmd, Open vSwitch's daemons), every thread, pinned to CPU %d; perf's generators and receivers pinned to CPU %s (GOMAXPROCS %d). "+
		"Kernel-side forwarding (the bridge, the XDP redirect, AF_XDP copy-mode receive) runs in softirq on the CPU that sends, mostly the load CPU. "+
		"Veth queues: %d%s.\n\n", st.FwdCPU, cpuList(st.LoadCPUs), st.GOMAXPROCS, st.Queues, r.ownQueuesNote())
}

// otherLoadLine says how much of the machine other processes used during
// the measured windows, where the samples recorded it.
func (r *Results) otherLoadLine(b *strings.Builder) {
	var other []float64
	for _, s := range r.Samples {
		if v, ok := s.Metrics["other_cpu_pct"]; ok {
			other = append(other, v)
		}
	}
	if len(other) == 0 {
		return
	}
	slices.Sort(other)
	busy := 0
	for _, v := range other {
		if v > 25 {
			busy++
		}
	}
	fmt.Fprintf(b, "Other processes used %.0f %% of the machine in the median window (%.0f–%.0f %%); %d of %d windows shared more than a quarter of it.\n\n",
		other[len(other)/2], other[0], other[len(other)-1], busy, len(other))
}

// workloadGrid is a table with a row per contender and a column per
// workload (its title less prefix), each cell metric with its ratio.
func (r *Results) workloadGrid(corner, prefix, metric string, ws []WorkloadInfo, cs []ContenderResult) string {
	t := mdTable{head: []string{corner}}
	for _, w := range ws {
		t.head = append(t.head, strings.TrimPrefix(w.Title, prefix))
	}
	for _, c := range cs {
		row := []string{c.Label}
		for _, w := range ws {
			row = append(row, r.cell(c.Name, w.Name, metric, true))
		}
		t.rows = append(t.rows, row)
	}
	return t.String() + "\n"
}

// udpSection renders the one-way UDP throughput workloads: delivered and
// offered packets/s per packet size.
func (r *Results) udpSection(b *strings.Builder) {
	ws, cs := r.workloads("udp"), r.ranContenders("udp", false)
	if len(ws) == 0 || len(cs) == 0 {
		return
	}
	b.WriteString("### UDP, one way: delivered packets/s at maximum offered load\n\n")
	fmt.Fprintf(b, "Size is the IP packet length (the frame on the veth is 14 bytes more). %s; one thread in the destination counts with recvmmsg. ", sourceText(r.Settings.Source))
	b.WriteString(
		"The kernel contenders forward on the load CPU, inside the sender's and receiver's system calls, while the user-space forwarders add the forwarder CPU: " +
			"this table shows what one load CPU pushes through each path, not each forwarder's own limit. The CPU-cost table below is the like-for-like comparison.\n\n")
	b.WriteString(r.workloadGrid("contender", "UDP ", "pps", ws, cs))
	b.WriteString(r.workloadGrid("offered (sent) packets/s", "UDP ", "sent_pps", ws, cs))
}

// costSection renders each CPU-cost workload: CPU per forwarded packet,
// own and machine-wide, net of the baseline, then the forwarder process's
// own costs (costTable).
func (r *Results) costSection(b *strings.Builder) {
	for _, w := range r.workloads("cost") {
		cs := r.ranContenders("cost", false)
		bs := r.ranContenders("cost", true)
		if len(cs)+len(bs) == 0 {
			continue
		}
		fmt.Fprintf(b, "### CPU per forwarded packet at %s packets/s offered (%s)\n\n", si(float64(r.costRate(w))), strings.TrimPrefix(w.Title, "CPU per packet, "))
		b.WriteString("CPU time per packet delivered, at a paced load every contender sustains on a quiet machine. " +
			"*Own* is the CPU time of what the measurement consists of: perf's generator and receiver, the forwarder process (if any) and ksoftirqd; " +
			"softirq work done in those tasks' context (veth NAPI, the bridge, XDP, AF_XDP copies) is part of it. " +
			"*Machine* is all CPUs' busy time from /proc/stat (user, system, irq, softirq), which also counts whatever else runs on the machine (the \"other load\" column). " +
			"*Net* subtracts the same figure for the generator alone, its packets dropped by XDP at the ingress veth (the baseline row), in the same round.\n\n")
		t := mdTable{head: []string{"contender", "delivered", "own CPU ns/packet", "net own CPU ns/packet", "machine CPU ns/packet", "net machine CPU ns/packet", "other load"}}
		for _, c := range append(cs, bs...) {
			netOwn, netMachine := "—", "—"
			if !c.Baseline {
				netOwn = r.cell(c.Name, w.Name, "own_cpu_ns_per_pkt_net", true)
				netMachine = r.cell(c.Name, w.Name, "cpu_ns_per_pkt_net", true)
			}
			t.rows = append(t.rows, []string{c.Label, r.costDelivered(c, w),
				r.cell(c.Name, w.Name, "own_cpu_ns_per_pkt", !c.Baseline), netOwn,
				r.cell(c.Name, w.Name, "cpu_ns_per_pkt", !c.Baseline), netMachine,
				r.cell(c.Name, w.Name, "other_cpu_pct", false)})
		}
		b.WriteString(t.String() + "\n")
		b.WriteString(r.costTable(w, cs))
	}
}

// costDelivered is the share of the offered packets c delivered in the
// cost workload w, flagged where it did not keep up; "—" for the baseline.
func (r *Results) costDelivered(c ContenderResult, w WorkloadInfo) string {
	deliv := "—"
	if sent, ok := r.stat(c.Name, w.Name, "sent_pps"); ok && !c.Baseline {
		if got, ok := r.stat(c.Name, w.Name, "pps"); ok && sent.Median > 0 {
			deliv = fmt.Sprintf("%.1f %%", 100*got.Median/sent.Median)
			if got.Median < 0.95*sent.Median {
				deliv += " (did not keep up: its CPU figures are per delivered packet)"
			}
		}
	}
	return deliv
}

// gencostSection renders the generator-cost workloads: what each traffic
// source costs per packet, nothing forwarding.
func (r *Results) gencostSection(b *strings.Builder) {
	ws := r.workloads("gencost")
	if len(ws) == 0 {
		return
	}
	t := mdTable{head: []string{"generator", "sent packets/s", "own CPU ns/packet", "machine CPU ns/packet", "other load"}}
	for _, w := range ws {
		const c = "baseline-drop" // the only contender of the group
		if _, ok := r.stat(c, w.Name, "sent_pps"); ok {
			t.rows = append(t.rows, []string{strings.TrimPrefix(w.Name, "gen-"), r.cell(c, w.Name, "sent_pps", false),
				r.cell(c, w.Name, "own_cpu_ns_per_pkt", false), r.cell(c, w.Name, "cpu_ns_per_pkt", false), r.cell(c, w.Name, "other_cpu_pct", false)})
		}
	}
	if len(t.rows) == 0 {
		return
	}
	fmt.Fprintf(b, "### %s\n\n", ws[0].Title)
	b.WriteString("The same 60-byte UDP frame from A's eth0 into XDP_DROP on the root end, nothing forwarding; per packet that left A's eth0. " +
		"*Own* is the CPU of the generator's processes (perf for sendmmsg and txonly, trafgen's) and of ksoftirqd; *machine* also counts whatever else runs (the \"other load\" column).\n\n")
	b.WriteString(t.String() + "\n")
}

// tcpSection renders the TCP bulk workloads: Gbit/s per connection count.
func (r *Results) tcpSection(b *strings.Builder) {
	ws, cs := r.workloads("tcp"), r.ranContenders("tcp", false)
	if len(ws) == 0 || len(cs) == 0 {
		return
	}
	b.WriteString("### TCP bulk, A → B, Gbit/s\n\n")
	b.WriteString("Go sockets in the namespaces, 128 KiB writes. With an XDP program on a veth its peer stops using GSO, so every XDP path (xdpfwd, asavie, the redirect) carries MTU-sized segments; the two bridge rows show the cost of the endpoint settings alone.\n\n")
	b.WriteString(r.workloadGrid("contender", "TCP bulk, ", "gbps", ws, cs))
}

// rrSection renders each TCP request/response workload: transactions/s
// and their latency percentiles.
func (r *Results) rrSection(b *strings.Builder) {
	for _, w := range r.workloads("rr") {
		cs := r.ranContenders("rr", false)
		if len(cs) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", w.Title)
		b.WriteString("Each connection sends a request and waits for the whole response, back to back (uperf's request/response profile); latency is per transaction, seen by the client.\n\n")
		t := mdTable{head: []string{"contender", "transactions/s", "p50 µs", "p99 µs", "p99.9 µs"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.cell(c.Name, w.Name, "tps", true), r.cell(c.Name, w.Name, "p50_us", true),
				r.cell(c.Name, w.Name, "p99_us", true), r.cell(c.Name, w.Name, "p999_us", true)})
		}
		b.WriteString(t.String() + "\n")
	}
}

// notesSection lists what did not run or failed, and the notes of the run
// (CPU placement, kept builds, br_netfilter).
func (r *Results) notesSection(b *strings.Builder) {
	var notes, noWorkload []string
	for _, c := range r.Contenders {
		switch {
		case c.Skipped == noWorkloadApplies:
			noWorkload = append(noWorkload, "`"+c.Name+"`")
		case c.Skipped != "":
			notes = append(notes, fmt.Sprintf("**%s** (`%s`): %s", c.Label, c.Name, trim(c.Skipped, 400)))
		}
		if n, first := r.sampleErrors(c.Name); n > 0 {
			notes = append(notes, fmt.Sprintf("**%s**: %d sample(s) failed, first: %s", c.Label, n, trim(first, 300)))
		}
		for _, e := range c.Errors {
			if !strings.Contains(e, ": start: ") {
				notes = append(notes, fmt.Sprintf("**%s**: %s", c.Label, trim(e, 300)))
			}
		}
	}
	if len(noWorkload) > 0 {
		notes = append(notes, "Not run, as no selected workload applies to them: "+strings.Join(noWorkload, ", ")+".")
	}
	if !r.hasRef() && len(r.Samples) > 0 {
		notes = append(notes, "a workload has no sample of its reference contender ("+refContender+", or xdpfwd in the switch or reflect mode): no ratios there")
	}
	if r.Machine.BridgeNF == "1" {
		notes = append(notes, "br_netfilter is loaded (bridge-nf-call-iptables = 1), as on most Docker hosts: bridged frames also traverse iptables.")
	}
	notes = append(notes, r.Notes...)
	if len(notes) == 0 {
		return
	}
	b.WriteString("### Not run, failures and notes\n\n")
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
	b.WriteString("\n")
}

// ownQueuesNote names the workloads that ran on a pair with another queue
// count than the run's.
func (r *Results) ownQueuesNote() string {
	var s []string
	for _, w := range r.Workloads {
		if w.Queues > 0 && slices.ContainsFunc(r.Samples, func(x Sample) bool { return x.Workload == w.Name }) {
			s = append(s, fmt.Sprintf("%d for %s, on a pair of its own", w.Queues, w.Name))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, "; ") + ")"
}

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
		ref := r.label(refContender)
		if m, ok := r.contenderDetail(refContender, "xps_mode"); ok {
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

// latencyCell is cell with the ratio to latencyRef instead of refContender.
func (r *Results) latencyCell(contender, workload, metric string) string {
	s := r.cell(contender, workload, metric, false)
	a, ok := r.stat(contender, workload, metric)
	b, ok2 := r.stat(latencyRef, workload, metric)
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
			"A packet that reaches a worker which does not own its flow's TX queue is handed over, and waits until the owner wakes up.\n\n",
			w.Size, w.Count, quickLatencyCount(w.Count), w.Rate, shape)
		t := mdTable{head: []string{"contender", "p50 µs", "p99 µs", "max µs", "p99 µs, from CPU 0", "p99 µs, from CPU 1", "lost", "lost, from CPU 0", "lost, from CPU 1"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.latencyCell(c.Name, w.Name, "p50_us"), r.latencyCell(c.Name, w.Name, "p99_us"),
				r.cell(c.Name, w.Name, "max_us", false),
				r.cell(c.Name, w.Name, "cpu0_p99_us", false), r.cell(c.Name, w.Name, "cpu1_p99_us", false),
				r.cell(c.Name, w.Name, "loss_pct", false),
				r.cell(c.Name, w.Name, "cpu0_loss_pct", false), r.cell(c.Name, w.Name, "cpu1_loss_pct", false)})
		}
		b.WriteString(t.String() + "\n")
	}
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
		a, ok := r.stat(contender, workload, fmt.Sprintf("rxq%d_xdp_packets", q))
		b, ok2 := r.stat(contender, workload, fmt.Sprintf("rxq%d_xdp_redirect", q))
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// contenderDetail is a string the contender reported about itself.
func (r *Results) contenderDetail(name, key string) (string, bool) {
	for _, c := range r.Contenders {
		if c.Name == name {
			v, ok := c.Details[key].(string)
			return v, ok && v != ""
		}
	}
	return "", false
}

func secondsDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

func cpuList(cpus []int) string {
	var s []string
	for _, c := range cpus {
		s = append(s, fmt.Sprint(c))
	}
	return strings.Join(s, ",")
}

// readmePath is perf/README.md under the module root.
func readmePath(o Options) string {
	root := o.Root
	if root == "" {
		if r, err := moduleRoot(); err == nil {
			root = r
		}
	}
	return filepath.Join(root, "perf", "README.md")
}

const (
	readmeBegin = "<!-- BEGIN RESULTS: generated by `go run ./perf --readme`; do not edit by hand -->"
	readmeEnd   = "<!-- END RESULTS -->"
)

// rewriteReadme replaces the results section of perf/README.md with res,
// and copies its charts next to the README (perf/charts/) so the section
// can show them.
func rewriteReadme(o Options, res *Results) error {
	path := readmePath(o)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no results markers (%q … %q)", path, readmeBegin, readmeEnd)
	}
	chartDir := filepath.Join(filepath.Dir(path), "charts")
	charts, err := res.Charts(chartDir)
	if err != nil {
		return err
	}
	var sec strings.Builder
	sec.WriteString(readmeBegin + "\n\n")
	sec.WriteString(res.Markdown())
	if len(charts) > 0 {
		sec.WriteString("Charts (bars: median; whiskers: min–max, an arrow where the max runs off the chart):\n\n")
		for _, c := range charts {
			fmt.Fprintf(&sec, "![%s](charts/%s)\n", strings.TrimSuffix(c, ".png"), c)
		}
		sec.WriteString("\n")
	}
	s = s[:i] + sec.String() + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// costRate is the offered rate of a cost workload: its own, or --cost-rate.
func (r *Results) costRate(w WorkloadInfo) int {
	if w.Rate > 0 {
		return w.Rate
	}
	return r.Settings.CostRatePPS
}

// costCols are the forwarder-process columns of the cost workloads.
var costCols = []struct{ metric, head string }{
	{"fwd_user_ns_per_pkt", "user ns/packet"},
	{"fwd_sys_ns_per_pkt", "system ns/packet"},
	{"fwd_ctxsw_per_1k", "context switches /1k"},
	{"polls_per_1k", "ppoll returns /1k"},
	{"wakeups_per_1k", "wake-ups /1k"},
	{"kicks_per_1k", "TX kicks /1k"},
	{"fill_wakeups_per_1k", "fill wake-ups /1k"},
	{"batches_per_1k", "RX batches /1k"},
	{"syscalls_per_1k", "system calls /1k"},
}

// costTable renders, for the contenders that run as a process of their
// own, what the forwarder process spent in the cost workload w: its user
// and system CPU per packet delivered, and per 1,000 packets its context
// switches and (xdpfwd, from its metrics) its system calls, wake-ups and
// RX batches. "" when no contender has any of them.
func (r *Results) costTable(w WorkloadInfo, cs []ContenderResult) string {
	t := mdTable{head: []string{"contender"}}
	for _, c := range costCols {
		t.head = append(t.head, c.head)
	}
	for _, c := range cs {
		row := []string{c.Label}
		have := false
		for _, col := range costCols {
			v := r.cell(c.Name, w.Name, col.metric, false)
			have = have || v != "—"
			row = append(row, v)
		}
		if have {
			t.rows = append(t.rows, row)
		}
	}
	if len(t.rows) == 0 {
		return ""
	}
	return "The forwarder process alone (the kernel contenders have none): its user and system CPU per packet delivered " +
		"(/proc/PID/stat, 10 ms ticks, so coarse over a short window), its threads' context switches per 1,000 packets delivered " +
		"(/proc/PID/task/*/status), and from xdpfwd's metrics, per 1,000 packets it received: ppoll returns, wake-ups " +
		"(returns with something ready), TX kicks (sendto), fill-ring wake-ups (recvfrom), RX batches, and its system calls " +
		"(a ppoll or nanosleep per sleep, sendto, recvfrom, eventfd reads and writes).\n\n" + t.String() + "\n"
}

// Brief is what a run prints on standard output: where its files are and
// one line per workload, the reference contender's median of the headline
// metric and the range of the others' (results.md has the tables).
func (r *Results) Brief(dir string) string {
	var b strings.Builder
	n := 0
	for _, s := range r.Samples {
		if s.Error == "" {
			n++
		}
	}
	fmt.Fprintf(&b, "perf: %d samples in %s%s. Tables: %s; every sample: %s; charts: %s\n\n",
		n, fmtClock(secondsDuration(r.ElapsedS)), map[bool]string{true: " (interrupted)"}[r.Interrupted],
		filepath.Join(dir, "results.md"), filepath.Join(dir, "results.json"), filepath.Join(dir, "*.png"))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tunit\treference\tothers (median of each: lowest–highest)\tfailed")
	for _, w := range r.Workloads {
		ref := r.refFor(w.Name)
		refCell := "—"
		if st, ok := r.stat(ref, w.Name, w.Metric); ok {
			refCell = ref + " " + fmtMetric(st.Median, w.Metric)
		}
		var others []float64
		failed, any := 0, false
		for _, c := range r.Contenders {
			if st, ok := r.stat(c.Name, w.Name, w.Metric); ok {
				any = true
				if c.Name != ref && !c.Baseline {
					others = append(others, st.Median)
				}
			}
		}
		for _, s := range r.Samples {
			if s.Workload == w.Name && s.Error != "" {
				failed++
				any = true
			}
		}
		if !any {
			continue
		}
		otherCell := "—"
		if len(others) > 0 {
			lo, hi := fmtMetric(slices.Min(others), w.Metric), fmtMetric(slices.Max(others), w.Metric)
			otherCell = fmt.Sprintf("%d: %s–%s", len(others), lo, hi)
			if lo == hi {
				otherCell = fmt.Sprintf("%d: %s", len(others), lo)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", w.Name, w.Unit, refCell, otherCell, failed)
	}
	tw.Flush()
	return b.String()
}

// sourceText says how the UDP workloads' traffic was sent (--source; a
// run before the flag used sendmmsg).
func sourceText(src string) string {
	if src == "sendmmsg" || src == "" {
		return "One thread in the source namespace sends with sendmmsg as fast as it can"
	}
	return "xdpfwd's txonly generator (AF_XDP, copy mode, one socket on the source namespace's eth0) sends as fast as the veth takes its frames (`--source sendmmsg`: perf's UDP socket sender)"
}
