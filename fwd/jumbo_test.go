package fwd_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
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

// TestTooManyFrags: a packet that arrives as more descriptors than any TX
// ring takes (18) is dropped whole and counted (rx_too_many_frags). On the
// code this test was written against, the chain was cut at 18: the head
// left as a truncated packet and the remaining descriptors were read as a
// packet of their own, whose "Ethernet header" was payload chosen by the
// sender. Here the tail, from the 19th descriptor on, is a well-formed UDP
// frame: what would leave on its own if the chain were cut. A frame of 18
// descriptors crosses. On the fake environment: no root.
func TestTooManyFrags(t *testing.T) {
	r := startFake(t, fwd.Config{FrameSize: 2048}, fwdtest.LinkOptions{MTU: 9000}, fwdtest.LinkOptions{MTU: 9000})
	r.links[0].SetMTU(40000)            // raised under the running forwarder, as New refuses it
	const per = 2048 - fwdtest.Headroom // a frame's bytes after the headroom
	big := make([]byte, 23*per)
	copy(big, macB)
	copy(big[6:], macA)
	big[12], big[13] = 0x88, 0xb5 // local experimental
	inner := seqFrame(macB, macA, 5556, 99, 100)
	for off := 18 * per; off+len(inner) <= len(big); off += per {
		copy(big[off:], inner)
	}
	most := seqFrame(macB, macA, 5556, 1, 18*per)
	r.inject(0, 0, big, fwdtest.RX{})
	r.inject(0, 0, most, fwdtest.RX{})
	r.received(0, 2)
	out := r.links[1].Collect()
	if len(out) != 1 || !bytes.Equal(out[0].Data, most) {
		t.Fatalf("%d frames out, want the one of 18 descriptors only", len(out))
	}
	a := r.f.LinkStats(0)
	if a.Drops[fwd.DropRXTooLong] != 1 || a.TotalDrops() != 1 {
		t.Errorf("drops %v, want rx_too_many_frags 1 and nothing else", a.Drops)
	}
}
