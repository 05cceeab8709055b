package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// TestStatsLine: two links read as two directions; one or three as what
// each link received.
func TestStatsLine(t *testing.T) {
	ls := func(rx uint64) fwd.LinkStats { return fwd.LinkStats{RXPackets: rx, Drops: map[string]uint64{}} }
	for _, c := range []struct {
		names     []string
		prev, cur []fwd.LinkStats
		want      []string
	}{
		{[]string{"a", "b"}, []fwd.LinkStats{ls(0), ls(0)}, []fwd.LinkStats{ls(10), ls(20)}, []string{"a→b", "10 pps", "b→a", "20 pps"}},
		{[]string{"a"}, []fwd.LinkStats{ls(0)}, []fwd.LinkStats{ls(5)}, []string{"a rx", "5 pps"}},
		{[]string{"a", "b", "c"}, []fwd.LinkStats{ls(0), ls(0), ls(0)}, []fwd.LinkStats{ls(1), ls(2), ls(3)}, []string{"a rx", "b rx", "c rx", "3 pps"}},
	} {
		line := statsLine(c.names, c.prev, c.cur, time.Second)
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("%d links: %q lacks %q", len(c.names), line, w)
			}
		}
	}
}

// TestStatsLineDropsByDirection: with two links, a drop shows under the
// direction of the packet dropped. What is dropped on its way out of a
// link (handoff_full, tx_no_layout, tx_full, dropped_at_stop,
// tx_invalid_descs: counted on the output link) belongs to the direction
// into it; what is dropped as it arrives (rx_ring_full, handler_drops, …)
// to the direction out of it.
func TestStatsLineDropsByDirection(t *testing.T) {
	zero := func() []fwd.LinkStats {
		return []fwd.LinkStats{{Drops: map[string]uint64{}}, {Drops: map[string]uint64{}}}
	}
	for _, c := range []struct {
		reason string
		on     int    // the link whose counters hold the drop
		want   string // the direction it must show under
	}{
		{fwd.DropHandoffFull, 1, "a→b"},
		{fwd.DropTXNoRoom, 1, "a→b"},
		{fwd.DropTXFull, 1, "a→b"},
		{fwd.DropAtStop, 1, "a→b"},
		{fwd.DropTXInvalid, 1, "a→b"},
		{fwd.DropHandoffFull, 0, "b→a"},
		{fwd.DropRXRingFull, 0, "a→b"},
		{fwd.DropHandler, 0, "a→b"},
		{fwd.DropRXRingFull, 1, "b→a"},
	} {
		cur := zero()
		cur[c.on].Drops[c.reason] = 7
		line := statsLine([]string{"a", "b"}, zero(), cur, time.Second)
		dirs := strings.Split(line, " | ")
		got := ""
		for _, d := range dirs[:2] {
			if strings.HasSuffix(d, "drops 7") {
				got = strings.Fields(d)[0]
			}
		}
		if got != c.want {
			t.Errorf("%s on link %d: shows under %q, want %q: %q", c.reason, c.on, got, c.want, line)
		}
	}
}
