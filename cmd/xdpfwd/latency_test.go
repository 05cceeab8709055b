package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// pingTime is one reply line's RTT.
var pingTime = regexp.MustCompile(`time=([0-9.]+) ms`)

// TestLoopLatencyVsPing: on one path through xdpfwd (namespace A's eth0
// → --mode mac between the veths' root ends → B's eth0, and back), the
// counting sink's p50 latency from the generator's TX stamp to the XDP
// arrival stamp in B is of the order of ping's median RTT from A to B on
// that path: within a factor of 10 either way (ping crosses the forwarder
// twice, B's stack answering between; the generator's frames once). No
// absolute times: the machine is shared.
//
// Not a reflect loop back into A: the generator's socket holds A's eth0
// queue 0, which the sink's socket would need too (one UMEM per queue),
// and a reflector sends back on the queue a frame came in on.
func TestLoopLatencyVsPing(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close %s: %v", p.Name, err)
		}
	})
	in := func(ns *topo.NS, args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("in %s: %v: %v: %s", ns.Name, args, err, out)
		}
		return string(out)
	}
	macA, err := p.A.HardwareAddr(p.PeerA)
	if err != nil {
		t.Fatal(err)
	}
	macB, err := p.B.HardwareAddr(p.PeerB)
	if err != nil {
		t.Fatal(err)
	}
	// Both stacks quiet (no IPv6 chatter for the sink to count), and
	// static neighbours: no ARP through the forwarder.
	for _, ns := range []*topo.NS{p.A, p.B} {
		in(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	}
	in(p.A, "ip", "neigh", "replace", p.V4B.String(), "lladdr", macB.String(), "dev", p.PeerA)
	in(p.B, "ip", "neigh", "replace", p.V4A.String(), "lladdr", macA.String(), "dev", p.PeerB)
	dut, err := startXdpfwd("xdpfwd mac", binary(t), "", "run", "--mode", "mac", "--link", p.LinkA, "--link", p.LinkB,
		"--eth-peer", p.LinkA+"="+macA.String(), "--eth-peer", p.LinkB+"="+macB.String(),
		"--control", "off", "--stats-interval", "0", "--queues", "1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dut.Stop(stopTimeout); err != nil {
			t.Errorf("%v\n%s", err, dut.Output())
		}
	}()

	out := in(p.A, "ping", "-n", "-c", "200", "-i", "0.005", "-W", "1", p.V4B.String())
	var rtts []float64
	for _, m := range pingTime.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		rtts = append(rtts, v*1e6)
	}
	if len(rtts) < 100 {
		t.Fatalf("%d ping replies of 200 through xdpfwd:\n%s", len(rtts), out)
	}
	slices.Sort(rtts)
	pingP50 := rtts[len(rtts)/2]

	// The same path, the generator's frames from A into a counting sink
	// on B's eth0 (its XDP program now takes every frame there).
	sumFile := filepath.Join(t.TempDir(), "sink.json")
	sink, err := startXdpfwd("sink", binary(t), p.B.Name, "run", "--mode", "sink", "--link", p.PeerB, "--control", "off",
		"--stats-interval", "0", "--queues", "1", "--summary", sumFile)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the sink's worker polls a moment after ready (bench.go's run)
	cfg := gen.Config{Links: []string{p.PeerA}, Sizes: []int{64}, Rate: 2000, Count: 2000,
		Template: gen.Template{DstMAC: macB, DstIP: p.V4B}}
	var g *gen.Generator
	err = p.A.Do(func() (err error) { g, err = gen.New(cfg); return err })
	if err == nil {
		err = g.Run(context.Background())
		if cerr := g.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		sink.Stop(stopTimeout)
		t.Fatalf("generator: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // what is in flight arrives (bench.go's run); the count is only in the summary
	if err := sink.Stop(stopTimeout); err != nil {
		t.Fatalf("%v\n%s", err, sink.Output())
	}
	b, err := os.ReadFile(sumFile)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Sink *modes.SinkReport `json:"sink"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.Sink == nil {
		t.Fatalf("sink summary: %v\n%s", err, b)
	}
	r := sum.Sink
	if r.Received < 1000 {
		t.Fatalf("sink received %d of 2000 frames", r.Received)
	}
	p50 := float64(r.Latency.P50)
	t.Logf("ping median RTT %.1f µs (%d replies, min %.1f); sink p50 %.1f µs p99 %.1f µs over %d frames, %d timed to the batch clock (no arrival stamp)",
		pingP50/1e3, len(rtts), rtts[0]/1e3, p50/1e3, float64(r.Latency.P99)/1e3, r.Latency.Count, r.BatchClock)
	if p50 <= 0 || p50 > 10*pingP50 || p50 < pingP50/10 {
		t.Errorf("sink p50 %.1f µs against ping's median RTT %.1f µs: not within a factor of 10", p50/1e3, pingP50/1e3)
	}
	if r.BatchClock != 0 {
		t.Errorf("%d of %d latencies timed to the batch clock: the XDP arrival stamp did not reach the sink", r.BatchClock, r.Latency.Count)
	}
}
