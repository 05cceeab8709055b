package fwd_test

import (
	"bytes"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestTruncatedDropped: a frame shorter than its IPv4 total length says —
// what igb delivers in zero-copy mode when its buffer is shorter than the
// frame — is dropped and counted (rx_truncated) on the receiving link, by
// the cross-connect and with a Handler; a whole frame of the same flow
// crosses. Before, the cut frame was forwarded as it came and
// counted nowhere. On the fake environment: no root.
func TestTruncatedDropped(t *testing.T) {
	across := fwd.HandlerFunc(func(pkts []fwd.Packet) {
		for i := range pkts {
			pkts[i].Forward(1 - pkts[i].Link)
		}
	})
	for _, tc := range []struct {
		name    string
		handler fwd.Handler
	}{{"xconnect", nil}, {"handler", across}} {
		t.Run(tc.name, func(t *testing.T) {
			r := startFake(t, fwd.Config{Handler: tc.handler}, fwdtest.LinkOptions{}, fwdtest.LinkOptions{})
			whole := seqFrame(macB, macA, 5557, 1, 1514)
			cut := append([]byte(nil), whole[:1024]...) // as igb cuts it with 2048-byte frames
			r.inject(0, 0, cut, fwdtest.RX{})
			r.inject(0, 0, whole, fwdtest.RX{})
			r.received(0, 2)
			out := r.links[1].Collect()
			if len(out) != 1 || !bytes.Equal(out[0].Data, whole) {
				t.Fatalf("%d frames out, want the whole one only", len(out))
			}
			a := r.f.LinkStats(0)
			if a.Drops[fwd.DropRXTruncated] != 1 || a.TotalDrops() != 1 {
				t.Errorf("drops %v, want rx_truncated 1 and nothing else", a.Drops)
			}
		})
	}
}
