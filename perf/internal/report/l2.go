// The L2 workloads' sections and charts: the switch (three hosts) and
// the reflector (one host), each with ratios to xdpfwd in that mode.

package report

import (
	"fmt"
	"strings"
)

// switchSection renders the switch workloads, with ratios to xdpfwd
// --mode switch.
func (r *Results) switchSection(b *strings.Builder) {
	cs := r.ranContenders("switch", false)
	ws := r.workloads("switch")
	if len(cs) == 0 || len(ws) == 0 {
		return
	}
	b.WriteString("### Switch: three hosts, `xdpfwd --mode switch` against a Linux bridge\n\n")
	b.WriteString("Three namespaces, each joined to the root namespace by a veth (TX checksum offload off on the namespace ends, as for the bridge contender), " +
		"switched by `xdpfwd --mode switch --link h0 --link h1 --link h2` (pinned to the forwarder CPU) or by a Linux bridge enslaving the same three root-side ends. " +
		"Permanent neighbour entries between the hosts, so no ARP crosses; once started, host 0 pings host 1 and host 2 pings host 0, so the switch has learned all three before a measurement. " +
		"Traffic goes from host 0 to host 1; host 2 is learned and receives only what is flooded (the column counts what its eth0 received over the whole sample, warm-up included: near 0 once the switch has learned host 1). " +
		"UDP as in the one-way table (sendmmsg as fast as it can, recvmmsg); the CPU per packet as in the CPU-cost tables, at the same paced rate, " +
		"*net* of the generator alone into `XDP_DROP` on host 0's root end (the baseline row); TCP bulk as in the TCP table. " +
		"xdpfwd's switch, like every XDP path on veth, carries MTU-sized TCP segments (a veth whose peer runs XDP stops using GSO), " +
		"while the bridge carries GSO super-packets. ×N is the ratio to `xdpfwd --mode switch` in the same run (for CPU, lower is better).\n\n")
	t := mdTable{head: []string{"contender"}}
	type col struct{ w, metric string }
	var cols []col
	for _, w := range ws {
		switch {
		case w.Metric == "pps":
			t.head = append(t.head, w.Title+", delivered", "offered", "flooded to host 2 per sample")
			cols = append(cols, col{w.Name, "pps"}, col{w.Name, "sent_pps"}, col{w.Name, "flooded_pkts"})
		case strings.HasPrefix(w.Metric, "own_cpu"):
			t.head = append(t.head, fmt.Sprintf("own CPU ns/packet at %s packets/s", si(float64(r.costRate(w)))), "net own CPU ns/packet", "delivered")
			cols = append(cols, col{w.Name, "own_cpu_ns_per_pkt"}, col{w.Name, "own_cpu_ns_per_pkt_net"}, col{w.Name, "delivered_pct"})
		default:
			t.head = append(t.head, w.Title+", "+w.Unit)
			cols = append(cols, col{w.Name, w.Metric})
		}
	}
	for _, c := range append(cs, r.ranContenders("switch", true)...) {
		row := []string{c.Label}
		for _, cl := range cols {
			switch {
			case cl.metric == "delivered_pct":
				row = append(row, r.deliveredCell(c, cl.w))
			case c.Baseline && cl.metric == "own_cpu_ns_per_pkt", cl.metric == "flooded_pkts":
				row = append(row, r.cell(c.Name, cl.w, cl.metric, false))
			case c.Baseline:
				row = append(row, "—")
			default:
				row = append(row, r.cell(c.Name, cl.w, cl.metric, true))
			}
		}
		t.rows = append(t.rows, row)
	}
	b.WriteString(t.String() + "\n")
}

// deliveredCell is a paced workload's delivered share of the offered load.
func (r *Results) deliveredCell(c ContenderResult, w string) string {
	if c.Baseline {
		return "—"
	}
	sent, ok := r.Stat(c.Name, w, "sent_pps")
	got, ok2 := r.Stat(c.Name, w, "pps")
	if !ok || !ok2 || sent.Median <= 0 {
		return "—"
	}
	s := fmt.Sprintf("%.1f %%", 100*got.Median/sent.Median)
	if got.Median < 0.95*sent.Median {
		s += " (did not keep up)"
	}
	return s
}

// reflectSection renders the reflect workload, with ratios to xdpfwd
// --mode reflect.
func (r *Results) reflectSection(b *strings.Builder) {
	cs := r.ranContenders("reflect", false)
	if len(cs) == 0 {
		return
	}
	for _, w := range r.workloads("reflect") {
		fmt.Fprintf(b, "### Reflect: %s\n\n", w.Title)
		fmt.Fprintf(b, "One namespace joined to the root namespace by a veth. In the namespace, an AF_XDP sender (`inline.Sender`, queue 0 of its eth0, copy mode) "+
			"sends one %d-byte frame (UDP, addressed to the root-side end's MAC) as fast as it can; an XDP program on that eth0 counts and drops every frame that comes back "+
			"addressed to it from the root-side end's MAC, i.e. with its MAC addresses swapped (it also gives the veth the NAPI context that a peer's XDP_TX needs). "+
			"The contenders, on the root-side end: `xdpfwd --mode reflect --link <root end>` (pinned to the forwarder CPU), and an XDP program (native) that swaps the MACs and returns `XDP_TX`, "+
			"which runs in softirq on the sending CPU. ×N is the ratio to `xdpfwd --mode reflect` in the same run.\n\n", w.Size)
		t := mdTable{head: []string{"contender", "reflected packets/s", "sent packets/s", "not returned"}}
		for _, c := range cs {
			t.rows = append(t.rows, []string{c.Label,
				r.cell(c.Name, w.Name, "pps", true), r.cell(c.Name, w.Name, "sent_pps", true),
				r.cell(c.Name, w.Name, "loss_pct", false)})
		}
		b.WriteString(t.String() + "\n")
	}
}

// l2Charts draws switch.png (delivered UDP 64 B packets/s, and Gbit/s of
// TCP) and reflect.png (reflected packets/s).
func (r *Results) l2Charts(charts *chartSet) error {
	cs := r.ranContenders("switch", false)
	for _, w := range r.workloads("switch") {
		if w.Metric != "pps" {
			continue
		}
		if err := charts.draw("switch.png", "Switch, three hosts: "+w.Title+", delivered", "million packets/s",
			[]string{"host 0 → host 1"}, r.seriesFor(cs, []string{w.Name}, []string{"pps"}, 1e-6)); err != nil {
			return err
		}
		break
	}
	for _, w := range r.workloads("reflect") {
		if err := charts.draw("reflect.png", "Reflect: "+w.Title, "million packets/s reflected",
			[]string{"reflected"}, r.seriesFor(r.ranContenders("reflect", false), []string{w.Name}, []string{"pps"}, 1e-6)); err != nil {
			return err
		}
		break
	}
	return nil
}
