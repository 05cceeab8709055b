package metrics

import (
	"net"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/modes"
)

func gatherModes(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		out[f.GetName()] = f
	}
	return out
}

// value is the metric of fams[name] whose label (if any) has value v.
func modeValue(fams map[string]*dto.MetricFamily, name, label, v string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		ok := label == ""
		for _, l := range m.Label {
			ok = ok || l.GetName() == label && l.GetValue() == v
		}
		if !ok {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

// TestSinkCollector: a sink fed known sequences (flow 0 with a gap and a
// late frame, flow 3 restarted by a new run id, 2 other frames) exports
// exactly its report's counts; latencies of 4 µs fill the histogram's
// 4.095 µs bucket and its sum.
func TestSinkCollector(t *testing.T) {
	s := modes.NewSink(func() int64 { return 5000 })
	tp := gen.Template{
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"), SrcPort: 1024, DstPort: 9,
	}
	var pkts []fwd.Packet
	frame := func(flow uint16, seq uint32, run uint32) {
		tp.Run = run
		b := make([]byte, 60)
		n, lay := tp.Frame(b, 64, flow)
		gen.Stamp(b[:n], lay, seq, 1000)
		pkts = append(pkts, fwd.Packet{Data: b[:n], Len: n, Arrival: 5000})
	}
	for _, q := range []uint32{0, 1, 3, 4, 2, 6} { // 5 lost, 2 late
		frame(0, q, 1)
	}
	for q := range uint32(10) {
		frame(3, q, 1)
	}
	for q := range uint32(5) {
		frame(3, q, 2) // a new run
	}
	frame(3, 4+1<<31-1, 2) // forged: a seq jump
	frame(3, 5, 2)
	pkts[len(pkts)-1].Data[14+20+8+10] ^= 1 // corrupt: a bad checksum
	pkts = append(pkts, fwd.Packet{Data: make([]byte, 60), Len: 60}, fwd.Packet{Data: make([]byte, 60), Len: 60})
	s.Handle(pkts)
	fams := gatherModes(t, newSinkCollector(s))
	for _, c := range []struct {
		name, flow string
		want       float64
	}{
		{"xdpfwd_sink_flow_received_total", "0", 6}, {"xdpfwd_sink_flow_lost", "0", 1},
		{"xdpfwd_sink_flow_reordered_total", "0", 1}, {"xdpfwd_sink_flow_duplicates_total", "0", 0},
		{"xdpfwd_sink_flow_restarts_total", "0", 0},
		{"xdpfwd_sink_flow_received_total", "3", 16}, {"xdpfwd_sink_flow_restarts_total", "3", 1},
		{"xdpfwd_sink_flow_lost", "3", 0}, {"xdpfwd_sink_other_frames_total", "", 2},
		{"xdpfwd_sink_flow_seq_jumps_total", "3", 1}, {"xdpfwd_sink_flow_seq_jumps_total", "0", 0},
		{"xdpfwd_sink_bad_checksum_frames_total", "", 1},
	} {
		label := "flow"
		if c.flow == "" {
			label = ""
		}
		if v, ok := modeValue(fams, c.name, label, c.flow); !ok || v != c.want {
			t.Errorf("%s{flow=%q} = %v (present %v), want %v", c.name, c.flow, v, ok, c.want)
		}
	}
	h := fams["xdpfwd_sink_latency_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 22 || h.GetSampleSum() != 22*4000/1e9 {
		t.Errorf("histogram count %d sum %v, want 22 and %v", h.GetSampleCount(), h.GetSampleSum(), 22*4000/1e9)
	}
	for _, b := range h.Bucket {
		want := uint64(0)
		if b.GetUpperBound() >= 4095e-9 {
			want = 22
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if v, _ := modeValue(fams, "xdpfwd_sink_latency_quantile_seconds", "quantile", "0.99"); v != float64(s.Report().Latency.P99)/1e9 || v < 4000e-9 {
		t.Errorf("p99 %v s, report %d ns", v, s.Report().Latency.P99)
	}
}

type fakeSwap modes.SwapStats

func (f fakeSwap) Stats() modes.SwapStats { return modes.SwapStats(f) }

// TestSwapCollector: each of 5tswap's counts is its own series.
func TestSwapCollector(t *testing.T) {
	fams := gatherModes(t, newSwapCollector(fakeSwap{L2: 1, L3: 2, L4: 3, Truncated: 4, Malformed: 5, Dropped: 6}))
	for i, r := range []string{"l2", "l3", "l4", "truncated", "malformed"} {
		if v, ok := modeValue(fams, "xdpfwd_5tswap_frames_total", "swapped", r); !ok || v != float64(i+1) {
			t.Errorf("xdpfwd_5tswap_frames_total{swapped=%q} = %v (present %v), want %d", r, v, ok, i+1)
		}
	}
	if v, _ := modeValue(fams, "xdpfwd_5tswap_dropped_total", "", ""); v != 6 {
		t.Errorf("dropped %v, want 6", v)
	}
}
