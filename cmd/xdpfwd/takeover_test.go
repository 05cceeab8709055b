package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// pauseRE reads a successor's pause from its log.
var pauseRE = regexp.MustCompile(`msg="took over the datapath" from_pid=\d+ pause=(\S+)`)

// tookOver waits until successor next took over from prev, which exits
// 0, and returns the pause next logged.
func tookOver(t *testing.T, prev, next *proc) time.Duration {
	t.Helper()
	waitLog(t, next, "took over the datapath", 30*time.Second)
	if code := prev.wait(10 * time.Second); code != 0 {
		t.Fatalf("the predecessor exited %d after the handover, want 0\nits log:\n%s\nthe successor's:\n%s", code, prev.stderr.String(), next.stderr.String())
	}
	if !strings.Contains(prev.stderr.String(), "handed over: the successor forwards") {
		t.Errorf("the predecessor's log does not say it handed over:\n%s", prev.stderr.String())
	}
	m := pauseRE.FindStringSubmatch(next.stderr.String())
	if m == nil {
		t.Fatalf("no pause in the successor's log:\n%s", next.stderr.String())
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDaemonHandover: a cross-connect daemon carries a sequenced UDP
// stream at 100,000 datagrams/s while it is replaced ten times in a row
// by `xdpfwd run --takeover`, each successor taking the datapath over
// from the one before: none lost, duplicated or reordered; the longest
// silence at the receiver within twice the longest outside the handovers
// (or 5 ms, the sender's own tick and a loaded machine's scheduling);
// each predecessor exits 0; the last one's summary counts every datagram,
// the handovers and no UMEM address leaked.
func TestDaemonHandover(t *testing.T) {
	p := newTestPair(t)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl,
		"--metrics", "127.0.0.1:0", "--summary", summary}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if res, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Fatalf("ping before: %+v %v", res, err)
	}
	s, err := topo.StartSeqStream(p.A, p.B, p.V4A, p.V4B, 100_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(from time.Time, d time.Duration) { // a stretch without handover, the stream's normal
		time.Sleep(time.Until(from.Add(d)))
	}
	quiet(time.Now(), 300*time.Millisecond)
	type window struct{ from, to time.Time }
	var handovers []window
	var pauses []time.Duration
	for range 10 {
		begin := time.Now()
		next := startBin(t, append(args, "--takeover", ctl)...)
		pauses = append(pauses, tookOver(t, d, next))
		handovers = append(handovers, window{begin, time.Now()})
		d = next
		quiet(time.Now(), 100*time.Millisecond)
	}
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Error(err)
	}
	var during, outside time.Duration
	for _, g := range res.Gaps {
		in := false
		for _, h := range handovers {
			if g.At.Add(g.Len).After(h.from) && g.At.Before(h.to) {
				in = true
			}
		}
		if in {
			during = max(during, g.Len)
		} else {
			outside = max(outside, g.Len)
		}
	}
	t.Logf("%d sent, %d received; longest silence %v during the handovers, %v outside; pauses %v", res.Sent, res.Received, during, outside, pauses)
	if res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 || res.Received == 0 {
		t.Errorf("across 10 handovers: %d sent, %d lost, %d reordered, %d duplicated; want none", res.Sent, res.Lost, res.Reordered, res.Duplicates)
	}
	if bound := max(2*outside, 5*time.Millisecond); during > bound {
		t.Errorf("the longest silence during the handovers, %v, is beyond %v (twice the longest outside, %v)", during, bound, outside)
	}
	d.interrupt()
	b, err := os.ReadFile(summary)
	var sum fwd.Summary
	if err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	if got := sum.Links[p.LinkB].TXPackets; got < res.Received {
		t.Errorf("the last daemon's summary: %d sent on %s, fewer than the %d the stream received: counters not carried over", got, p.LinkB, res.Received)
	}
	if sum.UMEM.LeakedAddresses != 0 || sum.UMEM.OwnershipViolations != 0 {
		t.Errorf("summary: %d UMEM addresses leaked, %d ownership violations", sum.UMEM.LeakedAddresses, sum.UMEM.OwnershipViolations)
	}
}

// newTestPair is a pair of namespaces joined by two veths whose root ends
// are a cross-connect's links; removed at cleanup.
func newTestPair(t *testing.T) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
