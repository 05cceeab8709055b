package fwd_test

import (
	"testing"
	"unsafe"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestHandlerChangesLen: Packet.Len is the packet's length as received,
// and the engine lays the packet out by it. A Handler that changes it and
// reflects the packet must not get its way: longer would send the stale
// bytes past the packet (of an inline slot or a frame), shorter would cut
// it, negative would make a descriptor the kernel refuses, whose slot then
// never comes back. Such a packet is dropped, counted in handler_drops; the
// UMEM is whole at Close (fakeRun.close). On the fake environment: no root.
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
			h := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				for i := range pkts {
					fwd.SwapMACs(pkts[i].Data)
					pkts[i].Len = c.change(pkts[i].Len)
					pkts[i].Reflect()
				}
			})
			r := startFake(t, fwd.Config{Handler: h}, fwdtest.LinkOptions{})
			const sent = 200
			var bytes uint64
			for i := range sent {
				f := seqFrame(macB, macA, 1, uint32(i), 60+i*7) // inline and frame paths
				bytes += uint64(len(f))
				r.inject(0, 0, f, fwdtest.RX{})
			}
			r.received(0, sent)
			out := r.links[0].Collect()
			a := r.f.LinkStats(0)
			if c.change(100) == 100 {
				if len(out) != sent || a.TXPackets != sent || a.TXBytes != bytes {
					t.Errorf("Len unchanged: %d out, tx %d packets %d bytes; want %d, %d, %d", len(out), a.TXPackets, a.TXBytes, sent, sent, bytes)
				}
				return
			}
			if len(out) != 0 || a.TXPackets != 0 {
				t.Errorf("Len changed: %d packets left (tx %d); want none", len(out), a.TXPackets)
			}
			if a.Drops[fwd.DropHandler] != sent || a.TotalDrops() != sent {
				t.Errorf("Len changed: drops %v, want handler_drops %d, every packet received, and nothing else", a.Drops, sent)
			}
		})
	}
}

// TestPacketSize: a Packet stays 80 bytes on a 64-bit machine, what it
// was before FloodDropOut's set of links: a batch writes one per packet
// received.
func TestPacketSize(t *testing.T) {
	if n := unsafe.Sizeof(fwd.Packet{}); unsafe.Sizeof(uintptr(0)) == 8 && n > 80 {
		t.Errorf("fwd.Packet is %d bytes, want 80 at most", n)
	}
}
