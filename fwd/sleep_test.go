package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestIdleSettingsForward: every way a worker can spend its idle time —
// the default spin, a 25 µs and a 1 ms coalescing window, no spinning at
// all, kernel busy polling — forwards pings both
// ways and a UDP burst with nothing lost in user space.
func TestIdleSettingsForward(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  fwd.Config
	}{
		{"defaults", fwd.Config{}},
		{"25us coalescing", fwd.Config{Coalesce: 25 * time.Microsecond}},
		{"1ms coalescing", fwd.Config{Coalesce: time.Millisecond}},
		{"no spinning", fwd.Config{Spin: -1}},
		{"busy polling", fwd.Config{BusyPoll: 20 * time.Microsecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, topo.Options{})
			r := start(t, p, c.cfg)
			for _, d := range []struct {
				name string
				src  *topo.NS
				dst  *topo.NS
			}{{"A→B", p.A, p.B}, {"B→A", p.B, p.A}} {
				addr := p.V4B
				if d.dst == p.A {
					addr = p.V4A
				}
				res, err := topo.Ping(d.src, addr, 3, 3*time.Second)
				if err != nil || res.Received != 3 {
					t.Fatalf("ping %s: %+v %v", d.name, res, err)
				}
			}
			before := settled(r.f)
			const n = 5000
			u, err := topo.UDPBurst(p.A, p.B, p.V4B, n, 64, 20*time.Second)
			if err != nil {
				t.Fatalf("UDP: %v", err)
			}
			// A batch's counts are added just after it is sent: B can hold
			// the last one before rx and tx count it (and agree).
			after := settled(r.f)
			for deadline := time.Now().Add(2 * time.Second); after[0].RXPackets-before[0].RXPackets < uint64(u.Received) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
				after = settled(r.f)
			}
			rx := after[0].RXPackets - before[0].RXPackets
			tx := after[1].TXPackets - before[1].TXPackets
			t.Logf("UDP: sent %d received %d; forwarder rx %d tx %d", u.Sent, u.Received, rx, tx)
			if rx != tx {
				t.Errorf("forwarder rx %d != tx %d", rx, tx)
			}
			if u.Received < n/2 || rx < uint64(u.Received) {
				t.Errorf("UDP: %d of %d datagrams arrived, forwarder rx %d", u.Received, n, rx)
			}
		})
	}
}
