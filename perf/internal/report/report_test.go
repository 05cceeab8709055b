package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// synthetic builds results for two contenders, a baseline and three rounds.
func synthetic(t testing.TB) *Results {
	r := &Results{
		Schema: SchemaVersion, Started: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), ElapsedS: 75, Command: "go run ./perf --quick",
		Machine:  Machine{Kernel: "6.18", CPU: "Test CPU", CPUs: 2, MemGiB: 24, Go: "go1.26"},
		Settings: Settings{Rounds: 3, DurationS: 0.5, WarmupS: 0.2, CostRatePPS: 100000, FwdCPU: 0, LoadCPUs: []int{1}, Queues: 1, GOMAXPROCS: 2},
		Contenders: []ContenderResult{
			{Name: "xdpfwd", Label: "xdpfwd (default)", Ran: true},
			{Name: "bridge", Label: "Linux bridge", Ran: true},
			{Name: "asavie", Label: "asavie", Skipped: "not run: go build failed"},
			{Name: "baseline-drop", Label: "no forwarder", Baseline: true, Ran: true},
		},
	}
	r.Workloads = syntheticWorkloads(t)
	r.Contenders[0].Details = map[string]any{"xps_mode": "sticky"}
	for round := 1; round <= 3; round++ {
		f := float64(round)
		for _, c := range []struct {
			name  string
			scale float64
		}{{"xdpfwd", 1}, {"bridge", 0.5}} {
			for _, size := range []string{"udp-64", "udp-256", "udp-1500"} {
				r.Samples = append(r.Samples, Sample{Round: round, Contender: c.name, Workload: size,
					Metrics: map[string]float64{"pps": c.scale * (1e5 + f*1e4), "sent_pps": 2e5}})
			}
			r.Samples = append(r.Samples,
				Sample{Round: round, Contender: c.name, Workload: "cost-64", Metrics: map[string]float64{
					"pps": 1e5, "sent_pps": 1e5, "own_cpu_ns_per_pkt": 3000 / c.scale, "cpu_ns_per_pkt": 4000 / c.scale, "other_cpu_pct": 10}},
				Sample{Round: round, Contender: c.name, Workload: "tcp-1", Metrics: map[string]float64{"gbps": c.scale * f}},
				Sample{Round: round, Contender: c.name, Workload: "tcp-4", Metrics: map[string]float64{"gbps": c.scale * 2 * f}},
				Sample{Round: round, Contender: c.name, Workload: "rr-1k", Metrics: map[string]float64{
					"tps": c.scale * 2e4, "p50_us": 100 / c.scale, "p99_us": 200 / c.scale, "p999_us": 300 / c.scale}},
				// xdpfwd keeps order; the "bridge" here reorders.
				Sample{Round: round, Contender: c.name, Workload: "reorder-16", Metrics: map[string]float64{
					"ooo_per_million": (1 - c.scale) * 2 * (1e5 + f*1e4), "out_of_order": (1 - c.scale) * 2e3 * f,
					"pps": 1e5, "sent_pps": 1e5, "loss_pct": 0}},
			)
		}
		r.Samples = append(r.Samples, Sample{Round: round, Contender: "baseline-drop", Workload: "cost-64",
			Metrics: map[string]float64{"pps": 1e5, "sent_pps": 1e5, "own_cpu_ns_per_pkt": 1000, "cpu_ns_per_pkt": 1500}})
	}
	r.Samples = append(r.Samples, Sample{Round: 3, Contender: "bridge", Workload: "udp-64", Error: "no packet arrived"})
	r.DeriveNet()
	return r
}

