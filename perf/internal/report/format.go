// How figures are written in the tables: significant digits, SI
// suffixes, per-metric formats, the median [min–max] ×ratio cell, and
// Markdown tables.

package report

import (
	"fmt"
	"math"
	"strings"
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

// FmtMetric writes v as the tables write metric: SI suffixes for rates,
// whole nanoseconds and microseconds, one decimal for percentages.
func FmtMetric(v float64, metric string) string {
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
	case "ooo_per_million", "out_of_order", "flooded_pkts", "fdb_entries", "fdb_evictions", "ready_ms":
		return fmt.Sprintf("%.0f", v)
	}
	return sig3(v)
}

// cell renders "median [min–max] ×ratio" for one contender, workload and
// metric; "—" when there is no sample.
func (r *Results) cell(contender, workload, metric string, withRatio bool) string {
	st, ok := r.Stat(contender, workload, metric)
	if !ok {
		return "—"
	}
	s := FmtMetric(st.Median, metric)
	if lo, hi := FmtMetric(st.Min, metric), FmtMetric(st.Max, metric); st.N > 1 && lo != hi {
		s += " [" + lo + "–" + hi + "]"
	}
	if withRatio {
		if q, ok := r.Ratio(contender, workload, metric); ok {
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

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func secondsDuration(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}

// fmtCount formats a packet count: 812, 1.23k.
func fmtCount(v float64) string {
	if v < 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return si(v)
}

// queueList formats per-queue figures for the table: "q0 1.2k/1.2k …".
func queueList(vals, of []float64) string {
	var s []string
	for i := range vals {
		s = append(s, fmt.Sprintf("q%d %s/%s", i, fmtCount(vals[i]), fmtCount(of[i])))
	}
	return strings.Join(s, ", ")
}

// FmtClock writes d as minutes:seconds.
func FmtClock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
