package fwd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestJumboTCP carries a TCP transfer over MTU 9000 links with AF_XDP
// multi-buffer, for each frag order, and checks the descriptors per
// packet each layout produced.
func TestJumboTCP(t *testing.T) {
	for _, tc := range []struct {
		frameSize, fragOrder int
		wantPath             string
	}{
		{2048, -1, "chain"}, // 6 frames of 1792 B arrive; no frag zone: leaves as 6
		{2048, 3, "frag"},   // repacked into 5 chunks of 2048 B
		{2048, 4, "frag"},
		{4096, 4, "chain"}, // 3 frames of 3840 B; repacking saves nothing
	} {
		t.Run(fmt.Sprintf("frame%d-order%d", tc.frameSize, tc.fragOrder), func(t *testing.T) {
			p := newPair(t, topo.Options{MTU: 9000})
			r := start(t, p, fwd.Config{FrameSize: tc.frameSize, FragOrder: tc.fragOrder, MultiBufferMode: fwd.MultiBufferOn})
			res, err := topo.TCPTransfer(p.A, p.B, p.V4B, 64<<20, time.Minute)
			if err != nil {
				t.Fatalf("TCP over MTU 9000: %v", err)
			}
			s := r.stop(t)
			lb := s.Links[p.LinkB]
			var descs, pkts uint64
			for k, v := range lb.DescsPerPacket {
				var n uint64
				fmt.Sscan(k, &n)
				descs += n * v
				pkts += v
			}
			t.Logf("%.2f Gbit/s; to %s: paths %v, descs/packet histogram %v", res.Gbps, p.LinkB, lb.TXPaths, lb.DescsPerPacket)
			if lb.TXPaths[tc.wantPath] == 0 {
				t.Errorf("no packet took the %s path: %v", tc.wantPath, lb.TXPaths)
			}
			if lb.TXDescriptors != descs || pkts != lb.TXPackets {
				t.Errorf("histogram (%d packets, %d descs) disagrees with counters (%d, %d)", pkts, descs, lb.TXPackets, lb.TXDescriptors)
			}
		})
	}
}
