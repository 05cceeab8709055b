package main

// The scale workloads: the switch topology (l2.go) with N pods, and M
// source MACs behind its uplink, to chart what a packet costs, and what
// the forwarder holds, as what a node serves grows. Host 0 is the uplink,
// hosts 1..N the pods; traffic goes from host 0 to host 1, from M MACs in
// turn, and every other pod is learned and idle, as most of a node's pods
// are at any moment: what grows is what the forwarder walks, holds and
// polls per link and per MAC, not the traffic. The flows points then
// spread the traffic over every pod, F 5-tuples in all: every TX link
// busy, every flow in the tables.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/xdpprog"
)

// scalePoints are the scale workloads' sizes: pods, then source MACs
// behind the uplink at the most pods, then flows spread over the pods.
// With the uplink, 64 links at most, xdpfwd's --max-links default in
// switch mode; 16,384 MACs are twice its --fdb-size default. The last
// point is all of them at once.
var scalePoints = []struct{ pods, macs, flows int }{
	{2, 1, 0}, {8, 1, 0}, {32, 1, 0}, {63, 1, 0}, {63, 1024, 0}, {63, 16384, 0},
	{63, 1, 1024}, {63, 1, 65536}, {63, 16384, 65536},
}

// scaleContenders run the scale workloads: the switch's, and Open
// vSwitch's learning switch on afxdp ports, where it is installed.
var scaleContenders = append(slices.Clip(switchContenders), "ovs-afxdp-switch")

// scaleWorkloads are the scale group's workloads, two per point: the CPU
// per packet at --cost-rate, and packets/s at the maximum offered load.
// They run only when --workload names them or their group: a 64-namespace
// topology takes seconds to build.
func scaleWorkloads() []*workload {
	var ws []*workload
	for _, pt := range scalePoints {
		name, title := strconv.Itoa(pt.pods), fmt.Sprintf("%d pods", pt.pods)
		if pt.macs > 1 {
			name += fmt.Sprintf("-%dk", pt.macs/1024)
			title += fmt.Sprintf(", %d source MACs", pt.macs)
		}
		if pt.flows > 0 {
			name += fmt.Sprintf("-%dkf", pt.flows/1024)
			title += fmt.Sprintf(", %d flows over every pod", pt.flows)
		}
		ws = append(ws,
			&workload{Name: "scale-cost-" + name, Group: "scale", Title: "CPU per packet, UDP 64 B at a fixed load, " + title,
				Metric: "own_cpu_ns_per_pkt_net", Unit: "ns/packet", Size: 64, Paced: true, Hosts: pt.pods + 1, MACs: pt.macs, SpreadFlows: pt.flows, PodSink: true, OnRequest: true,
				Contenders: scaleContenders, run: runScale},
			&workload{Name: "scale-udp-" + name, Group: "scale", Title: "UDP 64 B, packets/s at maximum offered load, " + title,
				Metric: "pps", Unit: "packets/s", Size: 64, Hosts: pt.pods + 1, MACs: pt.macs, SpreadFlows: pt.flows, PodSink: true, OnRequest: true,
				Contenders: scaleContenders, run: runScale})
	}
	return ws
}

// runScale is the switch's UDP run, with what xdpfwd holds at the end of
// the window: its resident memory, its UMEM, its forwarding database,
// and how long it took from exec to forwarding (child.ready).
func runScale(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	m, err := runSwitch(runUDP)(ctx, e, c, p, w)
	if err != nil || m == nil {
		return m, err
	}
	ch := e.child.Load()
	if ch == nil {
		return m, nil // a kernel contender
	}
	m["ready_ms"] = float64(ch.ready.Milliseconds())
	if kib, ok := rssKiB(ch.p.Pid()); ok {
		m["rss_mib"] = kib / 1024
	}
	if addr := ch.metrics(); addr != "" {
		ss, err := measure.Scrape(ctx, addr, "xdpfwd_umem_zone_units", "xdpfwd_umem_zone_unit_bytes",
			"xdpfwd_fdb_entries", "xdpfwd_fdb_learned_total", "xdpfwd_fdb_evictions_total")
		if err != nil {
			return m, fmt.Errorf("%s metrics: %w", c.Name, err)
		}
		units, unit := map[string]float64{}, map[string]float64{}
		for _, s := range ss {
			switch s.Name {
			case "xdpfwd_umem_zone_units":
				units[s.Labels["zone"]] += s.Value
			case "xdpfwd_umem_zone_unit_bytes":
				unit[s.Labels["zone"]] = s.Value
			case "xdpfwd_fdb_entries":
				m["fdb_entries"] += s.Value
			case "xdpfwd_fdb_learned_total":
				m["fdb_learned"] += s.Value
			case "xdpfwd_fdb_evictions_total":
				m["fdb_evictions"] += s.Value
			}
		}
		var bytes float64
		for z, n := range units {
			bytes += n * unit[z]
		}
		m["umem_mib"] = bytes / (1 << 20)
	}
	return m, nil
}

// rssKiB is the resident memory of process pid, from /proc/PID/status.
func rssKiB(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.ParseFloat(f[0], 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// podSink counts and drops, at each pod's eth0, the UDP the switch
// delivers to it: an XDP program per pod (xdpprog.LoadUDPSink), each
// counting in its host's slot. The scale workloads receive with it, not
// with a socket in each pod: with flows over every pod, the pods' UDP
// stacks (which the kernel runs in the sender's transmit, the switch's
// CPU) and perf's 63 receivers doubled every contender's cost per packet,
// and a switch's own cost is what the scale curves are for.
type podSink struct {
	x      xdpprog.Set
	counts *ebpf.Map
	// dst is the one host counted (its slot), or 0: every pod.
	dst, hosts int
}

// newPodSink attaches a sink to every pod of h (hosts 1..), counting what
// reaches host dst alone, or with dst 0 every pod.
func newPodSink(h *topo.Hosts, dst int) (_ *podSink, err error) {
	s := &podSink{dst: dst, hosts: len(h.NS)}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if s.counts, err = ebpf.NewMap(&ebpf.MapSpec{Name: "perf_pod_udp", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: uint32(len(h.NS))}); err != nil {
		return nil, fmt.Errorf("pod sink map: %w", err)
	}
	s.x.Maps = append(s.x.Maps, s.counts)
	for i := 1; i < len(h.NS); i++ {
		prog, err := xdpprog.LoadUDPSink(s.counts, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("load pod sink: %w", err)
		}
		s.x.Progs = append(s.x.Progs, prog)
		if err := s.x.Attach(h.NS[i], "eth0", prog); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// read is what the sink counted so far: at dst (every pod with dst 0),
// and how many pods counted any.
func (s *podSink) read() (n uint64, reached int, err error) {
	for i := 1; i < s.hosts; i++ {
		var per []uint64
		if err := s.counts.Lookup(uint32(i), &per); err != nil {
			return 0, 0, fmt.Errorf("read pod sink of host %d: %w", i, err)
		}
		var k uint64
		for _, v := range per {
			k += v
		}
		if k > 0 {
			reached++
		}
		if s.dst == 0 || s.dst == i {
			n += k
		}
	}
	return n, reached, nil
}

func (s *podSink) Close() error { return s.x.Close() }
