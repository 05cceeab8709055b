package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// scrapeFamilies GETs url and parses the text exposition.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, url)
	if code != 200 {
		t.Fatalf("GET %s: %d", url, code)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// byLabel is a family's values by the value of label ("" for none).
func byLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.Metric {
		k := ""
		for _, l := range m.Label {
			if l.GetName() == label {
				k = l.GetValue()
			}
		}
		switch {
		case m.Counter != nil:
			out[k] = m.Counter.GetValue()
		case m.Gauge != nil:
			out[k] = m.Gauge.GetValue()
		}
	}
	return out
}

// TestSinkMetricsMatchReport: two bounded txonly runs (4 flows each, so
// each flow restarts once) from namespace A into `run --mode sink` on the
// pair's root end: once the sink's counts are still, /metrics says per
// flow what the sink's report in its summary says (received, lost,
// reordered, duplicates, restarts), and the latency histogram's count,
// sum, buckets and quantiles are the report's.
func TestSinkMetricsMatchReport(t *testing.T) {
	p := newPair(t, topo.Options{})
	if out, err := exec.Command("ip", "netns", "exec", p.A.Name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1").CombinedOutput(); err != nil {
		t.Fatalf("quiet A's stack: %v: %s", err, out)
	}
	sumFile := filepath.Join(t.TempDir(), "sink.json")
	pr := startBin(t, "run", "--mode", "sink", "--link", p.LinkA, "--metrics", "127.0.0.1:0", "--summary", sumFile,
		"--stats-interval", "0", "--control", "off", "--queues", "1")
	addr := waitMetricsAddr(t, pr, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(pr.stderr.String(), readyMsg) {
		if pr.exited() || time.Now().After(deadline) {
			t.Fatalf("sink not ready\n%s", pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	const runs, count, flows = 2, 6000, 4
	for range runs {
		out, err := exec.Command("ip", "netns", "exec", p.A.Name, binary(t), "run", "--mode", "txonly", "--link", p.PeerA,
			"--count", strconv.Itoa(count), "--rate", "50k", "--flows", strconv.Itoa(flows), "--stats-interval", "0", "--control", "off").CombinedOutput()
		if err != nil {
			t.Fatalf("txonly: %v\n%s", err, out)
		}
	}
	// Still: two scrapes 200 ms apart agree.
	url := "http://" + addr + "/metrics"
	var fams map[string]*dto.MetricFamily
	prev := -1.0
	for deadline := time.Now().Add(10 * time.Second); ; {
		fams = scrapeFamilies(t, url)
		var n float64
		for _, v := range byLabel(fams, "xdpfwd_sink_flow_received_total", "flow") {
			n += v
		}
		if n > 0 && n == prev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink counts not still within 10 s (last %v)", n)
		}
		prev = n
		time.Sleep(200 * time.Millisecond)
	}
	pr.interrupt()
	b, err := os.ReadFile(sumFile)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Sink *modes.SinkReport `json:"sink"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.Sink == nil {
		t.Fatalf("summary %s: no sink report (%v)", sumFile, err)
	}
	r := sum.Sink
	t.Logf("sink report: received %d lost %d reordered %d dups %d other %d, latency p50 %d ns over %d", r.Received, r.Lost, r.Reordered, r.Dups, r.Other, r.Latency.P50, r.Latency.Count)
	if len(r.Flows) != flows || r.Received < runs*count/2 {
		t.Fatalf("report has %d flows, %d received: want %d flows and most of %d frames", len(r.Flows), r.Received, flows, runs*count)
	}
	got := map[string]map[string]float64{}
	for _, n := range []string{"received_total", "lost", "reordered_total", "duplicates_total", "restarts_total"} {
		got[n] = byLabel(fams, "xdpfwd_sink_flow_"+n, "flow")
	}
	for _, f := range r.Flows {
		id := strconv.Itoa(f.Flow)
		for n, want := range map[string]uint64{"received_total": f.Received, "lost": f.Lost, "reordered_total": f.Reordered,
			"duplicates_total": f.Dups, "restarts_total": f.Restarts} {
			if v, ok := got[n][id]; !ok || v != float64(want) {
				t.Errorf("xdpfwd_sink_flow_%s{flow=%q} = %v (present %v), report %d", n, id, v, ok, want)
			}
		}
		if f.Restarts != runs-1 {
			t.Errorf("flow %d: %d restarts, want %d (one per txonly run after the first)", f.Flow, f.Restarts, runs-1)
		}
	}
	if v := byLabel(fams, "xdpfwd_sink_other_frames_total", "")[""]; v != float64(r.Other) {
		t.Errorf("other frames %v, report %d", v, r.Other)
	}
	h := fams["xdpfwd_sink_latency_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != r.Latency.Count || h.GetSampleSum() != float64(r.Latency.Sum)/1e9 {
		t.Errorf("latency histogram count %d sum %v, report %d and %v", h.GetSampleCount(), h.GetSampleSum(), r.Latency.Count, float64(r.Latency.Sum)/1e9)
	}
	for _, bk := range h.Bucket {
		var want uint64
		for _, rb := range r.Latency.Buckets {
			if float64(rb.UpTo)/1e9 <= bk.GetUpperBound() {
				want += rb.Count
			}
		}
		if bk.GetCumulativeCount() != want {
			t.Errorf("latency bucket le=%v: %d, report %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want)
		}
	}
	q := byLabel(fams, "xdpfwd_sink_latency_quantile_seconds", "quantile")
	for name, want := range map[string]int64{"0.5": r.Latency.P50, "0.99": r.Latency.P99, "0.999": r.Latency.P999} {
		if q[name] != float64(want)/1e9 {
			t.Errorf("latency quantile %s = %v s, report %d ns", name, q[name], want)
		}
	}
	if t.Failed() {
		t.Logf("sink stderr:\n%s", pr.stderr.String())
	}
}
