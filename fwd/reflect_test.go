package fwd_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/xps"
)

// TestReflectOutsideFlowTable: a Handler that reflects some flows and
// forwards the others, on two queues in sticky mode. A reflected packet
// leaves by the socket it came in on, without the flow table: its
// completion must not be taken off the table's in-flight counts either,
// or it subtracts what was never added (underflows, clamped at 0) and,
// when its address last carried a forwarded flow's packet, takes that
// flow's count to 0 with packets still in flight: free to move, and to
// reorder. Once quiet, the table counts nothing in flight and no underflow.
// On the fake environment: no root.
func TestReflectOutsideFlowTable(t *testing.T) {
	for _, c := range []struct {
		name    string
		reflect func(srcPort uint16) bool
	}{
		{"reflect all", func(uint16) bool { return true }},
		{"reflect odd ports, forward even", func(p uint16) bool { return p%2 == 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				for i := range pkts {
					pk := &pkts[i]
					if len(pk.Data) < 36 {
						pk.Drop()
						continue
					}
					if c.reflect(binary.BigEndian.Uint16(pk.Data[34:])) {
						fwd.SwapMACs(pk.Data)
						pk.Reflect()
					} else {
						pk.Forward(1 - pk.Link)
					}
				}
			})
			two := fwdtest.LinkOptions{Queues: 2}
			r := startFake(t, fwd.Config{Queues: 2, XPS: xps.ModeSticky, Handler: h}, two, two)
			const sent = 800
			for k := range sent {
				r.inject(0, k%2, seqFrame(macB, macA, uint16(1000+k%16), uint32(k), 100), fwdtest.RX{})
			}
			// Past the merge's slack, so the forwarded ones go too, and
			// their completions come back.
			r.env.Advance(time.Millisecond)
			var out int
			soon(t, "every packet out", func() bool {
				out += len(r.links[0].Collect()) + len(r.links[1].Collect())
				return out == sent
			})
			x := r.f.XPS()
			for deadline := time.Now().Add(5 * time.Second); x.InFlight != 0 && time.Now().Before(deadline); x = r.f.XPS() {
				r.links[0].Collect() // completions reaped late are the worker's, not ours
				time.Sleep(100 * time.Microsecond)
			}
			a := r.f.LinkStats(0)
			t.Logf("sent %d; link A rx %d tx %d (reflected); xps %+v", sent, a.RXPackets, a.TXPackets, x)
			if a.TXPackets == 0 {
				t.Fatal("nothing reflected: the test exercises nothing")
			}
			if x.Underflows != 0 {
				t.Errorf("flow table: %d completions it had not seen sent (underflows)", x.Underflows)
			}
			if x.InFlight != 0 {
				t.Errorf("flow table: %d descriptors still in flight once quiet", x.InFlight)
			}
		})
	}
}