func TestStatsAndRatios(t *testing.T) {
	r := synthetic(t)
	st, ok := r.Stat("xdpfwd", "udp-64", "pps")
	if !ok || st.Median != 120000 || st.Min != 110000 || st.Max != 130000 || st.N != 3 {
		t.Errorf("stat = %+v, %v", st, ok)
	}
	if q, ok := r.Ratio("bridge", "udp-64", "pps"); !ok || q != 0.5 {
		t.Errorf("ratio = %v, %v; want 0.5", q, ok)
	}
	net, ok := r.Stat("bridge", "cost-64", "own_cpu_ns_per_pkt_net")
	if !ok || net.Median != 5000 {
		t.Errorf("net own CPU of bridge = %+v, %v; want 6000-1000", net, ok)
	}
	md := r.Markdown()
	for _, want := range []string{
		"| xdpfwd (default) | 120k [110k–130k] ×1.00 |",
		"| Linux bridge | 60.0k [55.0k–65.0k] ×0.50 |",
		"| no forwarder | — | 1000 | — |",
		"| xdpfwd (default) | 2.00 [1.00–3.00] ×1.00 | 4.00 [2.00–6.00] ×1.00 |",
		"| Linux bridge | 10.0k ×0.50 | 200 ×2.00 | 400 ×2.00 | 600 ×2.00 |",
		"| no forwarder | — | 1000 | — | 1500 | — | — |",
		"**asavie** (`asavie`): not run: go build failed",
		"**Linux bridge**: 1 sample(s) failed, first: udp-64: no packet arrived",
		"### Reordering: 16 sequenced UDP flows over two ingress queues",
		"`--queues 2`",
		"its default, `sticky` in the build measured",
		"Veth queues: 1 (2 for reorder-16, on a pair of its own).",
		"| xdpfwd (default) | 0 | 0 | 100k ×1.00 | 100k | 0.0 % |",
		"| Linux bridge | 120000 [110000–130000] | 2000 [1000–3000] | 100k ×1.00 | 100k | 0.0 % |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	bench := string(r.benchText())
	if !strings.Contains(bench, "BenchmarkPerf/workload=tcp-1/contender=bridge 1 0.5 Gbit/s\n") ||
		!strings.Contains(bench, "BenchmarkPerf/workload=reorder-16/contender=bridge 1 100000 pkts/s 120000 ooo/Mpkt\n") {
		t.Errorf("bench.txt:\n%s", bench)
	}
}

func TestWriteAndReadme(t *testing.T) {
	r := synthetic(t)
	dir := t.TempDir()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	back, err := LoadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Markdown() != r.Markdown() {
		t.Error("Markdown from results.json differs")
	}

	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "perf"), 0o755)
	readme := "# perf\n\nintro\n\n" + ReadmeBegin + "\nold numbers\n" + ReadmeEnd + "\n\nafter\n"
	path := filepath.Join(src, "perf", "README.md")
	os.WriteFile(path, []byte(readme), 0o644)
	if err := RewriteReadme(path, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "old numbers") || !strings.Contains(s, "intro") || !strings.HasSuffix(s, ReadmeEnd+"\n\nafter\n") {
		t.Errorf("rewritten README:\n%s", s)
	}
	if !strings.Contains(s, "| xdpfwd (default) | 120k [110k–130k] ×1.00 |") || !strings.Contains(s, "![udp_pps](charts/udp_pps.png)") {
		t.Errorf("rewritten README lacks the tables or charts:\n%s", s)
	}
	for _, chart := range []string{"udp_pps.png", "reorder.png"} {
		if _, err := os.Stat(filepath.Join(src, "perf", "charts", chart)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(s, "![reorder](charts/reorder.png)") {
		t.Errorf("rewritten README lacks the reorder chart:\n%s", s)
	}
	// A second rewrite replaces the section, not appends to it.
	if err := RewriteReadme(path, r); err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(path)
	if string(b2) != s {
		t.Error("rewriting twice changed the README")
	}
}

// TestBrief: what a run prints is where its files are and one line per
// workload that ran, not the whole of results.md.
func TestBrief(t *testing.T) {
	r := synthetic(t)
	out := r.Brief("perf-results")
	t.Logf("brief:\n%s", out)
	md := r.Markdown()
	if strings.Contains(out, "###") || len(out) > len(md)/3 {
		t.Errorf("brief is %d bytes with headings %v; want a short table, not results.md (%d bytes)", len(out), strings.Contains(out, "###"), len(md))
	}
	for _, w := range []string{"perf-results/results.md", "perf-results/results.json", "udp-64", "xdpfwd 120k", "1: 60.0k ", "rr-1k", "tcp-4"} {
		if !strings.Contains(out, w) {
			t.Errorf("brief lacks %q", w)
		}
	}
	if strings.Contains(out, "latency-2q") {
		t.Errorf("brief has a line for latency-2q, which has no sample")
	}
	// One line per workload with samples, a header, the files line and a blank.
	if n, want := strings.Count(out, "\n"), 2+1+8; n != want {
		t.Errorf("%d lines, want %d", n, want)
	}
}
