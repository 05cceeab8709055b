// results.md: the run's context, then one section per workload group
// (Results.Markdown lists them in order), then what did not run.

package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
)

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
		r.scaleSection,
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
		FmtClock(secondsDuration(r.ElapsedS)), map[bool]string{true: " (interrupted)"}[r.Interrupted])
	fmt.Fprintf(b, "Machine: %s; load average %.1f at the start, %.1f at the end (other processes share these CPUs, so single figures are noisy: compare within a run).\n\n",
		r.Machine, r.LoadAvg[0], r.LoadAvg[1])
	r.otherLoadLine(b)
	st := r.Settings
	fmt.Fprintf(b, "Method: %d interleaved rounds (every contender in turn, then again); each sample is a %.1f s window after %.1f s of unmeasured traffic. "+
		"Cells are the median [min–max] over the rounds; ×N is the ratio to %s in the same run (for CPU cost, lower is better; in the switch and reflect sections, to xdpfwd in that mode).\n\n",
		st.Rounds, st.DurationS, st.WarmupS, r.label(RefContender))
	fmt.Fprintf(b, "Placement: forwarder processes (xdpfwd, asavie-fwd, testpmd, Open vSwitch's daemons), every thread, pinned to CPU %d; perf's generators and receivers pinned to CPU %s (GOMAXPROCS %d). "+
		"Kernel-side forwarding (the bridge, the XDP redirect, AF_XDP copy-mode receive) runs in softirq on the CPU that sends, mostly the load CPU. "+
		"%s"+
		"Veth queues: %d%s.\n\n", st.FwdCPU, cpulist.Format(st.LoadCPUs), st.GOMAXPROCS, rpsSentence(st.PodRPSCPUs), st.Queues, r.ownQueuesNote())
}

// rpsSentence says where the namespaces' receive processing ran.
func rpsSentence(cpus []int) string {
	if len(cpus) == 0 {
		return "The namespaces' receive processing (their TCP stacks) runs where the kernel puts it, on the CPU that sends into their veth: the forwarder's, for the AF_XDP forwarders. "
	}
	return "The namespaces' veth ends steer their receive processing (their TCP stacks) to CPU " + cpulist.Format(cpus) +
		" with RPS (--pod-rps load), as xdpfwd's CNI plugin does with \"rpsCPUs\"; without it a veth runs it on the CPU that sends, the forwarder's. "
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
	if sent, ok := r.Stat(c.Name, w.Name, "sent_pps"); ok && !c.Baseline {
		if got, ok := r.Stat(c.Name, w.Name, "pps"); ok && sent.Median > 0 {
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
		if _, ok := r.Stat(c, w.Name, "sent_pps"); ok {
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
		case c.Skipped == NoWorkloadApplies:
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
	if !r.HasRef() && len(r.Samples) > 0 {
		notes = append(notes, "a workload has no sample of its reference contender ("+RefContender+", or xdpfwd in the switch, scale or reflect mode): no ratios there")
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

// contenderDetail is a string the contender reported about itself.
func (r *Results) ContenderDetail(name, key string) (string, bool) {
	for _, c := range r.Contenders {
		if c.Name == name {
			v, ok := c.Details[key].(string)
			return v, ok && v != ""
		}
	}
	return "", false
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

// sourceText says how the UDP workloads' traffic was sent (--source; a
// run before the flag used sendmmsg).
func sourceText(src string) string {
	if src == "sendmmsg" || src == "" {
		return "One thread in the source namespace sends with sendmmsg as fast as it can"
	}
	return "xdpfwd's txonly generator (AF_XDP, copy mode, one socket on the source namespace's eth0) sends as fast as the veth takes its frames (`--source sendmmsg`: perf's UDP socket sender)"
}
