package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestCalmLend: on veths (copy mode) each worker's fill ring lends 16
// batches while the link is calm, not its whole ring of 4,096, so the
// kernel copies into frames it wrote recently; a burst of 2,000
// datagrams, twice that, from a sender sharing the CPUs still arrives,
// the lend growing where the kernel found the ring short.
func TestCalmLend(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 2})
	r := start(t, p, fwd.Config{Queues: 2})
	requirePing(t, "before", p.A, p.V4B, 3)
	const calm = 16 * 64 // lendBatches at the default batch, per worker
	for i := range 2 {
		if l := r.f.LinkStats(i); l.RXLend != 2*calm || l.RXLendGrowths != 0 {
			t.Fatalf("link %d calm: lends %d frames (%d growths), want %d: %d per worker", i, l.RXLend, l.RXLendGrowths, 2*calm, calm)
		}
	}
	const count = 2000
	u, err := topo.UDPBurst(p.A, p.B, p.V4B, count, 64, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in := r.f.LinkStats(0)
	t.Logf("burst: %d of %d arrived; link A lends %d, grew %d times, drops %v", u.Received, count, in.RXLend, in.RXLendGrowths, in.Drops)
	if u.Received < count*99/100 {
		t.Errorf("%d of %d datagrams arrived, want 99 %%: drops %v", u.Received, count, in.Drops)
	}
	if in.Drops[fwd.DropFillRingEmpty] > 0 && in.RXLendGrowths == 0 {
		t.Errorf("the kernel found the fill ring empty %d times, and the lend never grew", in.Drops[fwd.DropFillRingEmpty])
	}
}
