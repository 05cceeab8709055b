package metrics_test

// A real forwarder between two namespaces, scraped over HTTP.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/metrics"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// sums adds up family name's samples per link (and per extra label, if
// given: key link+"/"+value).
func sums(fams map[string]*dto.MetricFamily, name, extra string) map[string]float64 {
	out := map[string]float64{}
	mf := fams[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		var link, ex string
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "link":
				link = lp.GetValue()
			case extra:
				ex = lp.GetValue()
			}
		}
		key := link
		if extra != "" {
			key += "/" + ex
		}
		switch {
		case m.Counter != nil:
			out[key] += m.Counter.GetValue()
		case m.Gauge != nil:
			out[key] += m.Gauge.GetValue()
		case m.Histogram != nil:
			out[key] += float64(m.Histogram.GetSampleCount())
		}
	}
	return out
}

func statsEqual(a, b [2]fwd.LinkStats) bool {
	for i := range a {
		x, y := a[i], b[i]
		if x.RXPackets != y.RXPackets || x.RXBytes != y.RXBytes || x.TXPackets != y.TXPackets ||
			x.TXBytes != y.TXBytes || x.TXDescriptors != y.TXDescriptors || x.InlineFallbacks != y.InlineFallbacks {
			return false
		}
		for k, v := range x.Drops {
			if y.Drops[k] != v {
				return false
			}
		}
		for k, v := range x.TXPaths {
			if y.TXPaths[k] != v {
				return false
			}
		}
	}
	return true
}

// TestForwarderMetrics: a forwarder carries UDP both ways; /metrics equals
// fwd.LinkStats summed over queues, passes promlint; /healthz is 200 while
// it runs and 503 once it stops, and scrapes after Close serve the last
// values without touching the closed forwarder.
func TestForwarderMetrics(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run("queues="+strconv.Itoa(queues), func(t *testing.T) { testForwarderMetrics(t, queues) })
	}
}

