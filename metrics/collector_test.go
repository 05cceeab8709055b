package metrics

// Unit tests over a fake forwarder: no root, no kernel.

import (
	"errors"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// fake is a two-link forwarder whose counters the test sets.
type fake struct {
	mu      sync.Mutex
	removed map[int]bool // links removed: "" at their index
	queues  int
	stats   map[[2]int]fwd.LinkStats
	kstats  map[[2]int]xsk.Stats
	kerr    map[[2]int]error
	zones   []fwd.ZoneUsage
	reads   atomic.Int64 // QueueStats calls
}

func newFake(queues int) *fake {
	f := &fake{queues: queues, stats: map[[2]int]fwd.LinkStats{}, kstats: map[[2]int]xsk.Stats{}, kerr: map[[2]int]error{}}
	f.zones = []fwd.ZoneUsage{
		{Name: "frames", Units: 12288, UnitBytes: 2048, FreeUnits: 4000},
		{Name: "inline", Units: 4096, UnitBytes: 256, FreeUnits: 4096},
	}
	return f
}

func (f *fake) Links() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := []string{"veth-a", "veth-b"}
	for i := range l {
		if f.removed[i] {
			l[i] = ""
		}
	}
	return l
}
func (f *fake) Queues() int                 { return f.queues }
func (f *fake) InlineBytes() int            { return 128 }
func (f *fake) LinkQueues(int) int          { return f.queues }
func (f *fake) OwnershipViolations() uint64 { return 0 }
func (f *fake) XDPPassed(int) uint64        { return 0 }

func (f *fake) QueueStats(i, q int) fwd.LinkStats {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats[[2]int{i, q}]
	// Like fwd: fresh maps, every path present, our own drop reasons
	// always, the kernel's when XDP_STATISTICS could be read.
	out := s
	out.Drops = map[string]uint64{fwd.DropUMEMExhausted: 0, fwd.DropRXBadDesc: 0, fwd.DropTXNoRoom: 0}
	for k, v := range s.Drops {
		out.Drops[k] = v
	}
	out.TXPaths = map[string]uint64{"inline": 0, "frame": 0, "frag": 0, "chain": 0}
	for k, v := range s.TXPaths {
		out.TXPaths[k] = v
	}
	out.DescsPerPacket = map[string]uint64{}
	for k, v := range s.DescsPerPacket {
		out.DescsPerPacket[k] = v
	}
	return out
}

func (f *fake) KernelStats(i, q int) (xsk.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kstats[[2]int{i, q}], f.kerr[[2]int{i, q}]
}

func (f *fake) Zones() []fwd.ZoneUsage         { return append([]fwd.ZoneUsage(nil), f.zones...) }
func (f *fake) PagesPer1K() (float64, float64) { return 31.5, 1.25 }
func (f *fake) WorkerStats() []fwd.WorkerStats {
	return []fwd.WorkerStats{{Worker: 0, Rounds: 100, Sleeps: 7, Polls: 6, PollTimeouts: 2, PollEventfd: 1, EventfdWrites: 1}}
}

var testInfo = Info{Version: "1.2.3", XDPModes: []string{"native", "native"}, BindMode: "copy", UMEMBacking: "thp-2MiB"}

