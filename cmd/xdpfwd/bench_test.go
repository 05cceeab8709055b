// `xdpfwd bench` end to end on the Linux bridge; the search it runs is
// tested in internal/ndr.

package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestBenchBridge: `xdpfwd bench` end to end on the Linux bridge, with a
// few short trials: it prints an NDR the generator could offer and a PDR
// not below it.
func TestBenchBridge(t *testing.T) {
	topo.RequireRoot(t)
	r := runBin(t, 3*time.Minute, nil, "bench", "--dut", "bridge", "--size", "64", "--trial", "300ms", "--max-trials", "3", "--max-rate", "50k")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("%s", r.stdout)
	var row []string
	for _, ln := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(ln); len(f) == 10 && f[0] == "bridge" && f[1] == "64" {
			row = f
			break
		}
	}
	if row == nil {
		t.Fatalf("no result row for bridge 64 in:\n%s", r.stdout)
	}
	ndr, err1 := strconv.ParseFloat(row[4], 64)
	pdr, err2 := strconv.ParseFloat(row[6], 64)
	if err1 != nil || err2 != nil || ndr <= 0 || ndr > 50e3*1.05 || pdr < ndr || math.IsNaN(ndr) {
		t.Fatalf("NDR %q PDR %q: want 0 < NDR ≤ 50k ≤ ... PDR ≥ NDR\n%s", row[4], row[6], r.stdout)
	}
	if row[5] != "yes" && row[5] != "no" {
		t.Fatalf("verified %q: want yes or no (--verify 3 by default)\n%s", row[5], r.stdout)
	}
	if !strings.Contains(r.stdout, "latency at 10/50/90 % of NDR") {
		t.Fatalf("no latency table:\n%s", r.stdout)
	}
	// The latency trials are paced finely: no burst beyond
	// what is due in latencyWindow, one packet at 10 % of a ≤ 50 kpps NDR.
	_, table, _ := strings.Cut(r.stdout, "latency at 10/50/90 % of NDR")
	rows := 0
	for _, ln := range strings.Split(table, "\n") {
		f := strings.Fields(ln)
		if len(f) != 8 || f[0] != "bridge" {
			continue
		}
		rows++
		rate, err1 := strconv.ParseFloat(f[2], 64)
		burst, err2 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil || burst < 1 || float64(burst) > max(1, rate*latencyWindow.Seconds()) {
			t.Fatalf("latency row %q: burst %s at %s pps, want 1 .. what is due in %v\n%s", ln, f[3], f[2], latencyWindow, r.stdout)
		}
	}
	if rows != 3 {
		t.Fatalf("%d latency rows with a burst column, want 3 (10, 50, 90 %%)\n%s", rows, r.stdout)
	}
}
