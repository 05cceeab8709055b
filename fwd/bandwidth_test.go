package fwd_test

import (
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
