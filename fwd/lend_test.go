package fwd_test

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// calmLend is what a worker's queue of a copy-mode link lends while the
// link is calm: 16 batches at the default batch (fwd's lendBatches).
const calmLend = 16 * 64

// TestCalmLend: on veths (copy mode) each worker's fill ring lends 16
// batches while the link is calm, not its whole ring of 4,096, so the
// kernel copies into frames it wrote recently; a burst of 2,000
// datagrams, twice that, from a sender sharing the CPUs still arrives,
// the lend growing where the kernel found the ring short.
func TestCalmLend(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 2})
	r := start(t, p, fwd.Config{Queues: 2})
	requirePing(t, "before", p.A, p.V4B, 3)
	for i := range 2 {
		if l := r.f.LinkStats(i); l.RXLend != 2*calmLend || l.RXLendGrowths != 0 {
			t.Fatalf("link %d calm: lends %d frames (%d growths), want %d: %d per worker", i, l.RXLend, l.RXLendGrowths, 2*calmLend, calmLend)
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

// TestBracedFreeze: a worker about to park braces its fill rings with
// the whole fill ring the UMEM sets aside, so a burst larger than the
// calm lend that arrives while the forwarder is frozen (a handover's
// pause) waits on the RX ring, none dropped for an empty fill ring, and
// is forwarded on thaw.
func TestBracedFreeze(t *testing.T) {
	p := newPair(t, topo.Options{})
	r := start(t, p, fwd.Config{})
	requirePing(t, "before", p.A, p.V4B, 3)
	// More than the calm lend, less than the RX ring (2,048) the frames
	// wait on while nobody reads it.
	const count = calmLend + 700
	before := rxPackets(t, p.LinkA)
	if _, err := r.f.Freeze(r.f.Links()); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			r.f.Thaw()
		}
	}()
	type burst struct {
		u   topo.UDPResult
		err error
	}
	done := make(chan burst, 1)
	go func() {
		u, err := topo.UDPBurst(p.A, p.B, p.V4B, count, 64, 5*time.Second)
		done <- burst{u, err}
	}()
	// Frozen until the kernel has taken the whole burst at link A.
	deadline := time.Now().Add(3 * time.Second)
	for got := rxPackets(t, p.LinkA) - before; got < count; got = rxPackets(t, p.LinkA) - before {
		if time.Now().After(deadline) {
			t.Fatalf("link A received %d of %d datagrams in 3s", got, count)
		}
		time.Sleep(time.Millisecond)
	}
	r.f.Thaw()
	thawed = true
	b := <-done
	if b.err != nil {
		t.Fatal(b.err)
	}
	st := r.f.LinkStats(0)
	t.Logf("%d of %d arrived; link A drops %v", b.u.Received, count, st.Drops)
	if b.u.Received != count || st.Drops[fwd.DropFillRingEmpty] != 0 {
		t.Errorf("%d of %d datagrams sent while frozen arrived, %d dropped for an empty fill ring: drops %v",
			b.u.Received, count, st.Drops[fwd.DropFillRingEmpty], st.Drops)
	}
}

// rxPackets is the packets root-side link name received (a veth counts
// those its XDP program redirected too).
func rxPackets(t *testing.T, name string) uint64 {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Statistics.RxPackets
}
