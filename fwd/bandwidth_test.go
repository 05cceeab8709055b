package fwd_test

import (
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestRateLimitedCounted: a switch link given bandwidth limits (the
// switch told them by name before AddLink, as the daemon does) has the
// frames it sends over its egress rate dropped and counted as
// rx_rate_limited on it, and the frames for it over its ingress rate
// dropped and counted as tx_rate_limited on it too (DropOut: the link
// they were for, not the one they came in on); neither is handler_drops,
// and the link they came from counts none.
func TestRateLimitedCounted(t *testing.T) { forWorkers(t, testRateLimitedCounted) }

func testRateLimitedCounted(t *testing.T, workers int) {
	r, sw := startSwitchOn(t, 4, workers)
	const size = 1000 // bytes a frame; 1 kbit/s refills 125 bytes a second
	lim := modes.Limits{EgressRate: 1000, EgressBurst: 2 * size * 8, IngressRate: 1000, IngressBurst: 3 * size * 8}
	if err := sw.LimitPort("c", lim); err != nil {
		t.Fatal(err)
	}
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink: %v", err)
	}
	const n = 5
	for i := range n { // C → A: 2 fit its egress burst
		injectOn(t, c, seqFrame(macA, macC, 4, uint32(i), size))
	}
	soon(t, "C's frames over its egress rate counted", func() bool { return r.f.LinkStats(2).Drops[fwd.DropRXRateLimited] == n-2 })
	if got := r.links[0].CollectN(2, 5*time.Second); len(got) != 2 {
		t.Fatalf("C→A: %d frames out of l0, want 2", len(got))
	}
	for i := range n { // A → C (learned on c): 3 fit its ingress burst
		r.inject(0, i%workers, seqFrame(macC, macA, 5, uint32(i), size), fwdtest.RX{})
	}
	soon(t, "A's frames over C's ingress rate counted on c", func() bool { return r.f.LinkStats(2).Drops[fwd.DropTXRateLimited] == n-3 })
	if got := c.CollectN(3, 5*time.Second); len(got) != 3 {
		t.Fatalf("A→C: %d frames out of c, want 3", len(got))
	}
	st, l0 := r.f.LinkStats(2), r.f.LinkStats(0)
	if st.Drops[fwd.DropHandler] != 0 || st.TotalDrops() != 2*n-5 || st.TXPackets != 3 {
		t.Errorf("c: drops %v, total %d, tx %d; want rx_rate_limited %d, tx_rate_limited %d, total %d, tx 3",
			st.Drops, st.TotalDrops(), st.TXPackets, n-2, n-3, 2*n-5)
	}
	if l0.TotalDrops() != 0 {
		t.Errorf("l0 (the frames' input): drops %v; want none", l0.Drops)
	}
	sum := r.f.Summary().Links["c"].Drops
	if sum[fwd.DropRXRateLimited] != n-2 || sum[fwd.DropTXRateLimited] != n-3 {
		t.Errorf("summary: c's drops %v; want rx_rate_limited %d, tx_rate_limited %d", sum, n-2, n-3)
	}
}

// TestFloodRateLimitedCounted: a flood (broadcast, multicast, unknown
// unicast) is charged to the ingress of every limited link it reaches,
// as a forward is: a limited link gets what fits its burst, and the rest
// is counted as tx_rate_limited on it and nowhere else, while the
// unlimited links get every copy. A flood every link of which refuses it
// is dropped, counted on each of them (not handler_drops), and its
// memory comes back (startFake's cleanup checks the UMEM whole).
func TestFloodRateLimitedCounted(t *testing.T) { forWorkers(t, testFloodRateLimitedCounted) }

func testFloodRateLimitedCounted(t *testing.T, workers int) {
	const (
		n    = 5    // frames flooded from l0
		size = 1500 // bytes a frame; 1 kbit/s refills 125 bytes a second
	)
	mcast := net.HardwareAddr{0x01, 0, 0x5e, 0, 0, 1}
	unknown := net.HardwareAddr{2, 0, 0, 0, 0, 0xd}
	for _, tc := range []struct {
		name   string
		dst    net.HardwareAddr
		burstD int  // frames d's ingress burst holds, 0 for no limit
		noL1   bool // l1 removed: c and d are all the flood can reach
	}{
		{"broadcast", bcast, 0, false},
		{"multicast", mcast, 0, false},
		{"unknown-unicast", unknown, 0, false},
		{"two-limited", bcast, 1, false},
		{"every-link-refuses", bcast, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sw := startSwitchOn(t, 4, workers)
			bursts := map[string]int{"c": 3, "d": tc.burstD} // in frames
			links := map[string]*fwdtest.Link{}
			for _, name := range []string{"c", "d"} {
				if b := bursts[name]; b > 0 {
					// 1518 bytes is the least burst: it holds one frame.
					lim := modes.Limits{IngressRate: 1000, IngressBurst: uint64(max(b*size, 1518) * 8)}
					if err := sw.LimitPort(name, lim); err != nil {
						t.Fatal(err)
					}
				}
				links[name] = r.env.AddLink(name, fwdtest.LinkOptions{Queues: workers})
				if err := r.f.AddLink(name); err != nil {
					t.Fatalf("AddLink %s: %v", name, err)
				}
			}
			if tc.noL1 {
				if err := r.f.RemoveLink("l1"); err != nil {
					t.Fatal(err)
				}
			}
			rx, tx1 := r.f.LinkStats(0).RXPackets, r.f.LinkStats(1).TXPackets // startSwitchOn's
			for i := range n {
				r.inject(0, i%workers, seqFrame(tc.dst, macA, 6, uint32(i), size), fwdtest.RX{})
			}
			r.received(0, rx+n)
			for _, c := range []struct {
				name string
				idx  int
				link *fwdtest.Link
			}{{"l1", 1, r.links[1]}, {"c", 2, links["c"]}, {"d", 3, links["d"]}} {
				if c.name == "l1" && tc.noL1 {
					continue
				}
				sent := n
				if b := bursts[c.name]; b > 0 {
					sent = b
				}
				stats := func() (tx, limited, drops uint64) {
					st := r.f.LinkStats(c.idx)
					if c.idx == 1 {
						st.TXPackets -= tx1
					}
					return st.TXPackets, st.Drops[fwd.DropTXRateLimited], st.TotalDrops()
				}
				// Counted, or 5 s passed: the counts below say which.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
					if tx, lim, _ := stats(); tx == uint64(sent) && lim == uint64(n-sent) {
						break
					}
				}
				if tx, lim, drops := stats(); tx != uint64(sent) || lim != uint64(n-sent) || drops != lim {
					t.Errorf("%s: tx %d, tx_rate_limited %d, drops %d in all; want tx %d, tx_rate_limited %d and no other drop",
						c.name, tx, lim, drops, sent, n-sent)
				}
				// Counted sent, the frames are on its TX rings.
				if got := len(c.link.CollectN(sent, 5*time.Second)) + len(c.link.Collect()); got != sent {
					t.Errorf("%s: %d frames out, want %d", c.name, got, sent)
				}
				if got := r.f.Summary().Links[c.name].Drops[fwd.DropTXRateLimited]; got != uint64(n-sent) {
					t.Errorf("summary: %s's tx_rate_limited %d; want %d", c.name, got, n-sent)
				}
			}
			if l0 := r.f.LinkStats(0); l0.TotalDrops() != 0 {
				t.Errorf("l0 (the flood's input): drops %v; want none", l0.Drops)
			}
		})
	}
}

