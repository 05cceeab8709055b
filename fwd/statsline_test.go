package fwd_test

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
		line := fwd.StatsLine(c.names, c.prev, c.cur, time.Second)
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("%d links: %q lacks %q", len(c.names), line, w)
			}
		}
	}
}
