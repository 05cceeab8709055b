package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestQuickRun runs the whole harness once with tiny windows: it builds the
// forwarders and the topology, runs every contender on every workload,
// removes everything and writes the results. It checks that the harness
// works end to end, not how fast anything is.
func TestQuickRun(t *testing.T) {
	topo.RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end harness run skipped with -short")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	res, err := Run(ctx, Options{
		Quick:    true,
		Rounds:   2,
		Duration: 200 * time.Millisecond,
		Warmup:   100 * time.Millisecond,
		CostRate: 20000,
		Out:      out,
		Command:  "go test ./perf",
		Progress: &progress,
	})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	// Every contender that can run here produced non-zero figures on every
	// workload that applies to it. Only asavie may be unavailable (its
	// module must be fetched); the others need nothing but the kernel.
	contenders, workloads := map[string]*contender{}, map[string]*workload{}
	for _, c := range contenderTable() {
		contenders[c.Name] = c
	}
	for _, w := range workloadTable() {
		workloads[w.Name] = w
	}
	for _, c := range res.Contenders {
		if c.Skipped != "" || !c.Ran {
			if c.Name == "asavie" && strings.HasPrefix(c.Skipped, "not run: ") {
				t.Logf("%s could not be built here: %s", c.Name, c.Skipped)
				continue
			}
			t.Errorf("%s did not run: %s %v", c.Name, c.Skipped, c.Errors)
			continue
		}
		if len(c.Errors) > 0 {
			t.Errorf("%s: %v", c.Name, c.Errors)
		}
		for _, w := range res.Workloads {
			if !workloads[w.Name].applies(contenders[c.Name]) {
				continue
			}
			// The net CPU cost is a difference and may be anywhere;
			// the figures it is made of must be positive.
			metrics := []string{w.Metric}
			switch w.Group {
			case "cost":
				// The machine-wide figure comes from /proc/stat, whose
				// tick accounting can read 0 over a short window; it
				// must exist, the process figure must be positive.
				metrics = []string{"pps", "own_cpu_ns_per_pkt"}
				if _, ok := res.stat(c.Name, w.Name, "cpu_ns_per_pkt"); !ok {
					t.Errorf("%s/%s: no cpu_ns_per_pkt", c.Name, w.Name)
				}
			case "rr":
				metrics = append(metrics, "p50_us", "p99_us", "p999_us")
			case "reorder":
				// Out-of-order may well be 0; what arrived may not.
				metrics = []string{"pps", "sent_pps"}
				if _, ok := res.stat(c.Name, w.Name, w.Metric); !ok {
					t.Errorf("%s/%s: no %s", c.Name, w.Name, w.Metric)
				}
			}
			// A window this short can fall entirely into a TCP
			// retransmission timeout on a busy machine; one good
			// round of two is what the harness must deliver.
			for _, m := range metrics {
				if st, ok := res.stat(c.Name, w.Name, m); !ok || !(st.Median > 0) {
					t.Errorf("%s/%s: %s = %+v (%v), want > 0", c.Name, w.Name, m, st, ok)
				}
			}
			if w.Group == "cost" && !c.Baseline {
				if _, ok := res.stat(c.Name, w.Name, "own_cpu_ns_per_pkt_net"); !ok {
					t.Errorf("%s/%s: no net CPU cost (baseline missing?)", c.Name, w.Name)
				}
			}
		}
	}
	for _, s := range res.Samples {
		if s.Error != "" {
			t.Logf("round %d %s/%s failed: %s", s.Round, s.Contender, s.Workload, s.Error)
		}
	}
	if !res.hasRef() {
		t.Errorf("no sample of the reference contender %s", refContender)
	}

	// Reordering: a flow spread over two queues keeps its order through
	// xdpfwd's hash and sticky choices, whatever --xps cpu does; each ran
	// with two queues and the mode it was given.
	cpu, _ := res.stat("xdpfwd-xps-cpu", "reorder-16", "ooo_per_million")
	for _, name := range []string{"xdpfwd", "xdpfwd-xps-hash", "xdpfwd-xps-sticky"} {
		if st, ok := res.stat(name, "reorder-16", "ooo_per_million"); ok && cpu.Median > 0 && st.Median >= cpu.Median {
			t.Errorf("%s reordered %.0f per million, not fewer than --xps cpu's %.0f", name, st.Median, cpu.Median)
		}
	}
	t.Logf("reorder-16, out-of-order per million: cpu %.0f [%.0f–%.0f]", cpu.Median, cpu.Min, cpu.Max)
	for _, mode := range []string{"cpu", "hash", "sticky"} {
		if got, ok := res.contenderDetail("xdpfwd-xps-"+mode, "xps_mode"); !ok || got != mode {
			t.Errorf("xdpfwd-xps-%s ran with xps mode %q, want %q", mode, got, mode)
		}
	}
	var q2 bool
	for _, c := range res.Contenders {
		if c.Name == "xdpfwd-xps-cpu" {
			q2 = fmt.Sprint(c.Details["queues"]) == "2"
		}
	}
	if !q2 {
		t.Error("xdpfwd-xps-cpu did not run with two queues")
	}

	// The topology is gone: three pairs (one queue with and without
	// endpoint offloads, two queues for the reordering workload).
	if len(res.Topology) < 12 {
		t.Errorf("topology %v: want at least six namespaces and six links", res.Topology)
	}
	if left := leftovers(res.Topology); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	for _, item := range res.Topology {
		kind, name, _ := strings.Cut(item, " ")
		if kind == "link" || kind == "bridge" {
			if _, err := netlink.LinkByName(name); err == nil {
				t.Errorf("%s still exists", item)
			}
		}
		if kind == "netns" {
			if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
				t.Errorf("%s still exists", item)
			}
		}
	}

	// results.json parses and holds every sample.
	back, err := LoadResults(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(back.Samples) != len(res.Samples) || len(back.Samples) == 0 {
		t.Errorf("results.json has %d samples, the run %d", len(back.Samples), len(res.Samples))
	}
	if back.Markdown() != res.Markdown() {
		t.Errorf("tables rendered from results.json differ from the run's")
	}

	// The charts exist and are PNGs.
	for _, name := range []string{"udp_pps.png", "cpu_cost.png", "tcp_bulk.png", "rr_tps.png", "rr_latency.png", "reorder.png"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Errorf("chart: %v", err)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
			t.Errorf("%s: not a PNG chart (%d bytes)", name, len(b))
		}
	}
	bench, err := os.ReadFile(filepath.Join(out, "bench.txt"))
	if err != nil || !bytes.Contains(bench, []byte("BenchmarkPerf/workload=udp-64/contender=xdpfwd 1 ")) {
		t.Errorf("bench.txt: %v\n%s", err, bench)
	}
	md := res.Markdown()
	for _, want := range []string{"### UDP", "### CPU per forwarded packet", "### TCP bulk", "### TCP RR", "### Reordering", "| xdpfwd --xps cpu |", "| xdpfwd (default) |"} {
		if !strings.Contains(md, want) {
			t.Errorf("tables lack %q:\n%s", want, md)
		}
	}
	t.Logf("tables:\n%s", md)
}
