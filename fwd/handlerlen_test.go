package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestHandlerChangesLen: Packet.Len is the packet's length as received,
// and the engine lays the packet out by it. A Handler that changes it and
// reflects the packet must not get its way: longer would send the stale
// bytes past the packet (of an inline slot or a frame), shorter would cut
// it, negative would make a descriptor the kernel refuses, whose slot then
// never comes back. Such a packet is dropped, counted in handler_drops; the
// UMEM is whole at stop (running.stop).
func TestHandlerChangesLen(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(n int) int
	}{
		{"unchanged", func(n int) int { return n }},
		{"longer", func(n int) int { return n + 100 }},
		{"shorter", func(n int) int { return n - 10 }},
		{"zero", func(int) int { return 0 }},
		{"negative", func(int) int { return -1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, topo.Options{})
			h := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				for i := range pkts {
					fwd.SwapMACs(pkts[i].Data)
					pkts[i].Len = c.change(pkts[i].Len)
					pkts[i].Reflect()
				}
			})
			r := start(t, p, fwd.Config{Handler: h})
			sf := newSeqFlows(t, p, 4, []int{0})
			sent := 0
			for range 50 {
				sent += sf.burst(t, sf.senders[0], 4)
			}
			var a fwd.LinkStats
			for deadline := time.Now().Add(3 * time.Second); ; {
				a = r.f.LinkStats(0)
				if a.RXPackets >= uint64(sent) && a.TXPackets+a.Drops[fwd.DropHandler] >= a.RXPackets || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			s := r.stop(t)
			a = s.Links[p.LinkA]
			t.Logf("sent %d: rx %d packets %d bytes, tx %d packets %d bytes, handler_drops %d, tx_invalid_descs %d, leaked %d",
				sent, a.RXPackets, a.RXBytes, a.TXPackets, a.TXBytes, a.Drops[fwd.DropHandler], a.Drops[fwd.DropTXInvalid], s.UMEM.LeakedAddresses)
			if a.RXPackets == 0 {
				t.Fatal("nothing received")
			}
			if c.change(100) == 100 {
				if a.TXPackets != a.RXPackets || a.TXBytes != a.RXBytes {
					t.Errorf("Len unchanged: rx %d packets %d bytes, reflected %d packets %d bytes", a.RXPackets, a.RXBytes, a.TXPackets, a.TXBytes)
				}
				return
			}
			if a.TXPackets != 0 || a.Drops[fwd.DropTXInvalid] != 0 {
				t.Errorf("Len changed: %d packets (%d bytes, %d received) left, %d refused by the kernel; want none",
					a.TXPackets, a.TXBytes, a.RXBytes, a.Drops[fwd.DropTXInvalid])
			}
			if a.Drops[fwd.DropHandler] != a.RXPackets {
				t.Errorf("Len changed: handler_drops %d, want every packet received (%d)", a.Drops[fwd.DropHandler], a.RXPackets)
			}
		})
	}
}
