// What the forwarder process spends over a cost workload's window: CPU
// by mode, context switches, and xdpfwd's own counters per packet.

package main

import (
	"context"

	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
)

// fwdCost is one reading of what a forwarder process spends besides moving
// packets: its threads' context switches and user/system CPU time (any
// forwarder process), and xdpfwd's own cost counters from its --metrics.
type fwdCost struct {
	measure.ProcCost
	metrics map[string]float64
}

// costCounters are the xdpfwd metrics readFwdCost sums over every label.
var costCounters = []string{
	"xdpfwd_rx_packets_total", "xdpfwd_tx_kicks_total", "xdpfwd_rx_fill_wakeups_total", "xdpfwd_rx_batch_packets_count",
	"xdpfwd_worker_sleeps_total", "xdpfwd_worker_polls_total", "xdpfwd_worker_poll_timeouts_total",
	"xdpfwd_worker_poll_eventfd_wakeups_total", "xdpfwd_worker_eventfd_writes_total", "xdpfwd_worker_kick_polls_total",
}

// readFwdCost reads the running forwarder's costs; a zero fwdCost when
// there is none.
func (e *env) readFwdCost(ctx context.Context) fwdCost {
	var fc fwdCost
	if pid := e.childPID(); pid > 0 {
		fc.ProcCost = measure.ReadProcCost(pid)
	}
	if addr := e.child.Load().metrics(); addr != "" {
		if ss, err := measure.Scrape(ctx, addr, costCounters...); err == nil {
			fc.metrics = map[string]float64{}
			for _, s := range ss {
				fc.metrics[s.Name] += s.Value
			}
		}
	}
	return fc
}

// costMetrics adds the forwarder's cost over the window: per packet
// delivered, its user and system CPU and context switches; per 1,000
// packets xdpfwd received, its ppoll returns, wake-ups (returns with
// something ready), TX kicks, fill-ring wake-ups, RX batches and system
// calls (ppoll or nanosleep per sleep, sendto, recvfrom, eventfd reads and
// writes).
func costMetrics(m map[string]float64, a, b fwdCost, got float64) {
	if a.OK && b.OK && got > 0 {
		m["fwd_user_ns_per_pkt"] = (b.UTime - a.UTime) * 1e9 / got
		m["fwd_sys_ns_per_pkt"] = (b.STime - a.STime) * 1e9 / got
		m["fwd_ctxsw_per_1k"] = 1000 * (b.VCS + b.NCS - a.VCS - a.NCS) / got
		m["fwd_invol_ctxsw_per_1k"] = 1000 * (b.NCS - a.NCS) / got
	}
	if a.metrics == nil || b.metrics == nil {
		return
	}
	d := func(name string) float64 { return b.metrics["xdpfwd_"+name] - a.metrics["xdpfwd_"+name] }
	rx := d("rx_packets_total")
	if rx <= 0 {
		return
	}
	per := func(v float64) float64 { return 1000 * v / rx }
	polls := d("worker_polls_total")
	m["polls_per_1k"] = per(polls)
	m["wakeups_per_1k"] = per(polls - d("worker_poll_timeouts_total"))
	m["kicks_per_1k"] = per(d("tx_kicks_total"))
	m["kick_polls_per_1k"] = per(d("worker_kick_polls_total"))
	m["fill_wakeups_per_1k"] = per(d("rx_fill_wakeups_total"))
	m["batches_per_1k"] = per(d("rx_batch_packets_count"))
	m["syscalls_per_1k"] = per(d("worker_sleeps_total") + d("worker_kick_polls_total") + d("tx_kicks_total") + d("rx_fill_wakeups_total") +
		d("worker_poll_eventfd_wakeups_total") + d("worker_eventfd_writes_total"))
}