func testForwarderMetrics(t *testing.T, queues int) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pair: %v", err)
		}
	})
	f, err := fwd.New(fwd.Config{Links: []string{p.LinkA, p.LinkB}, Queues: queues})
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	var stopping atomic.Bool
	srv, err := metrics.NewServer(f, metrics.Options{Version: "test-1", Health: func() error {
		if stopping.Load() {
			return errors.New("stopping: test ended the run")
		}
		return nil
	}})
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stopping.Store(true) // before Close begins: the collector stops reading
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		sum, err := f.Shutdown()
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if sum.UMEM.LeakedAddresses != 0 {
			t.Errorf("%d UMEM addresses leaked", sum.UMEM.LeakedAddresses)
		}
	}
	defer stop()

	if code, body := get(t, ts.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz while running: %d %q", code, body)
	}

	const n = 3000
	ab, err := topo.UDPBurst(p.A, p.B, p.V4B, n, 64, 20*time.Second)
	if err != nil {
		t.Fatalf("UDP A→B: %v", err)
	}
	ba, err := topo.UDPBurst(p.B, p.A, p.V4A, n, 900, 20*time.Second)
	if err != nil {
		t.Fatalf("UDP B→A: %v", err)
	}
	t.Logf("UDP A→B %d/%d, B→A %d/%d received", ab.Received, ab.Sent, ba.Received, ba.Sent)

	// Stray packets (neighbour discovery) may still cross: scrape between
	// two identical readings of LinkStats.
	var fams map[string]*dto.MetricFamily
	var want [2]fwd.LinkStats
	var body string
	for try := 0; ; try++ {
		before := [2]fwd.LinkStats{f.LinkStats(0), f.LinkStats(1)}
		var code int
		code, body = get(t, ts.URL+"/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d\n%s", code, body)
		}
		after := [2]fwd.LinkStats{f.LinkStats(0), f.LinkStats(1)}
		if statsEqual(before, after) {
			want = after
			fams = parse(t, body)
			break
		}
		if try == 50 {
			t.Fatal("counters never settled for a scrape")
		}
		time.Sleep(50 * time.Millisecond)
	}

	names := f.Links()
	for i, link := range names {
		w := want[i]
		eq := func(metric string, got, exp float64) {
			t.Helper()
			if got != exp {
				t.Errorf("%s{link=%q} = %v, fwd.LinkStats says %v", metric, link, got, exp)
			}
		}
		eq("xdpfwd_rx_packets_total", sums(fams, "xdpfwd_rx_packets_total", "")[link], float64(w.RXPackets))
		eq("xdpfwd_rx_bytes_total", sums(fams, "xdpfwd_rx_bytes_total", "")[link], float64(w.RXBytes))
		eq("xdpfwd_tx_packets_total", sums(fams, "xdpfwd_tx_packets_total", "")[link], float64(w.TXPackets))
		eq("xdpfwd_tx_bytes_total", sums(fams, "xdpfwd_tx_bytes_total", "")[link], float64(w.TXBytes))
		eq("xdpfwd_tx_descriptors_total", sums(fams, "xdpfwd_tx_descriptors_total", "")[link], float64(w.TXDescriptors))
		eq("xdpfwd_inline_fallbacks_total", sums(fams, "xdpfwd_inline_fallbacks_total", "")[link], float64(w.InlineFallbacks))
		drops := sums(fams, "xdpfwd_drops_total", "reason")
		for r, v := range w.Drops {
			eq("xdpfwd_drops_total{reason="+r+"}", drops[link+"/"+r], float64(v))
		}
		paths := sums(fams, "xdpfwd_tx_path_packets_total", "path")
		for pth, v := range w.TXPaths {
			eq("xdpfwd_tx_path_packets_total{path="+pth+"}", paths[link+"/"+pth], float64(v))
		}
		var hist uint64
		for _, v := range w.DescsPerPacket {
			hist += v
		}
		eq("xdpfwd_tx_descriptors_per_packet_count", sums(fams, "xdpfwd_tx_descriptors_per_packet", "")[link], float64(hist))
		eq("xdpfwd_xsk_rx_dropped_total", sums(fams, "xdpfwd_xsk_rx_dropped_total", "")[link], float64(w.Drops[fwd.DropRXDropped]))
		eq("xdpfwd_xsk_rx_ring_full_total", sums(fams, "xdpfwd_xsk_rx_ring_full_total", "")[link], float64(w.Drops[fwd.DropRXRingFull]))
		eq("xdpfwd_xsk_rx_fill_ring_empty_descs_total", sums(fams, "xdpfwd_xsk_rx_fill_ring_empty_descs_total", "")[link], float64(w.Drops[fwd.DropFillRingEmpty]))
		if _, ok := sums(fams, "xdpfwd_xsk_tx_ring_empty_descs_total", "")[link]; !ok {
			t.Errorf("xdpfwd_xsk_tx_ring_empty_descs_total{link=%q} missing", link)
		}
	}
	// The traffic shows: what A received went out of B and the other way.
	rx := sums(fams, "xdpfwd_rx_packets_total", "")
	tx := sums(fams, "xdpfwd_tx_packets_total", "")
	if rx[names[0]] < float64(ab.Received) || rx[names[1]] < float64(ba.Received) {
		t.Errorf("rx %v below the datagrams received across (%d, %d)", rx, ab.Received, ba.Received)
	}
	if tx[names[1]] < float64(ab.Received) || tx[names[0]] < float64(ba.Received) {
		t.Errorf("tx %v below the datagrams received across (%d, %d)", tx, ab.Received, ba.Received)
	}
	// One series per link and queue, queues labelled 0..queues-1.
	seen := map[string]bool{}
	for _, m := range fams["xdpfwd_rx_packets_total"].GetMetric() {
		var link, queue string
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "link":
				link = lp.GetValue()
			case "queue":
				queue = lp.GetValue()
			}
		}
		if q, err := strconv.Atoi(queue); err != nil || q < 0 || q >= queues {
			t.Errorf("queue label %q outside 0..%d", queue, queues-1)
		}
		seen[link+"/"+queue] = true
	}
	if len(seen) != 2*queues || f.Queues() != queues {
		t.Errorf("%d rx series (%v) for %d queues (forwarder: %d), want one per link and queue", len(seen), seen, queues, f.Queues())
	}
	if got := sums(fams, "xdpfwd_queues", "")[""]; got != float64(f.Queues()) {
		t.Errorf("xdpfwd_queues %v, want %d", got, f.Queues())
	}
	// The inline limit: the default in bytes, then what SetInlineMax
	// (a reload) set, at the next scrape.
	if got := sums(fams, "xdpfwd_inline_max_bytes", "")[""]; got != 256 {
		t.Errorf("xdpfwd_inline_max_bytes %v, want 256 (the default)", got)
	}
	// last is the newest scrape: what /metrics must still serve after
	// the stop (a late packet may have been counted since fams).
	last := fams
	for _, c := range []struct{ set, want int }{{fwd.InlineOff, 0}, {100, 100}, {0, 256}} {
		if err := f.SetInlineMax(c.set); err != nil {
			t.Fatal(err)
		}
		_, b := get(t, ts.URL+"/metrics")
		last = parse(t, b)
		if got := sums(last, "xdpfwd_inline_max_bytes", "")[""]; got != float64(c.want) {
			t.Errorf("after SetInlineMax(%d): xdpfwd_inline_max_bytes %v, want %d", c.set, got, c.want)
		}
	}
	zones := sums(fams, "xdpfwd_umem_zone_units", "zone")
	unitBytes := sums(fams, "xdpfwd_umem_zone_unit_bytes", "zone")
	free := sums(fams, "xdpfwd_umem_zone_free_units", "zone")
	for _, z := range f.Zones() {
		if zones["/"+z.Name] != float64(z.Units) || unitBytes["/"+z.Name] != float64(z.UnitBytes) {
			t.Errorf("zone %s: units %v (want %d), unit bytes %v (want %d)", z.Name, zones["/"+z.Name], z.Units, unitBytes["/"+z.Name], z.UnitBytes)
		}
		if v, ok := free["/"+z.Name]; !ok || v < 0 || v > float64(z.Units) {
			t.Errorf("zone %s: free units %v of %d", z.Name, v, z.Units)
		}
	}
	ls := f.LinkStats(0)
	info := map[string]string{}
	for _, lp := range fams["xdpfwd_info"].GetMetric()[0].GetLabel() {
		info[lp.GetName()] = lp.GetValue()
	}
	wantInfo := map[string]string{"version": "test-1", "bind_mode": ls.BindMode, "umem_backing": string(f.Region().Backing())}
	if m0, m1 := ls.XDPMode, f.LinkStats(1).XDPMode; m0 == m1 {
		wantInfo["xdp_mode"] = m0
	} else {
		wantInfo["xdp_mode"] = "mixed"
	}
	for k, v := range wantInfo {
		if info[k] != v {
			t.Errorf("xdpfwd_info %s=%q, want %q", k, info[k], v)
		}
	}

	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
	for name := range fams {
		if !strings.HasPrefix(name, "xdpfwd_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("unexpected family %s", name)
		}
	}

	// Stop. /healthz turns 503; /metrics still answers, with the values
	// of the last scrape, reading nothing from the closed forwarder.
	stop()
	code, hbody := get(t, ts.URL+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(hbody, "stopping") {
		t.Errorf("/healthz after stop: %d %q, want 503 with a reason", code, hbody)
	}
	code, body2 := get(t, ts.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics after stop: %d", code)
	}
	fams2 := parse(t, body2)
	if a, b := sums(last, "xdpfwd_rx_packets_total", ""), sums(fams2, "xdpfwd_rx_packets_total", ""); a[names[0]] != b[names[0]] || a[names[1]] != b[names[1]] {
		t.Errorf("rx after stop %v, want the last scrape's %v", b, a)
	}
	if !srv.Collector().Frozen() {
		t.Errorf("collector not frozen after stop")
	}
}