// TestFloodDropOut: a Handler's FloodDropOut, on links l0..l2 with every
// frame from l0: the links it names dropped count it (under the cause's
// TX-side reason, or its DropFor one, as DropOut does), the others are
// sent it, the link it came in on counts nothing though named, and a
// flood every link of which is dropped releases the packet, counted on
// each (startFake's cleanup checks the UMEM whole).
func TestFloodDropOut(t *testing.T) {
	const n = 20
	all := fwd.AllLinks(3)
	for _, tc := range []struct {
		name    string
		cause   fwd.DropCause
		dropped fwd.LinkSet
		reason  string // what a link of dropped counts
	}{
		{"one-dropped", fwd.CauseRateLimited, 0b100, fwd.DropTXRateLimited},
		{"every-link-dropped", fwd.CauseRateLimited, 0b110, fwd.DropTXRateLimited},
		{"own-link-named", fwd.CauseRateLimited, 0b101, fwd.DropTXRateLimited},
		{"an-rx-cause", fwd.CauseSpoofedSource, 0b010, fwd.DropSpoofedSource},
		{"no-cause", 0, 0b010, fwd.DropHandler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				for i := range pkts {
					pkts[i].FloodDropOut(all, tc.cause, tc.dropped)
				}
			})
			r := startFake(t, fwd.Config{Handler: h}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
			for i := range n {
				r.inject(0, 0, seqFrame(bcast, macA, 7, uint32(i), 100+i*50), fwdtest.RX{})
			}
			r.received(0, n)
			for o := 1; o < 3; o++ {
				want, drops := uint64(n), uint64(0)
				if tc.dropped.Has(o) {
					want, drops = 0, n
				}
				if got := uint64(len(r.links[o].Collect())); got != want {
					t.Errorf("l%d: %d frames out, want %d", o, got, want)
				}
				if st := r.f.LinkStats(o); st.TXPackets != want || st.Drops[tc.reason] != drops || st.TotalDrops() != drops {
					t.Errorf("l%d: tx %d, %s %d, drops %d in all; want %d, %d, and no other", o, st.TXPackets, tc.reason, st.Drops[tc.reason], st.TotalDrops(), want, drops)
				}
			}
			if st := r.f.LinkStats(0); st.TotalDrops() != 0 || st.TXPackets != 0 {
				t.Errorf("l0 (the input): tx %d, drops %v; want none", st.TXPackets, st.Drops)
			}
		})
	}
}
