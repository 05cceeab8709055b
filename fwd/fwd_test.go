package fwd_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/umem"
)

// running is a forwarder started on a test pair.
type running struct {
	f      *fwd.Forwarder
	cancel context.CancelFunc
	done   chan error
	sum    *fwd.Summary
}

func newPair(t *testing.T, opt topo.Options) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// start runs a forwarder between the pair's root-side links. Cleanup stops
// it if the test did not.
func start(t *testing.T, p *topo.Pair, cfg fwd.Config) *running {
	t.Helper()
	cfg.Links = []string{p.LinkA, p.LinkB}
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{f: f, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the run and checks the UMEM came back whole.
func (r *running) stop(t *testing.T) fwd.Summary {
	t.Helper()
	if r.sum != nil {
		return *r.sum
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
	s, err := r.f.Shutdown()
	r.sum = &s
	if err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if s.UMEM.LeakedAddresses != 0 {
		t.Errorf("%d UMEM addresses leaked", s.UMEM.LeakedAddresses)
	}
	if err := r.f.Region().Check(); err != nil {
		t.Errorf("UMEM accounting after stop: %v", err)
	}
	for _, z := range r.f.Region().Zones() {
		if c := z.Counts(); c[umem.Free] != z.Len() {
			t.Errorf("zone %s after stop: %v (want all %d free)", z.Name(), c, z.Len())
		}
	}
	return s
}

// settled reads both links' counters once A→B is quiet: every packet
// received on A (one queue, no user-space drops) sent on B. A worker
// publishes a batch's rx count before its tx count, and on a loaded machine
// may be descheduled in between, and stray packets (late TCP ACKs) may be
// crossing; a snapshot then is skewed. Gives up after 2 s and returns the
// last one.
func settled(f *fwd.Forwarder) [2]fwd.LinkStats {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := [2]fwd.LinkStats{f.LinkStats(0), f.LinkStats(1)}
		if s[0].RXPackets == s[1].TXPackets || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestForwardBothWays: ICMP, IPv6, a 64 MiB TCP transfer each way, and
// 100,000 counted UDP datagrams cross a real forwarder between two
// namespaces; afterwards the UMEM is whole.
func TestForwardBothWays(t *testing.T) {
	p := newPair(t, topo.Options{})
	r := start(t, p, fwd.Config{})

	for _, c := range []struct {
		name string
		src  *topo.NS
		dst  netip.Addr
	}{{"v4 A→B", p.A, p.V4B}, {"v4 B→A", p.B, p.V4A}, {"v6 A→B", p.A, p.V6B}, {"v6 B→A", p.B, p.V6A}} {
		res, err := topo.Ping(c.src, c.dst, 3, 3*time.Second)
		if err != nil || res.Received != 3 {
			t.Fatalf("ping %s: %+v %v", c.name, res, err)
		}
	}

	// VLAN-tagged frames cross unchanged, tag and all (this kernel has no
	// 8021q, so raw tagged frames stand in for a VLAN interface).
	for _, vid := range []uint16{100, 4094} {
		n, err := topo.VLANFrames(p.A, p.B, vid, 50, 3*time.Second)
		if err != nil || n != 50 {
			t.Fatalf("VLAN %d A→B: %d of 50 frames arrived intact: %v", vid, n, err)
		}
		if n, err = topo.VLANFrames(p.B, p.A, vid, 50, 3*time.Second); err != nil || n != 50 {
			t.Fatalf("VLAN %d B→A: %d of 50 frames arrived intact: %v", vid, n, err)
		}
	}

	const tcpBytes = 64 << 20
	for _, c := range []struct {
		name     string
		src, dst *topo.NS
		addr     netip.Addr
	}{{"v4 A→B", p.A, p.B, p.V4B}, {"v6 B→A", p.B, p.A, p.V6A}} {
		res, err := topo.TCPTransfer(c.src, c.dst, c.addr, tcpBytes, 60*time.Second)
		if err != nil {
			t.Fatalf("TCP %s: %v", c.name, err)
		}
		if res.Bytes != tcpBytes {
			t.Fatalf("TCP %s: %d bytes, want %d", c.name, res.Bytes, tcpBytes)
		}
		t.Logf("TCP %s: %d MiB byte-exact in %v (%.2f Gbit/s)", c.name, res.Bytes>>20, res.Elapsed.Round(time.Millisecond), res.Gbps)
	}

	before := settled(r.f)
	const udpCount = 100000
	u, err := topo.UDPBurst(p.A, p.B, p.V4B, udpCount, 64, 30*time.Second)
	if err != nil {
		t.Fatalf("UDP: %v", err)
	}
	after := settled(r.f)
	rx := after[0].RXPackets - before[0].RXPackets
	tx := after[1].TXPackets - before[1].TXPackets
	drops := after[0].TotalDrops() - before[0].TotalDrops() + after[1].TotalDrops() - before[1].TotalDrops()
	t.Logf("UDP: sent %d received %d (%.0f pps); forwarder rx %d tx %d drops %d", u.Sent, u.Received, u.PPS, rx, tx, drops)
	t.Logf("drops A %v B %v; paths B %v", after[0].Drops, after[1].Drops, after[1].TXPaths)
	if u.Duplicates != 0 {
		t.Errorf("UDP: %d duplicates", u.Duplicates)
	}
	if rx < uint64(u.Received) || tx < uint64(u.Received) {
		t.Errorf("forwarder counted rx %d tx %d, fewer than the %d datagrams received", rx, tx, u.Received)
	}
	// The frame path never drops in user space: what the kernel handed
	// us left on the other link (kernel-side drops happen before rx).
	if rx != tx {
		t.Errorf("forwarder rx %d != tx %d (kernel drops %d)", rx, tx, drops)
	}
	// The generator outruns everyone on 2 CPUs, so some loss is normal
	// (counted below, mostly rx_ring_full); most must still arrive.
	if u.Received < udpCount/2 {
		t.Errorf("UDP: only %d of %d datagrams arrived", u.Received, udpCount)
	}
	// What reached xdpfwd was either forwarded or dropped with a reason;
	// losses after it (the receiver's backlog or socket) are the
	// receiving kernel's to count.
	if rx+drops < udpCount*99/100 {
		t.Errorf("UDP: xdpfwd saw %d and counted %d drops: more than 1%% of %d vanished before it uncounted", rx, drops, udpCount)
	}

	s := r.stop(t)
	la, lb := s.Links[p.LinkA], s.Links[p.LinkB]
	if la.RXPackets == 0 || lb.RXPackets == 0 || la.TXPackets != lb.RXPackets || lb.TXPackets != la.RXPackets {
		t.Errorf("summary counters do not pair up: %s %+v, %s %+v", p.LinkA, la, p.LinkB, lb)
	}
	if la.BindMode == "" || la.XDPMode == "" {
		t.Errorf("summary lacks modes: %+v", la)
	}
}
