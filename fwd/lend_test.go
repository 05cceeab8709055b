package fwd_test

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestFreezeKeepsBurst: a copy-mode worker's queue lends its whole fill
// ring (4,096) at rest, so a burst larger than a flood's lend (16
// batches, 1,024) that arrives while the forwarder is frozen (a
// handover's pause) waits on the RX ring, none dropped for an empty fill
// ring, and is forwarded on thaw. That a worker also braces a flood's
// lower lend before it parks is rxring's TestBrace and the park's call
// (worker.takeChanges): at rest there is nothing to brace, so this test
// does not tell a missing brace.
func TestFreezeKeepsBurst(t *testing.T) {
	p := newPair(t, topo.Options{})
	r := start(t, p, fwd.Config{})
	requirePing(t, "before", p.A, p.V4B, 3)
	if l := r.f.LinkStats(0); l.RXLend != 4096 {
		t.Fatalf("link A lends %d frames at rest, want its fill ring, 4096", l.RXLend)
	}
	// More than a flood's lend, less than the RX ring (2,048) the frames
	// wait on while nobody reads it.
	const count = 16*64 + 700
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
