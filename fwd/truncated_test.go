package fwd_test

import (
	"net"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestTruncatedDropped: a frame shorter than its IPv4 total length says —
// what igb delivers in zero-copy mode when its buffer is shorter than the
// frame — is dropped and counted (rx_truncated) on the receiving link, by
// the cross-connect and with a Handler; a whole frame of the same flow
// crosses. Before issue 17 the cut frame was forwarded as it came and
// counted nowhere.
func TestTruncatedDropped(t *testing.T) {
	t.Parallel()
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
			t.Parallel()
			p := newPair(t, topo.Options{})
			r := start(t, p, fwd.Config{Handler: tc.handler})
			requirePing(t, "before", p.A, p.V4B, 2)
			srcMAC, dstMAC := macOf(t, p.A, p.PeerA), macOf(t, p.B, p.PeerB)
			whole := topo.UDPFrame(dstMAC, srcMAC, p.V4A, p.V4B, 5557, 9012, 1514)
			cut := append([]byte(nil), whole[:1024]...) // as igb cuts it with 2048-byte frames
			var sink *net.UDPConn
			if err := p.B.Do(func() (err error) {
				sink, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.V4B.AsSlice(), Port: 9012})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			waitSettled(t, r.f, true, 5*time.Second)
			before := [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
			if err := topo.SendRaw(p.A, [][]byte{cut, whole}, 5*time.Second); err != nil {
				t.Fatalf("send: %v", err)
			}
			sink.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _, err := sink.ReadFromUDP(make([]byte, 2048))
			if err != nil || n != 1514-42 {
				t.Fatalf("B's UDP socket: %d bytes, %v; want the whole frame's %d", n, err, 1514-42)
			}
			waitSettled(t, r.f, true, 5*time.Second)
			after := [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
			got := dropDelta(before[0], after[0])[fwd.DropRXTruncated]
			rx, sent := after[0].RXPackets-before[0].RXPackets, after[1].TXPackets-before[1].TXPackets
			t.Logf("a cut and a whole 1514-byte frame: %d received on %s, %d sent on %s, rx_truncated +%d",
				rx, p.LinkA, sent, p.LinkB, got)
			if got != 1 {
				t.Errorf("rx_truncated grew by %d, want 1", got)
			}
			if sent+1 > rx {
				t.Errorf("%d packets received, %d sent: the cut frame left %s", rx, sent, p.LinkB)
			}
			if d := after[0].TotalDrops() - before[0].TotalDrops(); d != got {
				t.Errorf("link A's drop total grew by %d, want the rx_truncated %d", d, got)
			}
			r.stop(t)
		})
	}
}
