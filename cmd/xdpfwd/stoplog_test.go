package main

// The line the daemon logs when it stops: totals and drop reasons.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestStopLogsTotals: on SIGTERM the daemon logs, after "stopped", one line
// per link with its rx and tx totals and drops by reason, the same figures
// as the --summary file.
func TestStopLogsTotals(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	path := filepath.Join(t.TempDir(), "s.json")
	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--summary", path)
	waitAttached(t, pr, p, 10*time.Second)
	u, err := topo.UDPBurst(p.A, p.B, p.V4B, 2000, 64, 10*time.Second)
	if err != nil || u.Received == 0 {
		t.Fatalf("UDP burst A→B: %d/%d: %v", u.Received, u.Sent, err)
	}
	pr.signal(syscall.SIGTERM)
	if code := pr.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, pr.stderr.String())
	}
	stderr := pr.stderr.String()
	t.Logf("stderr:\n%s", stderr)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Links map[string]struct {
			RXPackets uint64            `json:"rx_packets"`
			TXPackets uint64            `json:"tx_packets"`
			Drops     map[string]uint64 `json:"drops"`
		} `json:"links"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	stopped := strings.Index(stderr, `msg=stopped`)
	if stopped < 0 {
		t.Fatalf("no stopped line")
	}
	re := regexp.MustCompile(`msg="link totals" link=(\S+) rx_packets=(\d+) rx_bytes=\d+ tx_packets=(\d+) tx_bytes=\d+ drops=(\d+) drops_by_reason=(\S+|"[^"]*")`)
	lines := re.FindAllStringSubmatchIndex(stderr, -1)
	if len(lines) != 2 {
		t.Fatalf("%d link totals lines, want 2 (one per link)", len(lines))
	}
	for _, m := range lines {
		if m[0] < stopped {
			t.Errorf("link totals before the stopped line")
		}
		g := func(i int) string { return stderr[m[2*i]:m[2*i+1]] }
		name := g(1)
		s, ok := sum.Links[name]
		if !ok {
			t.Errorf("link totals for %q, not a link of the summary", name)
			continue
		}
		if g(2) != strconv.FormatUint(s.RXPackets, 10) || g(3) != strconv.FormatUint(s.TXPackets, 10) {
			t.Errorf("%s: logged rx %s tx %s, summary rx %d tx %d", name, g(2), g(3), s.RXPackets, s.TXPackets)
		}
		var total uint64
		for k, v := range s.Drops {
			if countedDrop(k) {
				total += v
			}
		}
		if g(4) != strconv.FormatUint(total, 10) {
			t.Errorf("%s: logged drops %s, summary %d", name, g(4), total)
		}
		if name == p.LinkA && s.RXPackets < uint64(u.Received) {
			t.Errorf("%s: rx_packets %d, fewer than the %d datagrams B received", name, s.RXPackets, u.Received)
		}
	}
}

// TestDropReasons: the reasons sum to the total, largest first, those left
// out of the total in parentheses, every reason has a meaning.
func TestDropReasons(t *testing.T) {
	for _, c := range []struct {
		drops map[string]uint64
		want  string
	}{
		{map[string]uint64{fwd.DropTXFull: 0, fwd.DropXDPPass: 0}, "none"},
		{map[string]uint64{fwd.DropXDPPass: 2, fwd.DropTXFull: 19, fwd.DropHandoffFull: 0}, "tx_full=19 xdp_pass=2"},
		{map[string]uint64{fwd.DropRXDropped: 5, fwd.DropFillRingEmpty: 5, fwd.DropRXRingFull: 5}, "rx_dropped=5 rx_ring_full=5 (rx_fill_ring_empty_descs=5)"},
	} {
		if got := dropReasons(fwd.LinkStats{Drops: c.drops}); got != c.want {
			t.Errorf("dropReasons(%v) = %q, want %q", c.drops, got, c.want)
		}
	}
	for _, r := range []string{fwd.DropRXDropped, fwd.DropRXRingFull, fwd.DropFillRingEmpty, fwd.DropRXInvalid, fwd.DropTXInvalid,
		fwd.DropUMEMExhausted, fwd.DropRXBadDesc, fwd.DropTXNoRoom, fwd.DropHandoffFull, fwd.DropRXTooLong, fwd.DropAtStop,
		fwd.DropHandler, fwd.DropTXFull, fwd.DropXDPPass, fwd.DropSpoofedSource, fwd.DropSpoofedIP} {
		if dropMeaning[r] == "" {
			t.Errorf("drop reason %s has no meaning to print", r)
		}
	}
}