func (f *fake) set(i, q int, s fwd.LinkStats, k xsk.Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats[[2]int{i, q}] = s
	f.kstats[[2]int{i, q}] = k
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	m := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

// labelsOf is m's labels by name.
func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// value finds the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestCollectorValues(t *testing.T) {
	src := newFake(2)
	src.set(0, 1, fwd.LinkStats{
		RXPackets: 100, RXBytes: 6400, TXPackets: 7, TXBytes: 700,
		Drops:           map[string]uint64{fwd.DropUMEMExhausted: 3, "future_reason": 2},
		TXPaths:         map[string]uint64{"inline": 5, "chain": 2},
		TXDescriptors:   13,
		InlineFallbacks: 1,
		DescsPerPacket:  map[string]uint64{"1": 5, "4": 2},
	}, xsk.Stats{Rx_dropped: 9, Rx_fill_ring_empty_descs: 4, Rx_ring_full: 5, Tx_ring_empty_descs: 11})
	src.kerr[[2]int{1, 0}] = errors.New("no socket")
	c := newCollector(src, testInfo)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams := gather(t, reg)

	a1 := map[string]string{"link": "veth-a", "queue": "1"}
	with := func(m map[string]string, k, v string) map[string]string {
		n := map[string]string{k: v}
		for a, b := range m {
			n[a] = b
		}
		return n
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"xdpfwd_rx_packets_total", a1, 100},
		{"xdpfwd_rx_bytes_total", a1, 6400},
		{"xdpfwd_tx_packets_total", a1, 7},
		{"xdpfwd_tx_bytes_total", a1, 700},
		{"xdpfwd_drops_total", with(a1, "reason", "umem_exhausted"), 3},
		{"xdpfwd_drops_total", with(a1, "reason", "future_reason"), 2},
		{"xdpfwd_drops_total", with(a1, "reason", "rx_dropped"), 9},
		{"xdpfwd_drops_total", with(a1, "reason", "rx_fill_ring_empty_descs"), 4},
		{"xdpfwd_drops_total", with(a1, "reason", "tx_no_layout"), 0},
		{"xdpfwd_tx_path_packets_total", with(a1, "path", "inline"), 5},
		{"xdpfwd_tx_path_packets_total", with(a1, "path", "frag"), 0},
		{"xdpfwd_tx_descriptors_total", a1, 13},
		{"xdpfwd_inline_fallbacks_total", a1, 1},
		{"xdpfwd_tx_descriptors_per_packet", a1, 7},
		{"xdpfwd_xsk_rx_dropped_total", a1, 9},
		{"xdpfwd_xsk_rx_ring_full_total", a1, 5},
		{"xdpfwd_xsk_rx_fill_ring_empty_descs_total", a1, 4},
		{"xdpfwd_xsk_tx_ring_empty_descs_total", a1, 11},
		{"xdpfwd_umem_zone_units", map[string]string{"zone": "frames"}, 12288},
		{"xdpfwd_umem_zone_free_units", map[string]string{"zone": "frames"}, 4000},
		{"xdpfwd_umem_zone_unit_bytes", map[string]string{"zone": "inline"}, 256},
		{"xdpfwd_umem_pages_per_1k_descriptors", map[string]string{"granularity": "4k"}, 31.5},
		{"xdpfwd_umem_pages_per_1k_descriptors", map[string]string{"granularity": "2m"}, 1.25},
		{"xdpfwd_info", map[string]string{"version": "1.2.3", "xdp_mode": "native", "bind_mode": "copy", "umem_backing": "thp-2MiB"}, 1},
		{"xdpfwd_link_info", map[string]string{"link": "veth-b", "xdp_mode": "native", "bind_mode": "copy"}, 1},
		{"xdpfwd_queues", nil, 2},
		{"xdpfwd_inline_max_bytes", nil, 128},
	}
	for _, c := range checks {
		got, ok := value(t, fams, c.name, c.labels)
		if !ok {
			t.Errorf("%s%v: missing", c.name, c.labels)
		} else if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// No XDP_STATISTICS for veth-b queue 0: no xsk series and no kernel
	// drop reasons there (absent, not a misleading 0), ours still there.
	b0 := map[string]string{"link": "veth-b", "queue": "0"}
	if _, ok := value(t, fams, "xdpfwd_xsk_rx_dropped_total", b0); ok {
		t.Errorf("xsk series for a socket whose statistics failed")
	}
	if _, ok := value(t, fams, "xdpfwd_drops_total", with(b0, "reason", "rx_dropped")); ok {
		t.Errorf("kernel drop reason for a socket whose statistics failed")
	}
	if _, ok := value(t, fams, "xdpfwd_drops_total", with(b0, "reason", "umem_exhausted")); !ok {
		t.Errorf("own drop reason missing")
	}

	// The histogram: cumulative buckets at DescBuckets, sum = Σ k·n.
	var h *dto.Histogram
	for _, m := range fams["xdpfwd_tx_descriptors_per_packet"].GetMetric() {
		if l := labelsOf(m); l["link"] == "veth-a" && l["queue"] == "1" {
			h = m.GetHistogram()
		}
	}
	if h == nil {
		t.Fatal("no histogram for veth-a queue 1")
	}
	if h.GetSampleSum() != 5*1+2*4 {
		t.Errorf("histogram sum %v, want 13", h.GetSampleSum())
	}
	wantCum := map[float64]uint64{1: 5, 2: 5, 3: 5, 4: 7, 5: 7, 18: 7}
	for _, b := range h.GetBucket() {
		if w, ok := wantCum[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if len(h.GetBucket()) != len(DescBuckets) {
		t.Errorf("%d buckets, want %d", len(h.GetBucket()), len(DescBuckets))
	}

	// Mixed XDP modes.
	info := testInfo
	info.XDPModes[1] = "generic"
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(newCollector(src, info))
	f2 := gather(t, reg2)
	if _, ok := value(t, f2, "xdpfwd_info", map[string]string{"xdp_mode": "mixed"}); !ok {
		t.Errorf("xdpfwd_info xdp_mode is not \"mixed\" for native+generic")
	}
	if _, ok := value(t, f2, "xdpfwd_link_info", map[string]string{"link": "veth-b", "xdp_mode": "generic"}); !ok {
		t.Errorf("xdpfwd_link_info lacks veth-b generic")
	}
}

// TestLint: every family passes promlint and the project's conventions.
func TestLint(t *testing.T) {
	src := newFake(2)
	src.set(0, 0, fwd.LinkStats{RXPackets: 1, DescsPerPacket: map[string]uint64{"1": 1}}, xsk.Stats{})
	s, err := newServer(newCollector(src, testInfo), Options{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(s.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	checkConventions(t, gather(t, s.Registry()))
}

// checkConventions: xdpfwd_ prefix, _total exactly on counters, help text,
// link and queue labels on per-socket families.
func checkConventions(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	perQueue := []string{
		"xdpfwd_rx_packets_total", "xdpfwd_rx_bytes_total", "xdpfwd_tx_packets_total", "xdpfwd_tx_bytes_total",
		"xdpfwd_drops_total", "xdpfwd_tx_path_packets_total", "xdpfwd_tx_descriptors_total",
		"xdpfwd_inline_fallbacks_total", "xdpfwd_tx_descriptors_per_packet",
		"xdpfwd_xsk_rx_dropped_total", "xdpfwd_xsk_rx_invalid_descs_total", "xdpfwd_xsk_tx_invalid_descs_total",
		"xdpfwd_xsk_rx_ring_full_total", "xdpfwd_xsk_rx_fill_ring_empty_descs_total", "xdpfwd_xsk_tx_ring_empty_descs_total",
		"xdpfwd_tx_kicks_total", "xdpfwd_rx_fill_wakeups_total", "xdpfwd_rx_batch_packets",
	}
	for _, n := range perQueue {
		mf, ok := fams[n]
		if !ok {
			t.Errorf("family %s missing", n)
			continue
		}
		for _, m := range mf.GetMetric() {
			names := map[string]bool{}
			for _, lp := range m.GetLabel() {
				names[lp.GetName()] = true
			}
			if !names["link"] || !names["queue"] {
				t.Errorf("%s: sample without link and queue labels: %v", n, m.GetLabel())
			}
		}
	}
	for _, n := range []string{"xdpfwd_umem_zone_units", "xdpfwd_umem_zone_free_units", "xdpfwd_umem_zone_unit_bytes",
		"xdpfwd_umem_pages_per_1k_descriptors", "xdpfwd_info", "xdpfwd_link_info", "xdpfwd_queues", "xdpfwd_inline_max_bytes",
		"xdpfwd_worker_rounds_total", "xdpfwd_worker_sleeps_total", "xdpfwd_worker_polls_total",
		"xdpfwd_worker_poll_timeouts_total", "xdpfwd_worker_poll_eventfd_wakeups_total", "xdpfwd_worker_eventfd_writes_total"} {
		if _, ok := fams[n]; !ok {
			t.Errorf("family %s missing", n)
		}
	}
	for name, mf := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		if !strings.HasPrefix(name, "xdpfwd_") {
			t.Errorf("%s: not under the xdpfwd_ prefix", name)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help text", name)
		}
		isCounter := mf.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s: type %v; _total is for counters and only counters", name, mf.GetType())
		}
		if strings.Contains(name, "_total_") {
			t.Errorf("%s: _total inside the name", name)
		}
	}
}

// TestPromlintCatches: the lint does fire (a counter without _total).
func TestPromlintCatches(t *testing.T) {
	l := promlint.New(strings.NewReader("# HELP xdpfwd_rx_packets rx\n# TYPE xdpfwd_rx_packets counter\nxdpfwd_rx_packets 1\n"))
	problems, err := l.Lint()
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("promlint found nothing wrong with a counter lacking _total")
	}
}

// TestFreezeOnUnhealthy: once the health function fails, scrapes no longer
// read the forwarder and serve the last values; /healthz is 503 with the
// reason.
func TestFreezeOnUnhealthy(t *testing.T) {
	src := newFake(1)
	src.set(0, 0, fwd.LinkStats{RXPackets: 10}, xsk.Stats{})
	var stopping atomic.Pointer[string]
	s, err := newServer(newCollector(src, testInfo), Options{Health: func() error {
		if r := stopping.Load(); r != nil {
			return errors.New(*r)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz while running: %d %q, want 200 \"ok\\n\"", code, body)
	}
	if got := testutil.ToFloat64(rxOf(t, s, "veth-a", "0")); got != 10 {
		t.Fatalf("rx before: %v", got)
	}
	src.set(0, 0, fwd.LinkStats{RXPackets: 20}, xsk.Stats{})
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, `xdpfwd_rx_packets_total{link="veth-a",namespace="",pod="",queue="0"} 20`) {
		t.Fatalf("/metrics: %d, rx 20 not in:\n%s", code, body)
	}

	reason := "stopping: received terminated"
	stopping.Store(&reason)
	src.set(0, 0, fwd.LinkStats{RXPackets: 30}, xsk.Stats{})
	before := src.reads.Load()
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, reason) {
		t.Errorf("/healthz while stopping: %d %q, want 503 with %q", code, body, reason)
	}
	code, body = get("/metrics")
	if code != 200 || !strings.Contains(body, `xdpfwd_rx_packets_total{link="veth-a",namespace="",pod="",queue="0"} 20`) {
		t.Errorf("/metrics after stop: %d, want the frozen 20 in:\n%s", code, body)
	}
	if n := src.reads.Load() - before; n != 0 {
		t.Errorf("%d forwarder reads after the health function failed", n)
	}
	if !s.Collector().Frozen() {
		t.Errorf("collector not frozen")
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("/nope: %d, want 404", code)
	}
}

// TestFreeze: Freeze without a health function also stops reads and turns
// /healthz to 503.
func TestFreeze(t *testing.T) {
	src := newFake(1)
	s, err := newServer(newCollector(src, testInfo), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Collector().Freeze()
	before := src.reads.Load()
	gather(t, s.Registry())
	if n := src.reads.Load() - before; n != 0 {
		t.Errorf("%d reads after Freeze", n)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/healthz after Freeze: %d, want 503", rec.Code)
	}
}

// rxOf returns a collector that yields just one rx_packets sample, for
// testutil.ToFloat64.
func rxOf(t *testing.T, s *Server, link, queue string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric, 1024)
		s.c.Collect(all)
		close(all)
		for m := range all {
			var d dto.Metric
			if m.Desc() != s.c.d.rxPackets || m.Write(&d) != nil {
				continue
			}
			if l := labelsOf(&d); l["link"] == link && l["queue"] == queue {
				ch <- m
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// TestHealthCheck: a failing Check (a stalled worker) turns /healthz 503
// with the reason while it lasts, and freezes nothing: /metrics still reads
// the forwarder, and /healthz is 200 again once the check passes.
func TestHealthCheck(t *testing.T) {
	src := newFake(1)
	var stalled atomic.Pointer[string]
	s, err := newServer(newCollector(src, testInfo), Options{Check: func() error {
		if r := stalled.Load(); r != nil {
			return errors.New(*r)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q, want 200", code, body)
	}
	reason := "stalled: worker 0: no progress for 5s with packets waiting on its RX rings"
	stalled.Store(&reason)
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, reason) {
		t.Errorf("/healthz while stalled: %d %q, want 503 with the reason", code, body)
	}
	src.set(0, 0, fwd.LinkStats{RXPackets: 42}, xsk.Stats{})
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `xdpfwd_rx_packets_total{link="veth-a",namespace="",pod="",queue="0"} 42`) {
		t.Errorf("/metrics while stalled: %d, want a fresh reading (42) in:\n%s", code, body)
	}
	if s.Collector().Frozen() {
		t.Errorf("a failed check froze the collector")
	}
	stalled.Store(nil)
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz once the stall ended: %d %q, want 200", code, body)
	}
}

// TestDocumented: every family the Collector exports is in README.md.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src := newFake(1)
	src.set(0, 0, fwd.LinkStats{RXPackets: 1, DescsPerPacket: map[string]uint64{"1": 1}}, xsk.Stats{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(src, testInfo))
	reg.MustRegister(newFDBCollector(fakeFDB{}))
	for name := range gather(t, reg) {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s: not documented in metrics/README.md", name)
		}
	}
}

// fakeFDB is a switch's table with one entry.
type fakeFDB struct{}

func (fakeFDB) Len() int { return 1 }
func (fakeFDB) All() iter.Seq[fdb.Entry] {
	return func(yield func(fdb.Entry) bool) { yield(fdb.Entry{Link: 1}) }
}
func (fakeFDB) Stats() fdb.Stats { return fdb.Stats{Size: 64, Learned: 1} }

// TestCollectorPods: a link that serves a pod has its namespace and pod on
// every series (and its UID on xdpfwd_link_info), one that serves none
// has them empty; once the link is removed, no series names the pod.
func TestCollectorPods(t *testing.T) {
	src := newFake(2)
	src.set(0, 1, fwd.LinkStats{RXPackets: 5, DescsPerPacket: map[string]uint64{"1": 5}}, xsk.Stats{})
	web := Pod{Namespace: "shop", Name: "web-0", UID: "8d1c7f3e-0b4a-4c52-9f1d-6a2e5b7c9d01"}
	s, err := newServer(newCollector(src, testInfo), Options{Pods: func(link string) (Pod, bool) {
		return web, link == "veth-a"
	}})
	if err != nil {
		t.Fatal(err)
	}
	fams := gather(t, s.Registry())
	perLink := 0
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			link, ok := l["link"]
			if !ok {
				continue
			}
			perLink++
			want := map[string]string{"veth-a": "shop/web-0", "veth-b": "/"}[link]
			if got := l["namespace"] + "/" + l["pod"]; got != want {
				t.Errorf("%s{link=%q}: namespace/pod %q, want %q", name, link, got, want)
			}
		}
	}
	if perLink == 0 {
		t.Fatal("no series with a link label")
	}
	if v, ok := value(t, fams, "xdpfwd_rx_packets_total", map[string]string{"link": "veth-a", "queue": "1", "namespace": "shop", "pod": "web-0"}); !ok || v != 5 {
		t.Errorf("rx of shop/web-0's queue 1: %v %v, want 5", v, ok)
	}
	if _, ok := value(t, fams, "xdpfwd_link_info", map[string]string{"link": "veth-a", "pod_uid": web.UID}); !ok {
		t.Errorf("xdpfwd_link_info lacks veth-a's pod_uid")
	}
	// The pod's link removed: its series go, the other link's stay.
	src.mu.Lock()
	src.removed = map[int]bool{0: true}
	src.mu.Unlock()
	fams = gather(t, s.Registry())
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			if l := labelsOf(m); l["pod"] == "web-0" || l["link"] == "veth-a" {
				t.Errorf("%s: a series of the removed link: %v", name, l)
			}
		}
	}
	if _, ok := value(t, fams, "xdpfwd_rx_packets_total", map[string]string{"link": "veth-b"}); !ok {
		t.Error("veth-b's series went with veth-a")
	}
}
