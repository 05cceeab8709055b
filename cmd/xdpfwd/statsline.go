// The stats line (--stats-interval): what the daemon prints per interval,
// from the forwarder's counters.

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/linearize"
)

// statsLine formats one report line from two snapshots taken dt apart:
// per direction, packets/s, Mbit/s and new drops.
//
// With two links it reads as two directions (a→b: what a received, with
// what was dropped of it on a and on its way out of b); with one or more
// than two, per link, what it received and every drop counted on it.
func statsLine(names []string, prev, cur []fwd.LinkStats, dt time.Duration) string {
	sec := dt.Seconds()
	dir := func(a, b int) string {
		pk := cur[a].RXPackets - prev[a].RXPackets
		by := cur[a].RXBytes - prev[a].RXBytes
		dr := cur[a].TotalDrops() - prev[a].TotalDrops()
		to := " rx"
		if b >= 0 {
			to = "→" + names[b]
			dr = dr - (cur[a].TXDrops() - prev[a].TXDrops()) + cur[b].TXDrops() - prev[b].TXDrops()
		}
		return fmt.Sprintf("%s%s %9.0f pps %8.1f Mbit/s drops %d", names[a], to, float64(pk)/sec, float64(by)*8/sec/1e6, dr)
	}
	var paths [linearize.NumPaths]uint64
	var total uint64
	for i := range cur {
		for p := range linearize.NumPaths {
			v := cur[i].TXPaths[p.String()] - prev[i].TXPaths[p.String()]
			paths[p] += v
			total += v
		}
	}
	tail := ""
	if total > 0 {
		tail = fmt.Sprintf(" | tx inline %.0f%% frame %.0f%% frag %.0f%% chain %.0f%%",
			pct(paths[linearize.Inline], total), pct(paths[linearize.Frame], total),
			pct(paths[linearize.Frag], total), pct(paths[linearize.Chain], total))
	}
	if len(cur) == 2 {
		return dir(0, 1) + " | " + dir(1, 0) + tail
	}
	parts := make([]string, len(cur))
	for i := range cur {
		parts[i] = dir(i, -1)
	}
	return strings.Join(parts, " | ") + tail
}

// efficiencyTail formats the stats line's cost figures between two
// readings, per 1,000 packets received: "" when no packet flowed.
func efficiencyTail(prevL, curL []fwd.LinkStats, prevW, curW []fwd.WorkerStats) string {
	e := fwd.NewEfficiency(prevL[:], curL[:], prevW, curW)
	if e.RXPackets == 0 {
		return ""
	}
	return fmt.Sprintf(" | per 1k pkts: polls %.1f wakeups %.1f kicks %.1f fill-wakeups %.1f batches %.1f syscalls %.1f",
		e.Polls, e.Wakeups, e.Kicks, e.FillWakeups, e.Batches, e.Syscalls)
}

func pct(v, total uint64) float64 { return 100 * float64(v) / float64(total) }
