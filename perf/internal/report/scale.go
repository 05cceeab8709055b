// The scale workloads' section: the switch's cost and what it holds as
// the pods it serves grow.

package report

import (
	"fmt"
	"strings"
)

// scaleSection renders the scale group: one row per contender and
// measure, one column per pod count, and the largest count's figure as a
// ratio to the smallest's (flat is ×1.00).
func (r *Results) scaleSection(b *strings.Builder) {
	cs := r.ranContenders("scale", false)
	ws := r.workloads("scale")
	if len(cs) == 0 || len(ws) == 0 {
		return
	}
	byMetric := map[string][]WorkloadInfo{}
	for _, w := range ws {
		byMetric[w.Metric] = append(byMetric[w.Metric], w)
	}
	b.WriteString("### Scale: one switch, more pods\n\n")
	b.WriteString("The switch topology with *N* pods: host 0 is the uplink, hosts 1..*N* the pods, each a namespace joined to the root namespace by a veth, " +
		"switched by `xdpfwd --mode switch` with a `--link` per host (pinned to the forwarder CPU), by a Linux bridge enslaving the same ends, " +
		"or by Open vSwitch's userspace datapath with an afxdp port on each and its NORMAL rule (MAC learning), one PMD thread on the forwarder CPU. " +
		"Every pod is learned before a measurement (each pings host 0); traffic goes from host 0 to host 1 and the other pods are idle, " +
		"so what grows with *N* is what the switch holds and walks per link, not the traffic. " +
		"CPU per packet as in the switch table (own CPU at the paced rate, net of the generator alone into `XDP_DROP` on host 0's root end); " +
		"packets/s at the maximum offered load. The pods receive with an XDP program on their eth0 that counts and drops the UDP (ARP and ICMP pass), not with sockets: " +
		"with flows over every pod, the pods' UDP stacks, which the kernel runs in the switch's transmit, and perf's 63 receivers would double every contender's cost. " +
		"For xdpfwd and Open vSwitch, at the end of each window: the process's resident memory (`VmRSS`) and its ready time, from its start to the first ping across it; " +
		"for xdpfwd also its UMEM (every zone's units × unit size, from its metrics) and its forwarding database's entries. " +
		"The next points keep 63 pods and send from 1,024 and 16,384 source MACs in turn behind the uplink (xdpfwd's txonly generator), which the switch learns: " +
		"16,384 is twice xdpfwd's `--fdb-size` default, so it evicts, and `fdb_evictions` counts it. " +
		"The points with flows spread the traffic over every pod in turn, each pod's share from source ports in turn, so that many UDP 5-tuples cross the switch, to every link. " +
		"The last column is the largest pod count's median over the smallest's: ×1.00 is flat.\n\n")
	r.scaleTable(b, cs, byMetric["own_cpu_ns_per_pkt_net"], []scaleRow{{"net own CPU ns/packet", "own_cpu_ns_per_pkt_net"}, {"delivered", "delivered_pct"}})
	r.scaleTable(b, cs, byMetric["pps"], []scaleRow{{"delivered packets/s", "pps"},
		{"resident MiB", "rss_mib"}, {"UMEM MiB", "umem_mib"}, {"FDB entries", "fdb_entries"}, {"FDB evictions since start", "fdb_evictions"}, {"ready ms", "ready_ms"}})
}

// scaleRow is one measure of the scale tables: its label and metric.
type scaleRow struct{ label, metric string }

func (r *Results) scaleTable(b *strings.Builder, cs []ContenderResult, ws []WorkloadInfo, rows []scaleRow) {
	if len(ws) == 0 {
		return
	}
	t := mdTable{head: []string{"contender", "measure"}}
	for _, w := range ws {
		t.head = append(t.head, scaleLabel(w))
	}
	t.head = append(t.head, scaleLabel(ws[len(ws)-1])+" / "+scaleLabel(ws[0]))
	for _, c := range cs {
		for _, m := range rows {
			row := []string{c.Label, m.label}
			measured := false
			for _, w := range ws {
				cell := "—"
				if m.metric == "delivered_pct" {
					cell = r.deliveredCell(c, w.Name)
				} else {
					cell = r.cell(c.Name, w.Name, m.metric, false)
				}
				measured = measured || cell != "—"
				row = append(row, cell)
			}
			if !measured {
				continue // a kernel contender has no process to measure
			}
			ratio := "—"
			first, ok1 := r.Stat(c.Name, ws[0].Name, m.metric)
			last, ok2 := r.Stat(c.Name, ws[len(ws)-1].Name, m.metric)
			if ok1 && ok2 && first.Median > 0 && m.metric != "delivered_pct" {
				ratio = fmt.Sprintf("×%.2f", last.Median/first.Median)
			}
			t.rows = append(t.rows, append(row, ratio))
		}
	}
	b.WriteString(t.String() + "\n")
}

// scaleLabel names a scale workload's point: its pods, its source MACs
// when more than one, and its flows when spread over the pods.
func scaleLabel(w WorkloadInfo) string {
	l := fmt.Sprintf("%d pods", w.Hosts-1)
	if w.MACs > 1 {
		l += fmt.Sprintf(", %d MACs", w.MACs)
	}
	if w.SpreadFlows > 0 {
		l += fmt.Sprintf(", %d flows", w.SpreadFlows)
	}
	return l
}
