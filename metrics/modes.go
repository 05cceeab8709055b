package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpfwd/xdpfwd/modes"
)

// Sink is a counting sink (modes.CountingSink): its per-flow counts and
// latency histogram are served as xdpfwd_sink_* metrics.
type Sink interface{ Report() modes.SinkReport }

// Swap is a 5tswap handler (modes.FiveTupleSwap): its counts are served as
// xdpfwd_5tswap_frames_total.
type Swap interface{ Stats() modes.SwapStats }

// latencyBounds are the Prometheus histogram's upper bounds, in ns: 2^k-1
// for 1 µs .. 17 s, each the top of a bucket of the sink's histogram, so
// the cumulative counts are exact.
var latencyBounds = func() []int64 {
	var b []int64
	for k := 10; k <= 34; k++ {
		b = append(b, 1<<k-1)
	}
	return b
}()

// sinkCollector exports a Sink's report, read once per scrape.
type sinkCollector struct {
	s                                                      Sink
	received, lost, reordered, dups, restarts, jumps       *prometheus.Desc
	other, untracked, batchClock, latency, latencyQuantile *prometheus.Desc
	badChecksum                                            *prometheus.Desc
}

func newSinkCollector(s Sink) *sinkCollector {
	flow := []string{"flow"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("xdpfwd_sink_"+name, help, labels, nil)
	}
	return &sinkCollector{s: s,
		received:        d("flow_received_total", "Frames with the txonly generator's payload received, by flow id.", flow),
		lost:            d("flow_lost", "Sequence numbers up to each run's highest never received, by flow id: a gauge, since a late frame takes one back.", flow),
		reordered:       d("flow_reordered_total", "Frames that arrived after a higher sequence number of their run (or after the next run's), by flow id.", flow),
		dups:            d("flow_duplicates_total", "Frames whose sequence number had arrived already, by flow id.", flow),
		restarts:        d("flow_restarts_total", "Generator runs after the first on the flow id (a new run id in the payload).", flow),
		jumps:           d("flow_seq_jumps_total", "Frames more than 2^20 from the flow's highest sequence number: received, counted neither lost nor reordered (a forged frame, or a sequence that jumped: the flow goes on from it if the next frame follows).", flow),
		badChecksum:     d("bad_checksum_frames_total", "Frames with the payload whose UDP checksum fails (or cut short of their UDP length): corrupt or forged, counted in no flow.", nil),
		other:           d("other_frames_total", "Frames without the generator's payload: counted and dropped.", nil),
		untracked:       d("untracked_frames_total", "Frames with the payload and a flow id beyond the sink's 4096.", nil),
		batchClock:      d("latency_batch_clock_total", "Latencies timed to the batch's clock, for frames without the XDP program's arrival stamp.", nil),
		latency:         d("latency_seconds", "From the generator's TX stamp to the XDP program's arrival stamp (CLOCK_MONOTONIC).", nil),
		latencyQuantile: d("latency_quantile_seconds", "p50, p99 and p999 latency: the upper bound of the sink histogram's bucket (within 12.5 %) the percentile falls in.", []string{"quantile"}),
	}
}

func (c *sinkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.received, c.lost, c.reordered, c.dups, c.restarts, c.jumps, c.badChecksum,
		c.other, c.untracked, c.batchClock, c.latency, c.latencyQuantile} {
		ch <- d
	}
}

func (c *sinkCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.Report()
	for _, f := range r.Flows {
		id := strconv.Itoa(f.Flow)
		ch <- prometheus.MustNewConstMetric(c.received, prometheus.CounterValue, float64(f.Received), id)
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, float64(f.Lost), id)
		ch <- prometheus.MustNewConstMetric(c.reordered, prometheus.CounterValue, float64(f.Reordered), id)
		ch <- prometheus.MustNewConstMetric(c.dups, prometheus.CounterValue, float64(f.Dups), id)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(f.Restarts), id)
		ch <- prometheus.MustNewConstMetric(c.jumps, prometheus.CounterValue, float64(f.SeqJumps), id)
	}
	ch <- prometheus.MustNewConstMetric(c.badChecksum, prometheus.CounterValue, float64(r.BadChecksum))
	ch <- prometheus.MustNewConstMetric(c.other, prometheus.CounterValue, float64(r.Other))
	ch <- prometheus.MustNewConstMetric(c.untracked, prometheus.CounterValue, float64(r.Untracked))
	ch <- prometheus.MustNewConstMetric(c.batchClock, prometheus.CounterValue, float64(r.BatchClock))
	l := r.Latency
	buckets := make(map[float64]uint64, len(latencyBounds))
	var acc uint64
	i := 0
	for _, le := range latencyBounds {
		for ; i < len(l.Buckets) && l.Buckets[i].UpTo <= le; i++ {
			acc += l.Buckets[i].Count
		}
		buckets[float64(le)/1e9] = acc
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, l.Count, float64(l.Sum)/1e9, buckets)
	for _, q := range []struct {
		name string
		v    int64
	}{{"0.5", l.P50}, {"0.99", l.P99}, {"0.999", l.P999}} {
		ch <- prometheus.MustNewConstMetric(c.latencyQuantile, prometheus.GaugeValue, float64(q.v)/1e9, q.name)
	}
}

// swapCollector exports a Swap's counts.
type swapCollector struct {
	s               Swap
	frames, dropped *prometheus.Desc
}

func newSwapCollector(s Swap) *swapCollector {
	return &swapCollector{s: s,
		frames: prometheus.NewDesc("xdpfwd_5tswap_frames_total",
			"Frames 5tswap sent back, by what it swapped: l2 (not IP: MACs), l3 (IP without ports: MACs and addresses), l4 (TCP/UDP: MACs, addresses and ports), truncated and malformed (MACs only: the frame is shorter than, or contradicts, its headers).",
			[]string{"swapped"}, nil),
		dropped: prometheus.NewDesc("xdpfwd_5tswap_dropped_total", "Frames under 14 bytes, dropped (counted in truncated too).", nil, nil),
	}
}

func (c *swapCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.frames; ch <- c.dropped }

func (c *swapCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for _, v := range []struct {
		name string
		n    uint64
	}{{"l2", st.L2}, {"l3", st.L3}, {"l4", st.L4}, {"truncated", st.Truncated}, {"malformed", st.Malformed}} {
		ch <- prometheus.MustNewConstMetric(c.frames, prometheus.CounterValue, float64(v.n), v.name)
	}
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped))
}
