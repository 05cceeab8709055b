package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// fwdCost is one reading of what a forwarder process spends besides moving
// packets: its threads' context switches and user/system CPU time (any
// forwarder process), and xdpfwd's own cost counters from its --metrics.
type fwdCost struct {
	proc         bool // a forwarder process was read
	vcs, ncs     float64
	utime, stime float64 // seconds
	metrics      map[string]float64
}

// costCounters are the xdpfwd metrics readFwdCost sums over every label.
var costCounters = []string{
	"xdpfwd_rx_packets_total", "xdpfwd_tx_kicks_total", "xdpfwd_rx_fill_wakeups_total", "xdpfwd_rx_batch_packets_count",
	"xdpfwd_worker_sleeps_total", "xdpfwd_worker_polls_total", "xdpfwd_worker_poll_timeouts_total",
	"xdpfwd_worker_poll_eventfd_wakeups_total", "xdpfwd_worker_eventfd_writes_total",
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ).
const clockTick = 100

func (e *env) readFwdCost(ctx context.Context) fwdCost {
	var fc fwdCost
	if pid := e.childPID(); pid > 0 {
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		if b, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
				f := strings.Fields(string(b[i+1:]))
				if len(f) > 12 {
					u, _ := strconv.ParseFloat(f[11], 64)
					s, _ := strconv.ParseFloat(f[12], 64)
					fc.utime, fc.stime, fc.proc = u/clockTick, s/clockTick, true
				}
			}
		}
		tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "status"))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				k, v, ok := strings.Cut(line, ":")
				if !ok {
					continue
				}
				n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				switch k {
				case "voluntary_ctxt_switches":
					fc.vcs += n
				case "nonvoluntary_ctxt_switches":
					fc.ncs += n
				}
			}
		}
	}
	if addr := e.child.Load().metrics(); addr != "" {
		if ss, err := scrapeMetrics(ctx, addr, costCounters...); err == nil {
			fc.metrics = map[string]float64{}
			for _, s := range ss {
				fc.metrics[s.name] += s.value
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
	if a.proc && b.proc && got > 0 {
		m["fwd_user_ns_per_pkt"] = (b.utime - a.utime) * 1e9 / got
		m["fwd_sys_ns_per_pkt"] = (b.stime - a.stime) * 1e9 / got
		m["fwd_ctxsw_per_1k"] = 1000 * (b.vcs + b.ncs - a.vcs - a.ncs) / got
		m["fwd_invol_ctxsw_per_1k"] = 1000 * (b.ncs - a.ncs) / got
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
	m["fill_wakeups_per_1k"] = per(d("rx_fill_wakeups_total"))
	m["batches_per_1k"] = per(d("rx_batch_packets_count"))
	m["syscalls_per_1k"] = per(d("worker_sleeps_total") + d("tx_kicks_total") + d("rx_fill_wakeups_total") +
		d("worker_poll_eventfd_wakeups_total") + d("worker_eventfd_writes_total"))
}
