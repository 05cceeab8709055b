package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/perf/internal/report"
)

func TestSelect(t *testing.T) {
	if cs, err := selectContenders([]string{"bridge", "xdpfwd"}); err != nil || len(cs) != 2 || cs[0].Name != "xdpfwd" {
		t.Errorf("selectContenders keeps table order: %v %v", cs, err)
	}
	if _, err := selectContenders([]string{"nope"}); err == nil || !strings.Contains(err.Error(), "bridge") {
		t.Errorf("unknown contender: %v", err)
	}
	// The configurations run on request (--spin busy, …) only when named.
	all, _ := selectContenders(nil)
	if i := slices.IndexFunc(all, func(c *contender) bool { return c.Name == "xdpfwd-busy" }); i >= 0 || len(all) == 0 {
		t.Errorf("a run of all contenders has %d, xdpfwd-busy at %d; want it left out", len(all), i)
	}
	if cs, err := selectContenders([]string{"xdpfwd-busy", "testpmd"}); err != nil || len(cs) != 2 || cs[0].Name != "xdpfwd-busy" {
		t.Errorf("--only xdpfwd-busy,testpmd: %v %v", cs, err)
	}
	ws, err := selectWorkloads([]string{"udp", "rr-1k"})
	if err != nil || len(ws) != 4 {
		t.Errorf("selectWorkloads(udp, rr-1k) = %d workloads, %v", len(ws), err)
	}
	if _, err := selectWorkloads([]string{"udp-9000"}); err == nil {
		t.Error("unknown workload: no error")
	}
	if contenderTable()[0].Name != report.RefContender {
		t.Errorf("the reference %s must come first", report.RefContender)
	}
}

// TestQuickPlan: the quick run's plan — every contender's samples, each a
// warm-up, a window and a drain, the latency samples' requests, a warm-up
// per contender start — fits in 90 s, leaving half a minute of the two
// minutes for starting and stopping forwarders and building them.
func TestQuickPlan(t *testing.T) {
	o := &Options{Quick: true}
	o.defaults()
	cs, _ := selectContenders(nil)
	ws, _ := selectWorkloads(nil)
	var plan time.Duration
	samples, starts := 0, 0
	e := &env{o: o}
	for _, c := range cs {
		pairs := map[pairKey]bool{}
		for _, w := range ws {
			if !w.applies(c) {
				continue
			}
			samples++
			pairs[e.pairKey(c, w)] = true
			plan += o.drain()
			if w.Group == "latency" {
				plan += time.Duration(float64(w.latencyCount(o)) / float64(w.Rate) * float64(time.Second))
			} else {
				plan += o.Warmup + o.Duration
			}
		}
		starts += len(pairs)
	}
	plan += time.Duration(starts) * o.Warmup // warm before the first sample
	plan *= time.Duration(o.Rounds)
	t.Logf("quick: %d rounds × %d samples, %d starts: %v of traffic and pauses", o.Rounds, samples, starts, plan)
	if plan > 90*time.Second {
		t.Errorf("the quick run plans %v of traffic, want ≤ 90 s", plan)
	}
}

// TestReportWorkloadsTestdata: the report package's tests render
// internal/report/testdata/workloads.json, the workloads of this table as
// a run records them; it must not go stale. XDPFWD_UPDATE_TESTDATA=1
// rewrites it.
func TestReportWorkloadsTestdata(t *testing.T) {
	var ws []report.WorkloadInfo
	for _, w := range workloadTable() {
		ws = append(ws, workloadInfo(w, &Options{Queues: 1}))
	}
	want, err := json.MarshalIndent(ws, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "internal/report/testdata/workloads.json"
	if os.Getenv("XDPFWD_UPDATE_TESTDATA") == "1" {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not this workload table: run this test with XDPFWD_UPDATE_TESTDATA=1", path)
	}
}

// TestChartColours: no chart has more series than the report's palette
// has colours, so none repeats within a chart.
func TestChartColours(t *testing.T) {
	cs, _ := selectContenders(nil)
	for _, w := range workloadTable() {
		n := 0
		for _, c := range cs {
			if w.applies(c) {
				n++
			}
		}
		if n > report.Colours() {
			t.Errorf("workload %s: %d contenders, %d colours", w.Name, n, report.Colours())
		}
	}
}

// TestPodRPSFlag: --pod-rps off (the default) leaves the namespaces'
// receive where the kernel puts it; load steers it to the load CPUs; any
// other value is refused with exit code 2.
func TestPodRPSFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []int
		ok   bool
	}{
		{nil, nil, true},
		{[]string{"--pod-rps", "off"}, nil, true},
		{[]string{"--pod-rps", "load", "--load-cpus", "0"}, []int{0}, true},
		{[]string{"--pod-rps", "fwd"}, nil, false},
	} {
		o, err := parseArgs(c.args, &strings.Builder{})
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.args, err, c.ok)
			continue
		}
		if !c.ok {
			var stderr strings.Builder
			if code := Main(c.args, &strings.Builder{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "--pod-rps") {
				t.Errorf("%q: exit %d, %q; want 2 and a message naming --pod-rps", c.args, code, stderr.String())
			}
			continue
		}
		if got := o.podRPSCPUs(); !slices.Equal(got, c.want) {
			t.Errorf("%q: RPS CPUs %v, want %v", c.args, got, c.want)
		}
	}
}

// TestRefRunsWhatItsContenderRuns: --ref-src's NAME-ref runs every
// workload NAME runs, those that name their contenders (latency-1q's
// peers) too, so that a change is measured beside the code before it on
// each of its rows.
func TestRefRunsWhatItsContenderRuns(t *testing.T) {
	cs, _ := selectContenders(nil)
	byName := map[string]*contender{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	refs := refSrcContenders("/nowhere", cs)
	if len(refs) == 0 {
		t.Fatal("no -ref contenders")
	}
	for _, ref := range refs {
		c := byName[strings.TrimSuffix(ref.Name, "-ref")]
		for _, w := range workloadTable() {
			if got, want := w.applies(ref), w.applies(c); got != want {
				t.Errorf("%s runs %s: %v, %s: %v", ref.Name, w.Name, got, c.Name, want)
			}
		}
	}
}
